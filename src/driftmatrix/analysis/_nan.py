"""NaN-aware reductions that return NaN (not a warning) when nothing is filled."""

from __future__ import annotations

import numpy as np


def nanmean(x, axis=None):
    """Mean over filled (non-NaN) entries; NaN where an axis slice has no filled entry."""
    x = np.asarray(x, dtype=float)
    filled = ~np.isnan(x)
    count = filled.sum(axis=axis)
    total = np.where(filled, x, 0.0).sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = total / count
    return np.where(count > 0, out, np.nan) if np.ndim(out) else (float(out) if count else float("nan"))


def nanstd(x, axis=None, ddof: int = 1):
    """Sample std (ddof=1 by default) over filled entries; NaN where fewer than ddof+1 are filled."""
    x = np.asarray(x, dtype=float)
    filled = ~np.isnan(x)
    count = filled.sum(axis=axis)
    mean = nanmean(x, axis=axis)
    dev = np.where(filled, x - (np.expand_dims(mean, axis) if axis is not None else mean), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (dev ** 2).sum(axis=axis) / (count - ddof)
    ok = count > ddof
    if np.ndim(var):
        return np.where(ok, np.sqrt(np.where(ok, var, 0.0)), np.nan)
    return float(np.sqrt(var)) if ok else float("nan")
