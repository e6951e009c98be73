"""Matrices stage: score rows -> seed-level drift matrices, summary scores, DVC metrics.

Assembles exactly the plan's cells from ``outputs/scores``; scores of other configurations are stale
and never averaged in. Numbers only: figures, HTML and MLflow are the report stage's, so the time to
a matrix pays for neither matplotlib nor an MLflow store."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from driftmatrix.analysis import matrixfile
from driftmatrix.analysis.matrixfile import DriftMatrices
from driftmatrix.analysis.tables import Cohort
from driftmatrix.config import Params, evaluation_metric, metric_for
from driftmatrix.data.table import DataError, DatasetMeta, read_manifest
from driftmatrix.reporting import dvcfiles, text
from driftmatrix.units.environment import Environment
from driftmatrix.units.plan import ModelPlan, model_plan, slice_hashes
from driftmatrix.units.store import ScoreStore, current_row

log = logging.getLogger(__name__)

STATS = ("in_distribution", "future", "decay", "td_score", "backward")
# What the DVC stage writes for `dvc exp show` / `dvc plots diff`: git-tracked (outside the
# git-ignored outputs/), so every commit and experiment carries them.
DVC_METRICS = Path("metrics/metrics.json")
DVC_MATRICES = Path("metrics/matrices")


def assemble(plan: ModelPlan, hashes: Sequence[str], docs: Mapping[str, Mapping[str, Any]],
             metric, dataset: str, precision: str = "") -> DriftMatrices:
    """The (S, K, K) seed stack of exactly the plan's cells (pure), unscored cells NaN, and ``extra``."""
    K, S = len(plan.labels), len(plan.seeds)
    stack, n_eval = np.full((S, K, K), np.nan), np.full((K, K), np.nan)
    for unit in plan.units:
        row = current_row(plan, unit, hashes, (docs.get(unit.key) or {}).get("cells", {}))
        stack[plan.seeds.index(unit.seed), unit.cutoff_index] = [np.nan if v is None else v for v in row["values"]]
        if unit.seed == plan.seeds[0]:
            n_eval[unit.cutoff_index] = [np.nan if n is None else n for n in row["n_eval"]]
    missing = int(sum(1 for u in plan.units for c in plan.cells(u, hashes)
                      if c.key not in (docs.get(u.key) or {}).get("cells", {})))
    return DriftMatrices(
        model=plan.model, slices=list(plan.labels), seed_values=stack, metric=metric.name, unit=metric.unit,
        higher_is_better=metric.higher_is_better, dataset=dataset, family=plan.units[0].family,
        seeds=list(plan.seeds),
        extra={"metric_key": metric.key, "n_eval": n_eval.tolist(), "window": plan.window.name,
               "precision": precision, "missing_cells": missing,
               "unit_keys": [[plan.unit(s, i).key for i in range(K)] for s in plan.seeds],
               "seconds": [[(docs.get(plan.unit(s, i).key) or {}).get("seconds") for i in range(K)]
                           for s in plan.seeds]})


def read_model(params: Params, model: str, manifest: Mapping[str, Any],
               scores_dir: str | Path) -> DriftMatrices | None:
    """One model's matrices from its current plan's scores (None: nothing scored yet)."""
    store = ScoreStore(scores_dir, model)
    recorded = store.environment()
    if recorded is None:
        return None
    env = Environment.from_dict(recorded)
    plan = model_plan(params, model, manifest, env)
    current = {u.key for u in plan.units}
    docs = {k: store.read(k) for k in current}
    stale = len(set(store.keys()) - current)
    metric = metric_for(DatasetMeta.from_dict(manifest["dataset"]).task, evaluation_metric(params))
    m = assemble(plan, slice_hashes(manifest), docs, metric, params.dataset.name, env.precision)
    m.extra["stale"] = stale
    if m.extra["missing_cells"]:
        log.warning("matrices: %s has %d unscored cells of %d (run `driftmatrix evaluate -m %s`); left empty",
                    model, m.extra["missing_cells"], len(plan.units) * len(plan.labels), model)
    if stale:
        log.info("matrices: %s: %d stale score files (other seeds, slices or settings) ignored", model, stale)
    return m


