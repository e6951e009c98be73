"""``driftmatrix audit``: between-slice drift matrices, prevalence, plots, report (its MLflow run: :func:`log_folder`).

Reads only the slices and the validation results: the audit runs before any model is trained (data
drift against model decay is the report stage's). Writes ``outputs/audit/`` (docs/audit.md),
including ``window_drift``, the retraining policies' drift statistic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from driftmatrix.audit import figures, report
from driftmatrix.audit.slices import load_slices
from driftmatrix.audit.measures import Audit, AuditConfig, compute


def _frame(m: np.ndarray, labels: list[str]) -> pd.DataFrame:
    return pd.DataFrame(m, index=pd.Index(labels, name="slice_i"), columns=labels)


def write_tables(audit: Audit, out: Path) -> None:
    """Matrix CSVs, prevalence, DVC plot CSVs and drift.json."""
    labels, k = audit.labels, len(audit.labels)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    for ms in audit.measures + ([audit.window] if audit.window else []):
        _frame(ms.values, labels).to_csv(out / f"{ms.name}.csv")
        if ms.pvalues is not None:
            _frame(ms.pvalues, labels).to_csv(out / f"{ms.name}_pvalue.csv")
    prev = pd.DataFrame(audit.prevalence, columns=audit.axis).assign(index=range(k), slice=labels)
    prev = prev[["index", "slice", *audit.axis]]
    prev.to_csv(out / "prevalence.csv", index=False)
    prev.to_csv(out / "plots" / "prevalence.csv", index=False)
    curves = pd.DataFrame({"index": range(k), "slice": labels})
    for ms in audit.measures:
        curves[f"{ms.name}_vs_first"] = ms.values[0]
    curves.to_csv(out / "plots" / "label_drift.csv", index=False)
    (out / "drift.json").write_text(json.dumps(audit.to_dict(), indent=2, default=float))


def draw_figures(audit: Audit) -> dict[str, bytes]:
    labels = audit.labels
    pngs = {ms.name: figures.heatmap(ms.values, labels, ms.title, ms.unit,
                                     cmap="magma_r" if ms.higher_is_more_drift else "magma") for ms in audit.measures}
    pngs.update({f"{ms.name}_pvalue": figures.heatmap(ms.pvalues, labels, f"{ms.title}: permutation p-value", "p",
                                                      cmap="viridis")
                 for ms in audit.measures if ms.pvalues is not None})
    ylabel = {"multilabel": "positive rate per category", "regression": "share per rating level"}.get(
        audit.task, "share per class")
    pngs["prevalence"] = figures.prevalence_lines(audit.prevalence, labels, audit.axis, ylabel)
    if audit.features:
        ranked = [f for f, _ in audit.features["ranking"]]
        vs_first = np.array([[np.nan if v is None else v for v in audit.features["matrices"][f][0]] for f in ranked])
        pngs["feature_drift_vs_first"] = figures.feature_grid(vs_first, ranked, labels,
                                                              f"Feature drift against {labels[0]}", "KS / JS distance")
    return pngs


def run(params: Any, slices_dir: str | Path, out_dir: str | Path,
        validation_dir: str | Path = "outputs/validation", track: bool = True) -> dict[str, Any]:
    """Measure, write tables, figures and report.html, and with ``track`` log to MLflow (the DVC stage
    leaves that to the report stage: :func:`log_folder`); returns drift.json's content."""
    cfg = AuditConfig.from_params(params.extra.get("audit"))
    slices = load_slices(slices_dir, images=True)
    audit = compute(slices, cfg)
    out = Path(out_dir)
    write_tables(audit, out)
    pngs = draw_figures(audit)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    for name, png in pngs.items():
        (out / "figures" / f"{name}.png").write_bytes(png)
    (out / "report.html").write_text(build_report(audit, pngs, Path(validation_dir)))
    run_id = log_folder(params, out) if track else None
    return {**audit.to_dict(), "mlflow_run_id": run_id}


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text()) if path.exists() else None


def build_report(audit: Audit, pngs: Mapping[str, bytes], validation_dir: Path) -> str:
    measures = audit.measures
    results = _read_json(validation_dir / "results.json")
    summary = _read_json(validation_dir / "summary.json")
    drift_imgs = "".join(report.img(pngs[ms.name], ms.title) for ms in measures)
    pvalue_imgs = "".join(report.img(png, name) for name, png in pngs.items() if name.endswith("_pvalue"))
    sections = [
        ("Validation", report.validation_section(summary, results)),
        ("Slices that tripped a check", report.tripped_section(results)),
        ("Drift matrices", "<p class='note'>Rows = slice i, columns = slice j, time increases up and to the "
                           "right (origin lower-left), as in the model drift matrices.</p>" + drift_imgs + pvalue_imgs),
        ("Label prevalence over time", report.img(pngs["prevalence"], "prevalence")),
        *([("Feature drift", feature_section(audit, pngs))] if audit.features else []),
        ("Data drift vs model accuracy drop", report.decay_pointer()),
    ]
    return report.render(f"Data audit: {audit.dataset}", sections)


def feature_section(audit: Audit, pngs: Mapping[str, bytes]) -> str:
    """Features ranked by mean future drift, the top movers per period pair, drift against the first."""
    feats, labels = audit.features, audit.labels
    ranked = report.table(["feature", "kind", "mean drift over future pairs", f"{labels[0]} -> {labels[-1]}"],
                          [[f, feats["kinds"][f], round(v, 4), round(feats["matrices"][f][0][-1] or 0.0, 4)]
                           for f, v in feats["ranking"]])
    def names(cell):
        return ", ".join(f"{f} ({v:.2f})" for f, v in cell) or "-"

    pairs = report.table(["period", f"most drifting vs {labels[0]}", "most drifting vs the period before"],
                         [[labels[j], names(feats["top"][0][j]), names(feats["top"][j - 1][j])]
                          for j in range(1, len(labels))])
    return ("<p class='note'>Numeric features: Kolmogorov-Smirnov statistic; categorical: Jensen-Shannon "
            "distance (missing is a category). Both in [0, 1]. Per-feature K x K matrices are in drift.json "
            "(<code>features.matrices</code>).</p>" + ranked + pairs
            + report.img(pngs["feature_drift_vs_first"], "feature drift against the first slice"))


def log_folder(params: Any, out_dir: str | Path = "outputs/audit") -> str | None:
    """One run ``audit · <dataset>`` tagged ``kind=audit`` from the audit's folder (None without its
    drift.json); the report stage calls it, so that a pipeline starts MLflow once (about 2.5 s)."""
    import mlflow

    from driftmatrix.tracking.runs import configure, stage_run

    out_dir = Path(out_dir)
    doc = _read_json(out_dir / "drift.json")
    if doc is None:
        return None
    cfg = AuditConfig.from_params(params.extra.get("audit"))
    exp_id = configure(params.tracking)
    with stage_run(exp_id, f"audit · {doc['dataset']}", {"kind": "audit", "dataset": doc["dataset"]}) as run:
        mlflow.log_params({"smoothing_alpha": cfg.smoothing_alpha, "top_n": cfg.top_n, "mmd_samples": cfg.mmd_samples,
                           "permutations": cfg.permutations, "image_size": cfg.image_size})
        metrics = {f"{name}_mean_future".replace(" ", "_"): m.get("mean_future") for name, m in doc["measures"].items()}
        mlflow.log_metrics({k: v for k, v in metrics.items() if v is not None and np.isfinite(v)})
        mlflow.log_artifacts(str(out_dir), artifact_path="audit")
        return run.info.run_id
