"""Evaluate stage: score every cell of the plan that has no score yet.

Cell (i, j) uses the test split of slice j when j <= i and the whole of slice j when j > i
(protocol section 1), so no training row of a model is ever scored as in-distribution test.
Cells are keyed by their unit and slice j's content (``driftmatrix.units.plan``): appending a period
scores old checkpoints on the new slice only. Each cell is predicted on its own rows in its own
batches, so its score is the same whichever other cells are scored alongside it.

Scores live in ``<scores>/<model>/<unit key>.json``: the unit, the digest of the weights its
cells came from (a unit retrained under its key is scored afresh), its cells by key, and which
cells were last attached to which MLflow run. The environment the train stage recorded is copied
beside them, so the matrices stage keys cells exactly as they were scored, and each unit's
measured training seconds (its checkpoint record's ``seconds``) in its doc.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from driftmatrix.units.store import ENVIRONMENT, CheckpointStore, read_json, write_json
from driftmatrix.config import Params
from driftmatrix.data.table import DataError
from driftmatrix.units.plan import Cell, ModelPlan, Unit

log = logging.getLogger(__name__)


def eval_mask(slice_ids: np.ndarray, split: np.ndarray, cutoff: int, j: int) -> np.ndarray:
    """Rows of the evaluation set of cell (cutoff, j)."""
    in_slice = slice_ids == j
    return in_slice & (split == "test") if j <= cutoff else in_slice


def score_cell(outputs: np.ndarray, targets: np.ndarray, task: str,
               categories: tuple[str, ...] = (), per_row: bool = False, metric: str = "accuracy") -> dict[str, Any]:
    """One cell from the outputs on its evaluation rows (pure): value (None if empty), n, left out,
    and (classification) the fixed-size forward-pass statistics of :func:`forward_stats`, with
    ``per_row`` also each row's correctness (:func:`row_correctness`: the held-out cells j <= i,
    which input-space importance weighting reweights row by row); ``metric``: ``tasks.cell_score``'s."""
    from driftmatrix.learn.tasks import cell_score

    value, left = cell_score(task, outputs, targets, categories, metric)
    cell = {"value": None if np.isnan(value) else value, "n_eval": int(len(targets)), "left_out": left}
    stats = forward_stats(outputs, targets, task)
    if stats is not None:
        cell["stats"] = {**stats, **row_correctness(outputs, targets)} if per_row else stats
    return cell


def row_correctness(outputs: np.ndarray, targets: np.ndarray) -> dict[str, Any]:
    """Whether each row's predicted class is its label, in the cell's row order (classification):
    ``right_bits``, base64 of ``np.packbits``, and ``right_n``, the row count (1 bit a row: 8
    bytes for 60 rows, 12.5 KB for 100,000)."""
    import base64

    right = np.asarray(outputs).argmax(axis=1) == np.asarray(targets, dtype=np.int64)
    return {"right_bits": base64.b64encode(np.packbits(right)).decode("ascii"), "right_n": int(len(right))}


def decode_correctness(stats: Mapping[str, Any]) -> np.ndarray | None:
    """The bool array :func:`row_correctness` stored (None when the cell has none)."""
    import base64

    if "right_bits" not in stats:
        return None
    bits = np.frombuffer(base64.b64decode(stats["right_bits"]), dtype=np.uint8)
    return np.unpackbits(bits, count=int(stats["right_n"])).astype(bool)


#: Confidence bins of :func:`forward_stats`: x = -log10(1 - max probability) in steps of
#: ``CONF_STEP`` up to ``CONF_BINS`` bins (the last holds everything above), fine where a trained
#: model's confidences crowd (0.99, 0.999) and about 0.06 wide at 0.5.
CONF_STEP = 0.025
CONF_BINS = 320


def confidence_bin(conf: np.ndarray) -> np.ndarray:
    """Bin index of each max-probability (:data:`CONF_STEP`, :data:`CONF_BINS`)."""
    x = -np.log10(np.maximum(1.0 - np.asarray(conf, dtype=np.float64), 1e-12))
    return np.clip(np.floor(x / CONF_STEP), 0, CONF_BINS - 1).astype(np.int64)


