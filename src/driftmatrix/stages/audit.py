"""``driftmatrix audit``: between-slice drift matrices, prevalence, plots, report, MLflow.

Reads only the slices and the validation results: the audit runs before any model is trained.
Data drift against model decay needs the model matrices, so the report stage draws it
(:mod:`driftmatrix.reporting.drift_decay`) from ``drift.json`` and ``outputs/matrices``.

Writes under ``outputs/audit/``: ``drift.json`` (everything; ``window_drift``: the retraining
policies' drift statistic D[r, t] between the pooled training window of slices 0..r and period t,
also as ``window_drift.csv``), one CSV per K x K matrix
(``<measure>.csv``, ``<measure>_pvalue.csv`` for MMD), ``prevalence.csv``, ``plots/label_drift.csv``
and ``plots/prevalence.csv`` (DVC plots), ``figures/*.png`` and ``report.html``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from driftmatrix.audit import drift, figures, report
from driftmatrix.audit.slices import Slices, axis_names, counts_by_slice, label_levels, load_slices
from driftmatrix.config import ConfigError


@dataclass(frozen=True)
class AuditConfig:
    """``params.yaml`` section ``audit:`` (all keys optional; see docs/audit.md)."""

    smoothing_alpha: float = 0.5
    top_n: int = 10_000
    mmd_samples: int = 300
    permutations: int = 200
    image_size: int = 8
    seed: int = 0
    features: tuple[str, ...] = ()
    feature_samples: int = 5000  # per slice, for the numeric features' KS statistics
    top_features: int = 3  # features named per pair of periods

    @classmethod
    def from_params(cls, raw: Mapping[str, Any] | None) -> "AuditConfig":
        raw = dict(raw or {})
        known = {f for f in cls.__dataclass_fields__}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(f"params.yaml: audit: unknown key(s) {unknown}; expected some of {sorted(known)}")
        if "features" in raw:
            raw["features"] = tuple(raw["features"] or ())
        return cls(**raw)


@dataclass
class Measure:
    """One K x K matrix; ``drift`` says how to read it as 'more = more drift'."""

    name: str
    title: str
    unit: str
    values: np.ndarray
    pvalues: np.ndarray | None = None
    higher_is_more_drift: bool = True
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def drift(self) -> np.ndarray:
        return self.values if self.higher_is_more_drift else 1.0 - self.values


def label_measures(counts: np.ndarray, cfg: AuditConfig) -> list[Measure]:
    return [Measure("label_js", "Label shift: Jensen-Shannon divergence", "bits", drift.label_js_matrix(counts)),
            Measure("label_kl", f"Label shift: KL(P_j || P_i), add-{cfg.smoothing_alpha:g} smoothing", "nats",
                    drift.label_kl_matrix(counts, cfg.smoothing_alpha), info={"alpha": cfg.smoothing_alpha})]


def mmd_measure(name: str, title: str, vectors: np.ndarray, slice_ids: np.ndarray, k: int, cfg: AuditConfig) -> Measure:
    samples = [vectors[slice_ids == i] for i in range(k)]
    values, pvalues, sigma = drift.mmd_matrix(samples, cfg.mmd_samples, cfg.permutations, cfg.seed)
    return Measure(name, title, "MMD^2", values, pvalues,
                   info={"bandwidth": sigma, "max_samples": cfg.mmd_samples, "permutations": cfg.permutations})


def covariate_measures(slices: Slices, cfg: AuditConfig) -> list[Measure]:
    rows, k = slices.rows, len(slices.specs)
    ids = rows["slice"].to_numpy()
    out = []
    if "text" in rows:
        vocabs = [drift.top_vocabulary(rows.loc[ids == i, "text"], cfg.top_n) for i in range(k)]
        out.append(Measure("vocab_overlap", f"Covariate shift: top-{cfg.top_n} unigram vocabulary overlap", "overlap",
                           drift.pairwise(vocabs, drift.vocabulary_overlap), higher_is_more_drift=False,
                           info={"top_n": cfg.top_n, "sizes": [len(v) for v in vocabs]}))
    if slices.images is not None:
        pixels = drift.downsample_images(slices.images, cfg.image_size)
        out.append(mmd_measure("mmd_pixels", f"Covariate shift: MMD on {cfg.image_size}x{cfg.image_size} pixels",
                               pixels, ids, k, cfg))
    for path in cfg.features:
        feats = np.load(path, mmap_mode="r", allow_pickle=False)
        if len(feats) != len(rows):
            raise ConfigError(f"audit.features: {path} has {len(feats)} rows, slices have {len(rows)}")
        out.append(mmd_measure(f"mmd_{Path(path).stem}", f"Covariate shift: MMD on features {Path(path).stem}",
                               np.asarray(feats, dtype=np.float32).reshape(len(feats), -1), ids, k, cfg))
    return out


def _frame(m: np.ndarray, labels: list[str]) -> pd.DataFrame:
    return pd.DataFrame(m, index=pd.Index(labels, name="slice_i"), columns=labels)


def _json_matrix(m: np.ndarray | None) -> list | None:
    return None if m is None else [[None if not np.isfinite(v) else float(v) for v in row] for row in m]


def _mean_future(m: np.ndarray) -> float:
    vals = m[np.triu_indices(len(m), k=1)]
    vals = vals[np.isfinite(vals)]
    return float(vals.mean()) if vals.size else float("nan")


@dataclass
class Audit:
    """Everything the audit measured (arrays); :meth:`to_dict` is ``drift.json``."""

    dataset: str
    task: str
    labels: list[str]
    axis: list[str]
    counts: np.ndarray
    n: np.ndarray
    measures: list[Measure]
    features: dict[str, Any] = field(default_factory=dict)  # feature tables: per-feature drift (feature_drift)
    window: Measure | None = None  # training window 0..r vs period t (window_drift)

    @property
    def prevalence(self) -> np.ndarray:
        return drift.prevalence(self.counts, self.n)

    def to_dict(self) -> dict[str, Any]:
        return {"dataset": self.dataset, "task": self.task, "slices": self.labels, "axis": self.axis,
                "counts": self.counts.tolist(), "n": self.n.tolist(), "prevalence": _json_matrix(self.prevalence),
                "measures": {ms.name: {"title": ms.title, "unit": ms.unit, "values": _json_matrix(ms.values),
                                       "pvalues": _json_matrix(ms.pvalues),
                                       "higher_is_more_drift": ms.higher_is_more_drift,
                                       "mean_future": _mean_future(ms.values), **ms.info} for ms in self.measures},
                **({"features": self.features} if self.features else {}),
                "window_drift": None if self.window is None else {
                    "title": self.window.title, "unit": self.window.unit, "values": _json_matrix(self.window.values),
                    **self.window.info}}


def compute(slices: Slices, cfg: AuditConfig) -> Audit:
    meta, k = slices.meta, len(slices.specs)
    levels = label_levels(meta, slices.rows)
    counts, n = counts_by_slice(slices.rows, meta, levels, k)
    measures = label_measures(counts, cfg) + covariate_measures(slices, cfg)
    per_feature: dict[str, Any] = {}
    if meta.features:
        per_feature, feature_measures = feature_drift(slices, cfg)
        measures += feature_measures
    return Audit(meta.name, meta.task, slices.labels, axis_names(meta, levels), counts, n, measures, per_feature,
                 window_drift(slices, cfg))


def window_drift(slices: Slices, cfg: AuditConfig) -> Measure | None:
    """MMD² between each cutoff's pooled training window (slices 0..r) and every later period t,
    on the audit's vectors: the first ``audit.features`` file (embeddings), else the pixels, else
    the numeric feature columns (standardised, missing at the median); None for text without them."""
    rows, meta = slices.rows, slices.meta
    if cfg.features:
        x, what = np.load(cfg.features[0], mmap_mode="r", allow_pickle=False), f"features {Path(cfg.features[0]).stem}"
        x = np.asarray(x, dtype=np.float32).reshape(len(x), -1)
    elif slices.images is not None:
        x, what = drift.downsample_images(slices.images, cfg.image_size), f"{cfg.image_size}x{cfg.image_size} pixels"
    elif meta.numeric:
        from driftmatrix.data.table import feature_column
        from driftmatrix.estimate.domain import table_features

        x = table_features(np.column_stack([rows[feature_column(f)].to_numpy(dtype=float) for f in meta.numeric]))
        x, what = (x - x.mean(axis=0)) / np.where(x.std(axis=0) > 0, x.std(axis=0), 1.0), "numeric features, standardised"
    else:
        return None
    values, sigma = drift.window_mmd(x, rows["slice"].to_numpy(), len(slices.specs), cfg.mmd_samples, cfg.seed)
    return Measure("window_drift", f"Covariate shift: MMD between the training window up to i and period j, on {what}",
                   "MMD^2", values, info={"features": what, "bandwidth": sigma, "max_samples": cfg.mmd_samples})


def feature_drift(slices: Slices, cfg: AuditConfig) -> tuple[dict[str, Any], list[Measure]]:
    """Per-feature K x K drift (KS for numbers, JS distance for categories), the features drifting
    most per pair of periods, their ranking, and the unseen-category shares (``audit.features``)."""
    from driftmatrix.audit import features as fd
    from driftmatrix.data.table import feature_column

    meta, rows, k = slices.meta, slices.rows, len(slices.specs)
    ids = rows["slice"].to_numpy()
    matrices, kinds = {}, {}
    for f in meta.numeric:
        matrices[f] = fd.numeric_matrix(rows[feature_column(f)].to_numpy(dtype=float), ids, k, cfg.feature_samples,
                                        cfg.seed)
        kinds[f] = "numeric (KS)"
    for f in meta.categorical:
        matrices[f] = fd.categorical_matrix(rows[feature_column(f)].to_numpy(dtype=object), ids, k)
        kinds[f] = "categorical (JS distance)"
    frame = rows[[feature_column(f) for f in meta.categorical]]
    frame.columns = list(meta.categorical)
    unseen = fd.unseen_matrix(frame, meta.categorical, ids, rows["split"].to_numpy() == "train", k)
    missing = {f: [float(rows.loc[ids == i, feature_column(f)].isna().mean()) if (ids == i).any() else None
                   for i in range(k)] for f in meta.features}
    top = fd.top_features(matrices, cfg.top_features)
    stack = np.stack(list(matrices.values()))
    out = {"kinds": kinds, "matrices": {f: _json_matrix(m) for f, m in matrices.items()},
           "ranking": [[f, v] for f, v in fd.ranking(matrices)],
           "top": [[[[f, round(v, 4)] for f, v in cell] for cell in row] for row in top],
           "missing_share": missing, "unseen_categories": _json_matrix(unseen)}
    measures = [Measure("feature_drift_max", "Feature drift: largest per-feature drift (KS / JS distance)", "0-1",
                        np.nanmax(stack, axis=0), info={"features": list(matrices)}),
                Measure("unseen_categories", "Rows of period j with a category unseen by the training window "
                                             "of cutoff i", "share", unseen)]
    return out, measures


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
        validation_dir: str | Path = "outputs/validation") -> dict[str, Any]:
    """Measure, write tables, figures and report.html, log to MLflow; returns drift.json's content."""
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
    run_id = log_to_mlflow(params, cfg, audit, out)
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
    """Features ranked by mean future drift, the features drifting most between consecutive
    periods and against the first, and each feature's drift against the first slice."""
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


def log_to_mlflow(params: Any, cfg: AuditConfig, audit: Audit, out: Path) -> str:
    """One run ``audit · <dataset>`` tagged ``kind=audit`` in the configured store."""
    import mlflow

    from driftmatrix.tracking.runs import configure, stage_run

    exp_id = configure(params.tracking)
    with stage_run(exp_id, f"audit · {audit.dataset}", {"kind": "audit", "dataset": audit.dataset}) as run:
        mlflow.log_params({"smoothing_alpha": cfg.smoothing_alpha, "top_n": cfg.top_n, "mmd_samples": cfg.mmd_samples,
                           "permutations": cfg.permutations, "image_size": cfg.image_size})
        metrics = {f"{ms.name}_mean_future": _mean_future(ms.values) for ms in audit.measures}
        mlflow.log_metrics({k.replace(" ", "_"): v for k, v in metrics.items() if np.isfinite(v)})
        mlflow.log_artifacts(str(out), artifact_path="audit")
        return run.info.run_id
