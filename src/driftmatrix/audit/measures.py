"""The audit's drift measures over the slices alone (pure): label drift, covariate MMD between
slices and from each training window to every later period, per-feature drift of a table."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from driftmatrix.audit import drift
from driftmatrix.audit.slices import Slices, axis_names, counts_by_slice, label_levels
from driftmatrix.config import ConfigError, build


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
        cfg = build(cls, raw, "params.yaml: audit")
        return replace(cfg, features=tuple(cfg.features or ()))


@dataclass
class Measure:
    """One K x K matrix; ``higher_is_more_drift`` says how to read it as 'more = more drift'."""

    name: str
    title: str
    unit: str
    values: np.ndarray
    pvalues: np.ndarray | None = None
    higher_is_more_drift: bool = True
    info: dict[str, Any] = field(default_factory=dict)


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
    """Per-feature K x K drift, the features drifting most per pair of periods, ranking and unseen shares."""
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