def read_scores(params: Params, slices_dir: str | Path, scores_dir: str | Path) -> dict[str, DriftMatrices]:
    """Every configured model's matrices (models with no scored cell at all are left out)."""
    manifest = read_manifest(slices_dir)
    out = {}
    for name in params.models:
        m = read_model(params, name, manifest, scores_dir)
        if m is None or np.isnan(m.seed_values).all():
            log.warning("matrices: no scored cells for %s under %s; left out", name, scores_dir)
            continue
        out[name] = m
    if not out:
        raise DataError(f"{scores_dir}: no scored cells for {list(params.models)} (run the evaluate stage first)")
    return out


def _write_csv(path: Path, M: np.ndarray, slices: list[str]) -> None:
    import pandas as pd

    pd.DataFrame(M, index=pd.Index(slices, name="trained_up_to"), columns=slices).to_csv(
        path, float_format="%.6g")


def _is_matrix_file(path: Path) -> bool:
    try:
        return matrixfile.is_matrix_dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return False


def remove_stale(out_dir: Path, models: set[str]) -> list[Path]:
    """Remove this stage's matrix files of models outside ``models``: run outside DVC (which empties
    the folder first), they would otherwise reach the report and the advisor as current models."""
    removed = []
    for path in sorted(out_dir.glob("*.json")):
        if path.stem in models or path.name == "summary.json" or not _is_matrix_file(path):
            continue
        for f in (path, path.with_suffix(".csv"), path.with_name(f"{path.stem}_std.csv")):
            if f.exists():
                f.unlink()
                removed.append(f)
    return removed


def write_outputs(cohort: Cohort, out_dir: Path, metrics_path: Path,
                  plots_dir: Path | None = None) -> list[Path]:
    """Matrix JSON/CSV per model, summary.{json,csv}, DVC metrics and plots; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    removed = remove_stale(out_dir, set(cohort.models))
    if removed:
        log.info("matrices: removed the files of models no longer configured or scored: %s",
                 ", ".join(f.name for f in removed))
    files = []
    for name, m in cohort.models.items():
        matrixfile.write(m, out_dir / f"{name}.json")
        _write_csv(out_dir / f"{name}.csv", m.mean, m.slices)
        _write_csv(out_dir / f"{name}_std.csv", m.std, m.slices)
        files += [out_dir / f"{name}.json", out_dir / f"{name}.csv", out_dir / f"{name}_std.csv"]
    records = text.summary_records(cohort)
    (out_dir / "summary.json").write_text(json.dumps(
        {"dataset": cohort.first.dataset, "metric": cohort.metric, "unit": cohort.unit,
         "higherIsBetter": cohort.higher_is_better, "slices": cohort.slices,
         "cutoffs": [cohort.slices[i] for i in cohort.cutoff_indices], "models": records}, indent=2))
    (out_dir / "summary.csv").write_text(text.summary_csv(records))
    files += [out_dir / "summary.json", out_dir / "summary.csv"]
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(
        {r["model"]: {k: r[k] for k in STATS} for r in records}, indent=2))  # NaN already None
    files.append(metrics_path)
    if plots_dir is not None:
        dvcfiles.write_matrix_csvs(cohort, plots_dir)
    return files


def run(params: Params, scores_dir: str | Path, out_dir: str | Path,
        metrics_path: str | Path | None = None, plots_dir: str | Path | None = None,
        slices_dir: str | Path = "outputs/slices") -> Cohort:
    """The whole stage. ``metrics_path`` defaults to metrics.json beside ``out_dir``."""
    out_dir = Path(out_dir)
    metrics_path = Path(metrics_path) if metrics_path else out_dir.parent / "metrics.json"
    cohort = Cohort(read_scores(params, slices_dir, scores_dir))
    write_outputs(cohort, out_dir, metrics_path, Path(plots_dir) if plots_dir else None)
    for name, s in cohort.summaries.items():
        log.info("%s: ID %.3f  future %.3f  decay %.3f  TD %.4f", name, s.in_distribution, s.future,
                 s.decay, s.td_score)
    return cohort
