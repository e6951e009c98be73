"""Permutation importance of tabular models per cutoff: which features a model leans on, and how
that changes as the world drifts (``driftmatrix importance``).

The first seed's unit of each cutoff is scored on its own held-out rows (rows it never trained on,
from the periods it knew) with each feature shuffled ``repeats`` times; the score drop, signed so
positive means the model needs the feature, is its importance in the metric's points."""

from __future__ import annotations

import logging

import numpy as np


log = logging.getLogger(__name__)

REPEATS = 3
MAX_ROWS = 5_000  # held-out rows per cutoff at most (a seeded draw)


def held_out_rows(slice_ids: np.ndarray, split: np.ndarray, window, max_rows: int = MAX_ROWS) -> np.ndarray:
    """Test-split rows of the window's slices (at most ``max_rows``, drawn with a fixed seed)."""
    rows = np.flatnonzero(np.isin(slice_ids, np.asarray(window)) & (split == "test"))
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(0).choice(rows, max_rows, replace=False))
    return rows


def score(model, num, cat, targets, task: str, metric) -> float:
    """The cell metric (``tasks.MetricInfo``) of ``model`` on these rows, signed so that higher is better."""
    from driftmatrix.learn.tasks import cell_score

    value, _ = cell_score(task, model.predict_arrays(num, cat), targets, metric=metric.key)
    return value if metric.higher_is_better else -value


def permutation_importance(model, num: np.ndarray, cat: np.ndarray, targets: np.ndarray, task: str,
                           metric, repeats: int = REPEATS,
                           seed: int = 0) -> tuple[float, np.ndarray, np.ndarray]:
    """(baseline score, mean drop per feature, std of the drops), numeric features first."""
    base = score(model, num, cat, targets, task, metric)
    n_num = num.shape[1]
    drops = np.zeros((n_num + cat.shape[1], repeats))
    for f in range(drops.shape[0]):
        for r in range(repeats):
            perm = np.random.default_rng([seed, f, r]).permutation(len(num))
            n2, c2 = num.copy(), cat.copy()
            if f < n_num:
                n2[:, f] = num[perm, f]
            else:
                c2[:, f - n_num] = cat[perm, f - n_num]
            drops[f, r] = base - score(model, n2, c2, targets, task, metric)
    return base, drops.mean(axis=1), drops.std(axis=1)


