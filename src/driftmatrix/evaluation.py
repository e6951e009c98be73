"""Evaluate stage: score each checkpoint on every slice in one pass over all rows.

Cell (i, j) uses the test split of slice j when j <= i and the whole of slice j when j > i
(protocol section 1), so no training row of a model is ever scored as in-distribution test.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from driftmatrix.config import Params

log = logging.getLogger(__name__)


def eval_mask(slice_ids: np.ndarray, split: np.ndarray, cutoff: int, j: int) -> np.ndarray:
    """Rows of the evaluation set of cell (cutoff, j)."""
    in_slice = slice_ids == j
    return in_slice & (split == "test") if j <= cutoff else in_slice


def score_row(outputs: np.ndarray, targets: np.ndarray, slice_ids: np.ndarray, split: np.ndarray,
              cutoff: int, n_slices: int, task: str, categories: tuple[str, ...] = ()) -> dict[str, list]:
    """One drift-matrix row from the outputs of one checkpoint on every row (pure)."""
    from driftmatrix.tasks import cell_score

    values, n_eval, left_out = [], [], []
    for j in range(n_slices):
        mask = eval_mask(slice_ids, split, cutoff, j)
        value, left = cell_score(task, outputs[mask], targets[mask], categories)
        values.append(None if np.isnan(value) else value)
        n_eval.append(int(mask.sum()))
        left_out.append(left)
    return {"values": values, "n_eval": n_eval, "left_out": left_out}


def row_summary(values: list[float | None], cutoff: int) -> dict[str, float]:
    """The run's own in-distribution score M[i, i] and mean future score (j > i)."""
    out = {}
    if values[cutoff] is not None:
        out["in_distribution"] = values[cutoff]
    future = [v for v in values[cutoff + 1:] if v is not None]
    if future:
        out["future_mean"] = float(np.mean(future))
    return out


def row_path(out_dir: str | Path, model: str, seed: int, cutoff: int) -> Path:
    return Path(out_dir) / model / f"seed{seed}" / f"cutoff{cutoff:03d}.json"


def run(params: Params, model: str, slices_dir: str | Path, checkpoints_dir: str | Path,
        out_dir: str | Path, features_dir: str | Path = "outputs/features") -> list[dict[str, Any]]:
    """Score every trained unit of ``model`` not yet scored; log each row to its MLflow run."""
    from driftmatrix import tracking
    from driftmatrix.training import Experiment, predict, unit_paths

    exp = Experiment(params, model, slices_dir, features_dir)
    tracking.configure(params.tracking)
    categories = tuple(c.removeprefix("label_") for c in exp.meta.label_columns)
    K = len(exp.labels)
    written = []
    for seed in exp.cfg.seeds:
        for i in range(K):
            ckpt, sidecar = unit_paths(checkpoints_dir, model, seed, i)
            key = exp.unit_key(seed, i)
            trained = json.loads(sidecar.read_text()) if sidecar.exists() else {}
            if trained.get("config_key") != key.config_key:
                raise FileNotFoundError(f"{sidecar}: no finished checkpoint for {model} seed {seed} cutoff "
                                        f"{exp.labels[i]} (run `driftmatrix train -m {model}` first)")
            run_id = trained["run_id"]
            out = row_path(out_dir, model, seed, i)
            if out.exists() and json.loads(out.read_text()).get("config_key") == key.config_key:
                continue
            outputs = predict(exp.load_model(ckpt), exp.inputs, exp.cfg.eval_batch_size, exp.cfg.precision)
            row = score_row(outputs, exp.targets_np, exp.slice_ids, exp.split, i, K, exp.meta.task, categories)
            record = {"dataset": exp.dataset, "model": model, "family": exp.spec.family, "seed": seed,
                      "cutoff_index": i, "cutoff": exp.labels[i], "slices": exp.labels,
                      "metric": exp.metric.key, "metric_name": exp.metric.name, "unit": exp.metric.unit,
                      "higher_is_better": exp.metric.higher_is_better, **row,
                      "run_id": run_id, "config_key": key.config_key}
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(record, indent=2))
            csv = out.with_suffix(".csv")
            csv.write_text("slice,value,n_eval\n" + "".join(
                f"{lab},{'' if v is None else round(v, 6)},{n}\n"
                for lab, v, n in zip(exp.labels, row["values"], row["n_eval"])))
            tracking.log_row(run_id, row_summary(row["values"], i), [out, csv])
            written.append(record)
            log.info("scored %s seed %s cutoff %s: M[i,i]=%s", model, seed, exp.labels[i],
                     row["values"][i] if row["values"][i] is None else round(row["values"][i], 2))
    return written
