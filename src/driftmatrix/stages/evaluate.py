"""Evaluate stage: score every cell of the plan that has no score yet, then the MLflow sync.

Cell (i, j) reads the test split of slice j when j <= i and the whole slice when j > i (protocol
section 1), so no training row is scored as in-distribution test; appending a period scores old
checkpoints on the new slice only."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from driftmatrix.config import Params
from driftmatrix.errors import DataError, untrusted_model
from driftmatrix.learn.score import row_summary
from driftmatrix.units.experiment import score_task
from driftmatrix.units.plan import ModelPlan, Unit
from driftmatrix.units.store import CheckpointStore, ScoreStore, current_row, refuse_replaced_weights

log = logging.getLogger(__name__)


def run(params: Params, model: str, slices_dir: str | Path, checkpoints_dir: str | Path,
        out_dir: str | Path, features_dir: str | Path = "outputs/features") -> list[dict[str, Any]]:
    """Score the plan's missing cells of ``model``; attach each changed row to its unit's run."""
    from driftmatrix.runtime.executor import make_executor
    from driftmatrix.config import runtime_config
    from driftmatrix.tracking.runs import configure_in_background
    from driftmatrix.stages.train import WORKER_MODULES, start_workers
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.experiment import Experiment, ExperimentInfo, ExperimentRecipe
    from driftmatrix.data.table import read_manifest
    from driftmatrix.units.plan import model_plan, slice_hashes

    # before any training: this machine's environment, so that the error below counts what is missing
    env = recorded_environment(params, model, checkpoints_dir, resolve_if_missing=True)
    ckpts, scores = CheckpointStore(checkpoints_dir, model), ScoreStore(out_dir, model)
    # a trained unit that was never scored means cells to score: the worker server's imports start now
    if env.device == "cpu" and set(ckpts.keys()) - set(scores.keys()):
        start_workers(params, model, (*WORKER_MODULES, __name__))
    manifest = read_manifest(slices_dir)  # the plan needs no rows yet
    plan, hashes = model_plan(params, model, manifest, env), slice_hashes(manifest)
    untrained = [u for u in plan.units if not ckpts.done(u.key)]
    if untrained:
        raise DataError(f"{ckpts.dir}: {len(untrained)} of {len(plan.units)} units of {model} have no "
                        f"checkpoint (first: seed {untrained[0].seed} cutoff {untrained[0].cutoff}); "
                        f"run `driftmatrix train -m {model}` first")
    refuse_replaced_weights(ckpts, plan.units)
    scores.write_environment(env.to_dict())
    docs = {u.key: current_doc(scores.read(u.key), ckpts.weights_digest(u.key)) for u in plan.units}
    records = {u.key: ckpts.record(u.key) for u in plan.units}
    todo = []
    for u in plan.units:
        missing = [c for c in plan.cells(u, hashes) if c.key not in docs[u.key]["cells"]]
        if missing:
            todo.append((u, missing, str(Path(checkpoints_dir).resolve())))
        seconds = records[u.key].get("seconds")  # its measured training time: a retrain's cost
        if docs[u.key].get("seconds") != seconds:
            docs[u.key]["seconds"] = seconds
            if docs[u.key]["cells"] and not missing:
                scores.write(u.key, docs[u.key])
    log.info("%s: %d cells in the plan, %d to score (%d units)", model, len(plan.units) * len(hashes),
             sum(len(m) for _, m, _ in todo), len(todo))
    if not todo and already_synced(params, plan, hashes, docs, records):
        log.info("%s: the MLflow store already holds every unit's run, row and version", model)
        return []
    mlflow_ready = configure_in_background(params.tracking)
    # Scoring in CPU worker processes: this process never imports torch and sets MLflow up meanwhile.
    # GPU units are scored in this process (one CUDA context, not one per CPU).
    in_workers = bool(todo) and env.device == "cpu" and start_workers(params, model, (*WORKER_MODULES, __name__))
    exp = ExperimentInfo(params, model, slices_dir, env)  # torch (for Experiment) only if there is work
    recipe = ExperimentRecipe.of(params, model, slices_dir, features_dir, env)
    if todo and not in_workers:  # scored in this process (GPU, one worker): with the inputs
        exp = Experiment(params, model, slices_dir, features_dir, env)
    try:
        for (unit, _, _), cells in make_executor(runtime_config(params)).map(
                score_task, recipe, todo, model=model, label="evaluate", context=None if in_workers else exp):
            doc = docs[unit.key]
            doc["unit"] = {"model": unit.model, "seed": unit.seed, "cutoff": unit.cutoff, "key": unit.key}
            doc["cells"].update(cells)
            scores.write(unit.key, doc)
    except Exception as exc:
        if untrusted_model(exc):  # trained under params that trusted more (a changed file is refused above)
            raise DataError(f"{ckpts.dir}: a checkpoint of {model}: {exc}") from None
        raise
    rows = RowLogs(params, exp, plan, hashes, docs)
    mlflow_ready.join()
    with rows:
        run_ids = sync(params, exp, ckpts, rows=rows.for_new_run, slices_dir=slices_dir, described=rows.version)
        written = rows.attach_rest(run_ids)
    for record in written:  # only once MLflow has them
        scores.write(record["unit_key"], docs[record["unit_key"]])
    if written:
        log.info("%s: %d drift-matrix rows attached to their MLflow runs", plan.model, len(written))
    return written


def already_synced(params: Params, plan: ModelPlan, hashes: Sequence[str], docs: Mapping[str, dict],
                   records: Mapping[str, dict]) -> bool:
    """Whether the MLflow sync would write nothing: every unit's row was attached to a run with its
    current cells, and the store still holds those runs as the sync leaves them (read from a sqlite
    store without importing MLflow; other stores: False, so they are synced). ``records``: unit key
    -> its checkpoint's record."""
    from driftmatrix.tracking.runs import store_agrees

    attached = {}
    for u in plan.units:
        logged = docs[u.key].get("logged") or {}
        if logged.get("cells") != [c.key for c in plan.cells(u, hashes)]:
            return False
        attached[u.key] = logged.get("run_id")
    return store_agrees(params.tracking, params.dataset.name, plan.model, list(records.values()), attached)


