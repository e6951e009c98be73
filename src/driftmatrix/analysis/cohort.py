"""Cohort-mean matrix and per-model deviations (paper appendices C-E)."""

from __future__ import annotations

from typing import Mapping

import numpy as np


def cohort_mean(matrices: Mapping[str, np.ndarray] | list) -> np.ndarray:
    """Cell-wise mean over models at cells every model fills (NaN elsewhere), so no cell mixes model
    subsets."""
    stack = np.stack([np.asarray(m, dtype=float) for m in (
        matrices.values() if isinstance(matrices, Mapping) else matrices)])
    complete = ~np.isnan(stack).any(axis=0)
    return np.where(complete, np.where(np.isnan(stack), 0.0, stack).mean(axis=0), np.nan)


def deviations(matrices: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Delta(m) = M(m) - cohort mean, for every model."""
    bar = cohort_mean(matrices)
    return {name: np.asarray(m, dtype=float) - bar for name, m in matrices.items()}
