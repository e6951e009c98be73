"""Forgetting curves F(lag) = mean_i M[i, i + lag] (paper appendix C.7).

Computed per seed first, then mean and std (ddof=1) across seeds, so the band shows seed noise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from driftmatrix.analysis._nan import nanmean, nanstd
from driftmatrix.analysis.summary import as_seed_stack


def forgetting_curve(M) -> np.ndarray:
    """F(lag) for lag = 0..K-1 of one K x K matrix (NaN where a lag has no filled cell)."""
    M = np.asarray(M, dtype=float)
    return np.array([nanmean(np.diagonal(M, offset=lag)) for lag in range(M.shape[0])])


@dataclass(frozen=True)
class Curve:
    per_seed: np.ndarray  # (S, L)
    mean: np.ndarray  # (L,)
    std: np.ndarray  # (L,), NaN with fewer than two seeds


def seed_curves(seed_values) -> Curve:
    """Forgetting curve per seed, then mean/std across seeds."""
    stack = as_seed_stack(seed_values)
    per_seed = np.stack([forgetting_curve(m) for m in stack])
    return Curve(per_seed, nanmean(per_seed, axis=0), nanstd(per_seed, axis=0, ddof=1))


def family_curves(curves: Mapping[str, Curve], families: Mapping[str, str]) -> dict[str, Curve]:
    """Family curve = mean of its models' mean curves; band = pooled seed std sqrt(mean(std^2)), as
    seed sets differ between members and are not paired."""
    groups: dict[str, list[str]] = {}
    for model in curves:
        groups.setdefault(families.get(model) or "other", []).append(model)
    out = {}
    for fam, members in sorted(groups.items()):
        means = np.stack([curves[m].mean for m in members])
        stds = np.stack([curves[m].std for m in members])
        out[fam] = Curve(means, nanmean(means, axis=0), np.sqrt(nanmean(stds ** 2, axis=0)))
    return out