def current_doc(doc: dict[str, Any], weights_digest: str) -> dict[str, Any]:
    """A unit's score doc, emptied when its cells came from other weights than the checkpoint's
    (the unit was retrained under the same key): then every cell is scored and attached afresh."""
    if doc.get("weights_digest") != weights_digest:
        if doc.get("cells"):
            log.info("scores of unit %s came from other weights: scored afresh", doc.get("unit", {}).get("key"))
        doc = {"cells": {}, "logged": {}, "weights_digest": weights_digest}
    return doc


def sync(params: Params, exp, store: CheckpointStore, rows=None,
         slices_dir: str | Path | None = None, described=None) -> dict[str, str]:
    """MLflow runs, registry versions and aliases for every finished unit, new runs with their matrix row."""
    from driftmatrix.tracking import pyfunc as serving
    from driftmatrix.tracking import runs as tracking

    finished = [u for u in exp.plan.units if store.done(u.key)]
    extra = {"data_version": exp.manifest["data_version"]}
    with serving.ModelFolders(params, exp, {u.key: store.folder(u.key) for u in finished}, slices_dir) as models:
        return tracking.sync_units(params.tracking, exp.dataset, exp.spec.name,
                                   [store.record(u.key) for u in finished], models, extra, row=rows,
                                   described=described)


def row_record(exp, unit: Unit, row: Mapping[str, list], run_id: str | None) -> dict[str, Any]:
    """A drift-matrix row in the published score-row format (docs/CONTRACTS.md)."""
    return {"dataset": exp.dataset, "model": unit.model, "family": unit.family, "seed": unit.seed,
            "cutoff_index": unit.cutoff_index, "cutoff": unit.cutoff, "slices": list(exp.labels),
            "metric": exp.metric.key, "metric_name": exp.metric.name, "unit": exp.metric.unit,
            "higher_is_better": exp.metric.higher_is_better, **row, "run_id": run_id, "unit_key": unit.key}


class RowLogs:
    """What each unit's MLflow run gets of its drift-matrix row (metrics, dataset input, artifacts).
    A run created now takes its row with it (:meth:`for_new_run`: no extra round trips);
    :meth:`attach_rest` logs every other row that changed since it was last attached."""

    def __init__(self, params: Params, exp, plan: ModelPlan, hashes: Sequence[str], docs: dict[str, dict]):
        from driftmatrix.config import fingerprint

        self.exp, self.plan, self.hashes, self.docs = exp, plan, hashes, docs
        self.units = {u.key: u for u in plan.units}
        self.data = {"name": f"{exp.dataset}[all slices]", "digest": fingerprint(*hashes),
                     "source": {"path": params.dataset.path, "slices": list(exp.labels)}}
        self.params, self.tmp = params, None
        self.written: dict[str, dict[str, Any]] = {}  # unit key -> the row record logged in this sync

    def __enter__(self) -> "RowLogs":
        import tempfile

        self.tmp = tempfile.TemporaryDirectory()
        return self

    def __exit__(self, *exc) -> None:
        self.tmp.cleanup()

    def _row(self, unit: Unit, run_id: str) -> tuple[dict[str, float], Path] | None:
        """(metrics, folder of drift_row/) of the unit's row for ``run_id``; None when already logged."""
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
        self.written[unit.key] = record
        return row_summary(row["values"], unit.cutoff_index), folder

    def for_new_run(self, unit_key: str, run_id: str):
        """The row a run being created carries: (metrics, evaluation input, folder of artifacts)."""
        got = self._row(self.units[unit_key], run_id)
        return None if got is None else (*got, self.data, len(self.hashes))

    def version(self, unit_key: str, train_rows) -> tuple[dict[str, str], str] | None:
        """A new registry version's score tags and description, from the row its run was created with."""
        from driftmatrix.tracking.registry import new_version

        record = self.written.get(unit_key)
        return None if record is None else new_version(record, train_rows)

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
        return list(self.written.values())
