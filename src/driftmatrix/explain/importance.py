"""Permutation importance of tabular models per cutoff: which features a model leans on, and how
that changes as the world drifts (``driftmatrix importance``).

For every tabular model (``inputs == "table"``) of ``params.yaml`` and every cutoff i, the unit of
the first seed is scored on its **own held-out rows**: the test splits of the slices in its
training window (rows it never trained on, from the periods it knew). Each feature column is then
shuffled among those rows (``repeats`` seeded permutations) and the score drop is its importance,
in the cell metric's points (positive = the model needs the feature; for a lower-is-better
metric the sign is turned so that this still holds). Writes ``<out>/<model>.json`` (``features``,
``cutoffs``, ``values`` F x K, ``std``, ``baseline``), ``<out>/<model>.png`` (features x cutoffs
heatmap) and ``<out>/report.html`` with every model's heatmap.
"""

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
    """(baseline score, mean drop per feature, std of the drops): numeric features first, then
    categorical, as the columns of ``num`` and ``cat``."""
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