def forward_stats(outputs: np.ndarray, targets: np.ndarray | None, task: str) -> dict[str, Any] | None:
    """What label-free estimators need from one cell's forward pass, in a size that does not grow
    with its rows (classification only; None otherwise). Fields that use the labels are
    ``confusion`` and the ``correct`` column of ``hist``; ``driftmatrix.estimate`` reads a future
    cell without them. ``targets`` None (rows without labels): ``hist`` rows are ``[class, bin, n]``
    and there is no ``confusion``.

    - ``hist``: sparse histogram over (predicted class, confidence bin): ``[class, bin, n, correct]``;
    - ``pred``: rows predicted as each class; ``confusion``: true x predicted counts;
    - ``conf_sum`` = sum of max probabilities, ``conf_var`` = sum of p (1 - p) over them,
      ``prob_sum``: sum of each class's probability.
    """
    if task not in ("binary", "multiclass") or len(outputs) == 0:
        return None
    logits = np.asarray(outputs, dtype=np.float64)
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    n_classes = probs.shape[1]
    pred, conf = probs.argmax(axis=1), probs.max(axis=1)
    flat = pred * CONF_BINS + confidence_bin(conf)
    size = n_classes * CONF_BINS
    counts = np.bincount(flat, minlength=size)
    used = np.flatnonzero(counts)
    out = {"hist": [[int(f // CONF_BINS), int(f % CONF_BINS), int(counts[f])] for f in used],
           "pred": np.bincount(pred, minlength=n_classes).tolist(), "conf_sum": float(conf.sum()),
           "conf_var": float((conf * (1.0 - conf)).sum()), "prob_sum": probs.sum(axis=0).tolist()}
    if targets is not None:
        truth = np.asarray(targets, dtype=np.int64)
        right = np.bincount(flat, weights=pred == truth, minlength=size)
        for row in out["hist"]:
            row.append(int(right[row[0] * CONF_BINS + row[1]]))
        out["confusion"] = np.bincount(truth * n_classes + pred, minlength=n_classes * n_classes).reshape(
            n_classes, n_classes).tolist()
    return out


def row_summary(values: list[float | None], cutoff: int) -> dict[str, float]:
    """The run's own in-distribution score M[i, i] and mean future score (j > i)."""
    out = {}
    if values[cutoff] is not None:
        out["in_distribution"] = values[cutoff]
    future = [v for v in values[cutoff + 1:] if v is not None]
    if future:
        out["future_mean"] = float(np.mean(future))
    return out


class ScoreStore:
    """``<root>/<model>/<unit key>.json``: the scored cells of one unit (fsynced, renamed into
    place; a file cut short reads as no cells), and ``environment.json``."""

    def __init__(self, root: str | Path, model: str):
        self.dir = Path(root) / model

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def read(self, key: str) -> dict[str, Any]:
        doc = read_json(self.path(key))
        return doc if isinstance(doc, dict) and isinstance(doc.get("cells"), dict) else {"cells": {}, "logged": {}}

    def write(self, key: str, doc: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.path(key), doc)

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("*.json") if p.name != ENVIRONMENT) if self.dir.exists() else []

    def write_environment(self, env: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.dir / ENVIRONMENT, env)

    def environment(self) -> dict[str, Any] | None:
        return read_json(self.dir / ENVIRONMENT)


def current_row(plan: ModelPlan, unit: Unit, hashes: Sequence[str], cells: Mapping[str, Any]) -> dict[str, list]:
    """The unit's drift-matrix row from its stored cells (None where a cell is not scored)."""
    values, n_eval, left_out = [], [], []
    for cell in plan.cells(unit, hashes):
        c = cells.get(cell.key) or {}
        values.append(c.get("value"))
        n_eval.append(c.get("n_eval"))
        left_out.append(c.get("left_out", []))
    return {"values": values, "n_eval": n_eval, "left_out": left_out}


class EvalBatches:
    """Each evaluation set's input batches, made once per process and reused by every checkpoint
    that scores the set: the row gather (and, for pixels that did not fit ``PixelInputs``' float
    budget, the normalisation) and the channels-last copy happen once per set, not once per
    checkpoint. Up to ``budget`` bytes are kept; past it, batches are made per call. The batches
    are the same tensors either way, so scores are unchanged."""

    BUDGET = 512 << 20

    def __init__(self, inputs, batch_size: int, budget: int = BUDGET):
        self.inputs, self.batch_size, self.left = inputs, batch_size, budget
        self.kept: dict[tuple[int, str], list] = {}

    def get(self, j: int, evalset: str, rows: np.ndarray):
        from driftmatrix.learn.train import input_batches

        if (j, evalset) in self.kept:
            return self.kept[j, evalset]
        batches = list(input_batches(self.inputs, self.batch_size, rows))
        size = sum(t.element_size() * t.nelement() for batch in batches for t in batch)
        if size <= self.left:
            self.kept[j, evalset], self.left = batches, self.left - size
        return batches


def score_task(exp, item: tuple[Unit, list[Cell], str]) -> dict[str, dict[str, Any]]:
    """Worker side: check the cells' keys, load one checkpoint and score the cells on their own rows."""
    from driftmatrix.learn.train import predict
    from driftmatrix.units.plan import slice_hashes

    unit, cells, checkpoints_dir = item
    ours = {c.key for c in exp.plan.cells(unit, slice_hashes(exp.manifest))}
    if any(c.key not in ours for c in cells):
        raise RuntimeError(f"{unit.model} seed {unit.seed} cutoff {unit.cutoff}: this worker's code, data or "
                           f"environment keys the cells of unit {unit.key} differently from the driver")
    model = exp.load_unit(CheckpointStore(checkpoints_dir, unit.model), unit.key)
    categories = tuple(c.removeprefix("label_") for c in exp.meta.label_columns)
    if exp.eval_batches is None:  # each executor's own context keeps its own
        exp.eval_batches = EvalBatches(exp.inputs, exp.cfg.eval_batch_size)
    out = {}
    for cell in cells:
        rows = np.flatnonzero(eval_mask(exp.slice_ids, exp.split, unit.cutoff_index, cell.j))
        outputs = predict(model, exp.inputs, precision=exp.cfg.precision,
                          batches=exp.eval_batches.get(cell.j, cell.evalset, rows))
        out[cell.key] = {"slice": cell.label, "j": cell.j, "evalset": cell.evalset,
                         **score_cell(outputs, exp.targets_np[rows], exp.meta.task, categories,
                                     per_row=cell.evalset == "test", metric=exp.metric.key)}
    return out


def run(params: Params, model: str, slices_dir: str | Path, checkpoints_dir: str | Path,
        out_dir: str | Path, features_dir: str | Path = "outputs/features") -> list[dict[str, Any]]:
    """Score the plan's missing cells of ``model``; attach each changed row to its unit's run."""
    from driftmatrix.runtime.executor import make_executor, runtime_config
    from driftmatrix.tracking.runs import configure_in_background
    from driftmatrix.learn.train import (WORKER_MODULES, Experiment, ExperimentInfo, ExperimentRecipe,
                                      recorded_environment, start_workers)
    from driftmatrix.units.plan import slice_hashes

    # before any training: this machine's environment, so that the error below counts what is missing
    env = recorded_environment(params, model, checkpoints_dir, resolve_if_missing=True)
    # Scoring in CPU worker processes: this process never imports torch and sets MLflow up meanwhile.
    # GPU units are scored in this process (one CUDA context, not one per CPU).
    in_workers = env.device == "cpu" and start_workers(params, model, (*WORKER_MODULES, __name__))
    mlflow_ready = configure_in_background(params.tracking)
    exp = ExperimentInfo(params, model, slices_dir, env) if in_workers else \
        Experiment(params, model, slices_dir, features_dir, env)
    plan, hashes = exp.plan, slice_hashes(exp.manifest)
    ckpts, scores = CheckpointStore(checkpoints_dir, model), ScoreStore(out_dir, model)
    untrained = [u for u in plan.units if not ckpts.done(u.key)]
    if untrained:
        raise DataError(f"{ckpts.dir}: {len(untrained)} of {len(plan.units)} units of {model} have no "
                        f"checkpoint (first: seed {untrained[0].seed} cutoff {untrained[0].cutoff}); "
                        f"run `driftmatrix train -m {model}` first")
    scores.write_environment(env.to_dict())
    docs = {u.key: current_doc(scores.read(u.key), ckpts.weights_digest(u.key)) for u in plan.units}
    todo = []
    for u in plan.units:
        missing = [c for c in plan.cells(u, hashes) if c.key not in docs[u.key]["cells"]]
        if missing:
            todo.append((u, missing, str(Path(checkpoints_dir).resolve())))
        seconds = ckpts.record(u.key).get("seconds")  # its measured training time: a retrain's cost
        if docs[u.key].get("seconds") != seconds:
            docs[u.key]["seconds"] = seconds
            if docs[u.key]["cells"] and not missing:
                scores.write(u.key, docs[u.key])
    n_cells = sum(len(m) for _, m, _ in todo)
    log.info("%s: %d cells in the plan, %d to score (%d units)", model, len(plan.units) * len(hashes), n_cells,
             len(todo))
    recipe = ExperimentRecipe.of(params, model, slices_dir, features_dir, env)
    for (unit, _, _), cells in make_executor(runtime_config(params)).map(
            score_task, recipe, todo, model=model, label="evaluate", context=None if in_workers else exp):
        doc = docs[unit.key]
        doc["unit"] = {"model": unit.model, "seed": unit.seed, "cutoff": unit.cutoff, "key": unit.key}
        doc["cells"].update(cells)
        scores.write(unit.key, doc)
    rows = RowLogs(params, exp, plan, hashes, docs)
    mlflow_ready.join()
    with rows:
        run_ids = sync(params, exp, ckpts, rows=rows.for_new_run, slices_dir=slices_dir)
        written = rows.attach_rest(run_ids)
    for record in written:  # only once MLflow has them
        scores.write(record["unit_key"], docs[record["unit_key"]])
    if written:
        log.info("%s: %d drift-matrix rows attached to their MLflow runs", plan.model, len(written))
    return written


def current_doc(doc: dict[str, Any], weights_digest: str) -> dict[str, Any]:
    """A unit's score doc, emptied when its cells came from other weights than the checkpoint's
    (the unit was retrained under the same key): then every cell is scored and attached afresh."""
    if doc.get("weights_digest") != weights_digest:
        if doc.get("cells"):
            log.info("scores of unit %s came from other weights: scored afresh", doc.get("unit", {}).get("key"))
        doc = {"cells": {}, "logged": {}, "weights_digest": weights_digest}
    return doc


def sync(params: Params, exp, store: CheckpointStore, rows=None, slices_dir: str | Path | None = None) -> dict[str, str]:
    """MLflow runs, registry versions and aliases for every finished unit of the plan; ``rows``:
    the drift-matrix row a run created now carries (``tracking.RowFor``). A run's ``model`` is the
    unit as an MLflow pyfunc model (``serving.ModelFolders``: made only for runs logged now;
    ``slices_dir`` gives its input example and image size)."""
    from driftmatrix.tracking import pyfunc as serving
    from driftmatrix.tracking import runs as tracking

    finished = [u for u in exp.plan.units if store.done(u.key)]
    extra = {"data_version": exp.manifest["data_version"]}
    with serving.ModelFolders(params, exp, {u.key: store.folder(u.key) for u in finished}, slices_dir) as models:
        return tracking.sync_units(params.tracking, exp.dataset, exp.spec.name,
                                   [store.record(u.key) for u in finished], models, extra, row=rows)


def row_record(exp, unit: Unit, row: Mapping[str, list], run_id: str | None) -> dict[str, Any]:
    """A drift-matrix row in the published score-row format (docs/CONTRACTS.md)."""
    return {"dataset": exp.dataset, "model": unit.model, "family": unit.family, "seed": unit.seed,
            "cutoff_index": unit.cutoff_index, "cutoff": unit.cutoff, "slices": list(exp.labels),
            "metric": exp.metric.key, "metric_name": exp.metric.name, "unit": exp.metric.unit,
            "higher_is_better": exp.metric.higher_is_better, **row, "run_id": run_id, "unit_key": unit.key}


class RowLogs:
    """What each unit's MLflow run gets of its drift-matrix row: metrics ``in_distribution`` and
    ``future_mean``, the evaluation dataset input and ``drift_row/*.json|csv`` artifacts.

    A run created now takes its row with it (:meth:`for_new_run`, called by the MLflow sync: no
    extra round trips); :meth:`attach_rest` then logs every other row whose cells or run changed
    since it was last attached. Row files live in a temporary folder while the block runs."""

    def __init__(self, params: Params, exp, plan: ModelPlan, hashes: Sequence[str], docs: dict[str, dict]):
        from driftmatrix.config import fingerprint

        self.exp, self.plan, self.hashes, self.docs = exp, plan, hashes, docs
        self.units = {u.key: u for u in plan.units}
        self.data = {"name": f"{exp.dataset}[all slices]", "digest": fingerprint(*hashes),
                     "source": {"path": params.dataset.path, "slices": list(exp.labels)}}
        self.params, self.written, self.tmp = params, [], None

    def __enter__(self) -> "RowLogs":
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        return self

    def __exit__(self, *exc) -> None:
        self.tmp.cleanup()

    def _row(self, unit: Unit, run_id: str) -> tuple[dict[str, float], Path] | None:
        """(metrics, folder holding drift_row/) for the unit's row under ``run_id``, or None when
        that run already has exactly these cells; marks the row as logged in its score doc."""
        doc = self.docs[unit.key]
        cells = [c.key for c in self.plan.cells(unit, self.hashes)]
        if doc.get("logged") == {"run_id": run_id, "cells": cells}:
            return None
        row = current_row(self.plan, unit, self.hashes, doc["cells"])
        record = row_record(self.exp, unit, row, run_id)
        folder = Path(self.tmp.name) / run_id
        stem = folder / "drift_row" / f"{unit.model}_cutoff-{unit.cutoff}_seed-{unit.seed}"
        stem.parent.mkdir(parents=True)
        stem.with_suffix(".json").write_text(json.dumps(record, indent=2))
        stem.with_suffix(".csv").write_text("slice,value,n_eval\n" + "".join(
            f"{lab},{'' if v is None else round(v, 6)},{n}\n"
            for lab, v, n in zip(self.exp.labels, row["values"], row["n_eval"])))
        doc["logged"] = {"run_id": run_id, "cells": cells}
        self.written.append(record)
        return row_summary(row["values"], unit.cutoff_index), folder

    def for_new_run(self, unit_key: str, run_id: str):
        """The row a run being created carries: (metrics, evaluation input, folder of artifacts)."""
        got = self._row(self.units[unit_key], run_id)
        return None if got is None else (*got, self.data, len(self.hashes))

    def attach_rest(self, run_ids: Mapping[str, str]) -> list[dict[str, Any]]:
        from driftmatrix.tracking import runs as tracking

        batch = []
        for unit in self.plan.units:
            run_id = run_ids.get(unit.key)
            got = None if run_id is None else self._row(unit, run_id)
            if got is not None:
                batch.append((run_id, *got))
        if batch:
            tracking.log_rows(self.params.tracking, batch, self.data, step=len(self.hashes))
        return self.written
