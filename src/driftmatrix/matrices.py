"""Matrices stage: score rows -> seed-level drift matrices, summaries, plots, metrics, report.

Reads ``outputs/scores/<model>/seed<s>/cutoff<iii>.json`` (docs/CONTRACTS.md), assembles one
(S, K, K) stack per model (a row that was never scored stays NaN, so a missing seed or cutoff
only thins the averages), and writes everything the report and DVC need. Logs one MLflow run
``matrices · <dataset>`` (tag ``kind=matrices``) with the per-model summary metrics and files.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import numpy as np

from driftmatrix.analysis import matrixfile
from driftmatrix.analysis.matrixfile import DriftMatrices
from driftmatrix.analysis.tables import Cohort
from driftmatrix.config import Params

log = logging.getLogger(__name__)

SEED_DIR = re.compile(r"^seed(\d+)$")
STATS = ("in_distribution", "future", "decay", "td_score", "backward")
# What the DVC stage writes for `dvc exp show` / `dvc plots diff`: git-tracked (outside the
# git-ignored outputs/), so every commit and experiment carries them.
DVC_METRICS = Path("metrics/metrics.json")
DVC_MATRICES = Path("metrics/matrices")


def read_model_scores(model_dir: str | Path) -> DriftMatrices | None:
    """The seed stack of one model from its score rows; None when it has none."""
    rows = []
    for seed_dir in sorted(Path(model_dir).iterdir()):
        if seed_dir.is_dir() and SEED_DIR.match(seed_dir.name):
            rows += [json.loads(p.read_text()) for p in sorted(seed_dir.glob("cutoff*.json"))]
    if not rows:
        return None
    first = rows[0]
    slices = [str(s) for s in first["slices"]]
    for r in rows:
        if [str(s) for s in r["slices"]] != slices or r["metric"] != first["metric"]:
            raise ValueError(f"{model_dir}: score rows disagree on slices or metric "
                             f"(seed {r['seed']}, cutoff {r['cutoff_index']}); rerun evaluate")
    seeds = sorted({int(r["seed"]) for r in rows})
    stack = np.full((len(seeds), len(slices), len(slices)), np.nan)
    for r in rows:
        stack[seeds.index(int(r["seed"])), int(r["cutoff_index"])] = np.array(r["values"], dtype=float)
    return DriftMatrices(
        model=first["model"], slices=slices, seed_values=stack,
        metric=first.get("metric_name") or first["metric"], unit=first.get("unit", ""),
        higher_is_better=bool(first["higher_is_better"]), dataset=first.get("dataset", ""),
        family=first.get("family"), seeds=seeds, extra={"metric_key": first["metric"]})


def read_scores(scores_dir: str | Path, models=None) -> dict[str, DriftMatrices]:
    """Every model under ``scores_dir`` (only ``models`` when given; missing ones are logged)."""
    scores_dir = Path(scores_dir)
    names = list(models) if models else sorted(p.name for p in scores_dir.iterdir() if p.is_dir())
    out = {}
    for name in names:
        m = read_model_scores(scores_dir / name) if (scores_dir / name).is_dir() else None
        if m is None:
            log.warning("matrices: no score rows for %s under %s; left out", name, scores_dir)
            continue
        out[name] = m
    if not out:
        raise FileNotFoundError(f"{scores_dir}: no score rows found (run the evaluate stage first)")
    return out


def _write_csv(path: Path, M: np.ndarray, slices: list[str]) -> None:
    import pandas as pd

    pd.DataFrame(M, index=pd.Index(slices, name="trained_up_to"), columns=slices).to_csv(
        path, float_format="%.6g")


def _clean(v):
    return None if isinstance(v, float) and math.isnan(v) else v


def write_outputs(cohort: Cohort, out_dir: Path, metrics_path: Path,
                  plots_dir: Path | None = None) -> list[Path]:
    """Matrix JSON/CSV per model, summary.{json,csv}, heatmaps, DVC metrics (and the long-format
    matrix CSVs DVC plots, when ``plots_dir`` is given); returns the files for MLflow."""
    from driftmatrix.reporting import dvcfiles, figures, text

    out_dir.mkdir(parents=True, exist_ok=True)
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
    sc = figures.scales(cohort)
    for name in cohort.models:
        files.append(figures.save(figures.model_heatmap(cohort, name, sc), out_dir / "plots" / f"{name}.png"))
    metrics_path.parent.mkdir(parents=True, exist_ok=True)
    metrics_path.write_text(json.dumps(
        {r["model"]: {k: _clean(r[k]) for k in STATS} for r in records}, indent=2))
    files.append(metrics_path)
    if plots_dir is not None:
        dvcfiles.write_matrix_csvs(cohort, plots_dir)  # same cells as <model>.json: not logged again
    return files


def log_to_mlflow(params: Params, cohort: Cohort, files: list[Path], dataset: str) -> str:
    """One run per dataset with the summary metrics and every file; returns the run id."""
    import mlflow

    try:
        from driftmatrix import tracking
    except ImportError:  # tracking module not present: plain MLflow setup
        tracking = None
    if tracking is not None and hasattr(tracking, "configure"):
        tracking.configure(params.tracking)
    else:
        import os

        mlflow.set_tracking_uri(os.environ.get("MLFLOW_TRACKING_URI") or params.tracking.uri)
        mlflow.set_experiment(params.tracking.experiment)
    with mlflow.start_run(run_name=f"matrices · {dataset}") as run:
        mlflow.set_tags({"kind": "matrices", "dataset": dataset, "metric": cohort.metric,
                         "models": ",".join(cohort.models)})
        metrics = {f"{m}.{k}": v for m, s in cohort.summaries.items()
                   for k, v in s.as_dict().items() if not math.isnan(v)}
        mlflow.log_metrics(metrics)
        for f in files:
            sub = "plots" if f.parent.name == "plots" else ("report" if f.suffix == ".html" else "matrices")
            mlflow.log_artifact(str(f), artifact_path=sub)
        return run.info.run_id


def run(params: Params, scores_dir: str | Path, out_dir: str | Path,
        metrics_path: str | Path | None = None, report_path: str | Path | None = None,
        track: bool = True, plots_dir: str | Path | None = None) -> Cohort:
    """The whole stage. Defaults put metrics.json and report/report.html beside ``out_dir``
    (``outputs/metrics.json``, ``outputs/report/report.html``)."""
    from driftmatrix.reporting import html

    out_dir = Path(out_dir)
    metrics_path = Path(metrics_path) if metrics_path else out_dir.parent / "metrics.json"
    report_path = Path(report_path) if report_path else out_dir.parent / "report" / "report.html"
    models = read_scores(scores_dir, [m for m in params.models])
    cohort = Cohort(models)
    dataset = cohort.first.dataset or params.dataset.name
    files = write_outputs(cohort, out_dir, metrics_path, Path(plots_dir) if plots_dir else None)
    files.append(html.run(out_dir, report_path, audit=out_dir.parent / "audit" / "report.html",
                          title=f"Drift matrices: {dataset}", cohort=cohort))
    for name, s in cohort.summaries.items():
        log.info("%s: ID %.3f  future %.3f  decay %.3f  TD %.4f", name, s.in_distribution, s.future,
                 s.decay, s.td_score)
    if track:
        run_id = log_to_mlflow(params, cohort, files, dataset)
        log.info("matrices: logged run %s", run_id)
    return cohort
