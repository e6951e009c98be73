"""Per-feature drift of a feature table (pure): per feature a K x K matrix comparing slice i with j,
the Kolmogorov-Smirnov statistic of the numeric values present or the Jensen-Shannon distance of
category shares (missing as a category). Both lie in [0, 1], so features rank against each other
(:func:`ranking`, :func:`top_features`)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from driftmatrix.audit.drift import js_divergence


def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic of the finite values of ``a`` and ``b`` (NaN if either has none)."""
    a, b = np.sort(a[np.isfinite(a)]), np.sort(b[np.isfinite(b)])
    if not len(a) or not len(b):
        return float("nan")
    grid = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, grid, side="right") / len(a)
    cdf_b = np.searchsorted(b, grid, side="right") / len(b)
    return float(np.max(np.abs(cdf_a - cdf_b)))


def js_distance(p: np.ndarray, q: np.ndarray) -> float:
    """Jensen-Shannon distance (sqrt of the divergence in bits) between two count vectors."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    if p.sum() == 0 or q.sum() == 0:
        return float("nan")
    return float(np.sqrt(max(js_divergence(p / p.sum(), q / q.sum()), 0.0)))


def sample_values(values: np.ndarray, slice_ids: np.ndarray, k: int, max_n: int, seed: int) -> list[np.ndarray]:
    """Each slice's values, at most ``max_n`` of them (a seeded draw per slice)."""
    out = []
    for i in range(k):
        v = values[slice_ids == i]
        if len(v) > max_n:
            v = v[np.sort(np.random.default_rng([seed, i]).choice(len(v), max_n, replace=False))]
        out.append(np.asarray(v, dtype=np.float64))
    return out


def symmetric(parts: Sequence, fn) -> np.ndarray:
    """K x K ``fn(parts[i], parts[j])`` of every pair i < j, mirrored; 0 on the diagonal."""
    out = np.zeros((len(parts), len(parts)))
    for i, j in zip(*np.triu_indices(len(parts), 1)):
        out[i, j] = out[j, i] = fn(parts[i], parts[j])
    return out


def numeric_matrix(values: np.ndarray, slice_ids: np.ndarray, k: int, max_n: int = 5000, seed: int = 0) -> np.ndarray:
    return symmetric(sample_values(values, slice_ids, k, max_n, seed), ks_statistic)


def category_counts(values: Sequence[Any], slice_ids: np.ndarray, k: int) -> tuple[list[str], np.ndarray]:
    """(categories, K x C counts); a missing value is the category ``(missing)``."""
    cats = pd.Series(values, dtype=object).where(pd.notna(pd.Series(values, dtype=object)), "(missing)").astype(str)
    table = pd.crosstab(pd.Series(slice_ids, name="slice"), cats).reindex(range(k), fill_value=0)
    return [str(c) for c in table.columns], table.to_numpy(dtype=float)


def categorical_matrix(values: Sequence[Any], slice_ids: np.ndarray, k: int) -> np.ndarray:
    return symmetric(category_counts(values, slice_ids, k)[1], js_distance)


def unseen_matrix(frame: pd.DataFrame, categorical: Sequence[str], slice_ids: np.ndarray,
                  train: np.ndarray, k: int) -> np.ndarray:
    """``M[i, j]``: share of slice j's rows with a category the training rows of slices 0..i lack: what
    the tabular models meet as "unseen"."""
    out = np.zeros((k, k))
    if not len(categorical):
        return out
    rows_unseen = np.zeros((k, len(frame)), dtype=bool)
    for col in categorical:
        values = frame[col].astype(object)
        present = values.notna().to_numpy()
        seen: set = set()
        for i in range(k):
            seen |= set(values[(slice_ids == i) & train & present])
            rows_unseen[i] |= present & ~values.isin(seen).to_numpy()
    for i in range(k):
        for j in range(k):
            in_j = slice_ids == j
            out[i, j] = float(rows_unseen[i][in_j].mean()) if in_j.any() else float("nan")
    return out


def top_features(matrices: Mapping[str, np.ndarray], n: int = 3) -> list[list[list[tuple[str, float]]]]:
    """For each pair (i, j): the ``n`` features with the largest drift, largest first."""
    names = list(matrices)
    stack = np.stack([matrices[f] for f in names]) if names else np.zeros((0, 0, 0))
    k = stack.shape[1] if names else 0
    out = []
    for i in range(k):
        row = []
        for j in range(k):
            vals = np.nan_to_num(stack[:, i, j], nan=-1.0)
            order = np.argsort(-vals, kind="stable")[:n]
            row.append([(names[f], float(stack[f, i, j])) for f in order if i != j and vals[f] > 0])
        out.append(row)
    return out


def ranking(matrices: Mapping[str, np.ndarray]) -> list[tuple[str, float]]:
    """Features by mean drift over the future pairs (i < j), most drifting first."""
    scores = []
    for name, m in matrices.items():
        upper = m[np.triu_indices(len(m), k=1)]
        upper = upper[np.isfinite(upper)]
        scores.append((name, float(upper.mean()) if upper.size else float("nan")))
    return sorted(scores, key=lambda kv: (-np.nan_to_num(kv[1], nan=-1.0), kv[0]))
