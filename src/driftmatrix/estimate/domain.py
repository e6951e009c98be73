"""Input-space domain classifier for ``IW-inputs``: per-slice input features and importance weights of
a unit's held-out rows towards a new period. The features do not depend on the model, so they are read
once per dataset and a (window, period) pair's weights serve every seed and model. Only pixel datasets
and feature tables have them (text would need a model-dependent embedding). All but ``read_*`` is pure."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

#: Side of the grey-level grid an image is mean-pooled to.
GRID = 8
#: Largest importance weight (density ratio p_period(x) / p_held-out(x)) a row may get.
MAX_WEIGHT = 20.0
#: Folds of the cross-fitting: a row's weight comes from a classifier fitted without it.
FOLDS = 5
#: Inverse L2 strength of the domain classifier, fixed a priori: a stronger penalty lowered MAE on a
#: second draw of the built-in data only by flattening the weights towards uniform, and then a period
#: far outside the held-out support no longer gets a low ESS.
C_REG = 0.1


@dataclass(frozen=True)
class SliceInputs:
    """Per slice the features of every row (future cells' row order) and which are its test split."""

    x: Sequence[np.ndarray]
    test: Sequence[np.ndarray]

    def upto(self, i: int) -> "SliceInputs":
        """Slices 0..i only: what is known at cutoff i."""
        return SliceInputs(list(self.x[:i + 1]), list(self.test[:i + 1]))

    def held_out(self, window: Sequence[int]) -> np.ndarray:
        """Features of a window's held-out rows, slices in the window's order (as ``pooled``)."""
        parts = [self.x[c][self.test[c]] for c in window if c < len(self.x)]
        return np.concatenate(parts) if parts else np.zeros((0, self.x[0].shape[1] if self.x else 0))


def image_features(images: np.ndarray, grid: int = GRID) -> np.ndarray:
    """(N, grid * grid + 3) in 0..1: the grey image mean-pooled to ``grid`` x ``grid``, then channel means."""
    from driftmatrix.audit.drift import downsample_images

    out = np.empty((len(images), grid * grid + 3))
    for at in range(0, len(images), 4096):  # chunks: a memory-mapped images.npy is never held as floats at once
        blocks = downsample_images(images[at:at + 4096], grid)
        blocks = blocks.reshape(len(blocks), grid * grid, -1)  # (n, cells, channels)
        out[at:at + len(blocks)] = np.concatenate([blocks.mean(axis=2), blocks.mean(axis=1)], axis=1)
    return out


def table_features(values: np.ndarray) -> np.ndarray:
    """A numeric feature table (N, F), missing values at the column's median (0 for an empty column)."""
    x = np.asarray(values, dtype=np.float64).copy()
    if x.size == 0:
        return x
    with np.errstate(all="ignore"):
        med = np.nanmedian(np.where(np.isnan(x).all(axis=0), 0.0, x), axis=0) if x.shape[0] else np.zeros(x.shape[1])
    med = np.where(np.isfinite(med), med, 0.0)
    return np.where(np.isnan(x), med, x)


def split_by_slice(features: np.ndarray, slice_ids: np.ndarray, split: np.ndarray, n_slices: int) -> SliceInputs:
    """Every row's features per slice, in the row order the evaluate stage scores a cell's rows in."""
    xs, tests = [], []
    for c in range(n_slices):
        rows = np.flatnonzero(slice_ids == c)
        xs.append(features[rows])
        tests.append(np.asarray(split)[rows] == "test")
    return SliceInputs(xs, tests)


def coverage(weights: np.ndarray) -> float:
    """The share of the period's input distribution the held-out rows' support covers (mean weight,
    at most 1): Kish's ratio alone is scale-free and cannot see a period outside that support."""
    return float(min(1.0, np.mean(weights))) if len(weights) else 0.0


def ess(weights: np.ndarray) -> float:
    """Effective sample size of density-ratio weights in held-out rows: Kish's times :func:`coverage`."""
    w2 = float((weights ** 2).sum())
    return float(weights.sum()) ** 2 / w2 * coverage(weights) if w2 > 0 else 0.0


def domain_weights(source_x: np.ndarray, target_x: np.ndarray, max_weight: float = MAX_WEIGHT,
                   folds: int = FOLDS, c_reg: float = C_REG, seed: int = 0) -> tuple[np.ndarray, float]:
    """(weight of each source row, effective sample size) reweighting source rows to the target's
    input distribution.

    A balanced logistic regression's odds estimate the density ratio whatever the two sizes; each
    row's probability is cross-fitted, so its weight comes from a classifier that did not see it.
    Weights are clipped at ``max_weight`` and not normalised: their mean is :func:`coverage`."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    n_s, n_t = len(source_x), len(target_x)
    k = min(folds, n_s, n_t)
    if k < 2:
        w = np.ones(n_s)
        return w, ess(w)
    target_x = np.asarray(target_x)[np.lexsort(np.asarray(target_x).T[::-1])]  # the period's row order does not matter
    x = np.concatenate([source_x, target_x]).astype(np.float64)
    y = np.r_[np.zeros(n_s, dtype=int), np.ones(n_t, dtype=int)]
    clf = make_pipeline(StandardScaler(), LogisticRegression(C=c_reg, class_weight="balanced", max_iter=2000))
    p = cross_val_predict(clf, x, y, cv=StratifiedKFold(k, shuffle=True, random_state=seed),
                          method="predict_proba")[:n_s, 1]
    p = np.clip(p, 1e-9, 1 - 1e-9)
    w = np.minimum(p / (1 - p), max_weight)
    return w, ess(w)


class WeightCache:
    """Domain weights per (window's held-out rows, period), computed once for one set of inputs."""

    def __init__(self):
        self.done: dict[tuple[tuple[int, ...], object], tuple[np.ndarray, float]] = {}

    def get(self, window: Sequence[int], period, source_x: np.ndarray,
            target_x: np.ndarray) -> tuple[np.ndarray, float]:
        key = (tuple(int(c) for c in window), period)
        if key not in self.done:
            self.done[key] = domain_weights(source_x, target_x)
        return self.done[key]


# --- reading (side effects) ---------------------------------------------------------------------
def read_slice_inputs(slices_dir: str | Path) -> SliceInputs | None:
    """Every slice's features from a slices folder (images or numeric columns); None for other inputs."""
    from driftmatrix.data.table import DatasetMeta, feature_column
    from driftmatrix.data.slicing import load_slices

    rows, manifest, images = load_slices(slices_dir)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    if images is not None:
        feats = image_features(images)
    elif meta.features and meta.numeric:
        feats = table_features(np.column_stack([np.asarray(rows[feature_column(f)], dtype=np.float64)
                                                for f in meta.numeric]))
    else:
        return None
    return split_by_slice(feats, rows["slice"].to_numpy(), rows["split"].to_numpy(), len(manifest["slices"]))
