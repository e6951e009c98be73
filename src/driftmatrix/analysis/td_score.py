"""Temporal-degradation (TD) score of Luu et al. (2022), section 2.3 and appendix A.

With S(t' -> t) = M[t', t], D(t' -> t) = -(S(t' -> t) - S(t -> t)) * sign(t' - t) grows as
performance falls on either side of t; TD(t) is the least-squares slope of D against t' over every
filled cell of column t (two points at least, else NaN), and TD the mean of |TD(t)| as published.
``absolute=False`` gives the signed mean instead: with cumulative training a column often *improves*
with misalignment, which the absolute value counts as degradation. For lower-is-better metrics D is
flipped. The x-axis is the slice index unless ``positions`` gives calendar places
(:func:`label_positions`); they differ only where a period was dropped (Yearbook has no 1907)."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from driftmatrix.analysis._nan import nanmean

_LABEL = re.compile(r"^(\d{1,4})(?:-(H[12]|Q[1-4]|\d{2}))?$")


def label_positions(labels: Sequence[str]) -> np.ndarray:
    """Calendar place of each slice label in units of its period; ValueError for one it cannot read."""
    out = []
    for label in labels:
        first = str(label).split("..", 1)[0]
        m = _LABEL.match(first)
        if not m:
            raise ValueError(f"TD score: cannot place slice label {label!r} on the calendar")
        year, sub = int(m.group(1)), m.group(2)
        if sub is None:
            out.append(year)
        elif sub[0] == "H":
            out.append(year * 2 + int(sub[1]) - 1)
        elif sub[0] == "Q":
            out.append(year * 4 + int(sub[1]) - 1)
        else:
            out.append(year * 12 + int(sub) - 1)
    return np.asarray(out, dtype=float)


def _positions(M: np.ndarray, positions: Sequence[float] | None) -> np.ndarray:
    if positions is None:
        return np.arange(M.shape[0], dtype=float)
    x = np.asarray(positions, dtype=float)
    if x.shape != (M.shape[0],):
        raise ValueError(f"TD score: {len(x)} positions for a {M.shape[0]} x {M.shape[1]} matrix")
    return x


def misalignment_penalty(M, t: int, higher_is_better: bool = True,
                         positions: Sequence[float] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(t', D(t' -> t)) for every filled training row t' of column t, t' = t (D = 0) included."""
    M = np.asarray(M, dtype=float)
    x = _positions(M, positions)
    col = M[:, t]
    keep = ~np.isnan(col)
    diff = col[keep] - M[t, t]
    if not higher_is_better:
        diff = -diff
    return x[keep], -diff * np.sign(x[keep] - x[t])


def td_slopes(M, higher_is_better: bool = True, positions: Sequence[float] | None = None) -> np.ndarray:
    """Signed TD(t) for every evaluation period t (NaN where the fit is undefined)."""
    M = np.asarray(M, dtype=float)
    out = np.full(M.shape[0], np.nan)
    for t in range(min(M.shape)):
        if np.isnan(M[t, t]):
            continue
        x, d = misalignment_penalty(M, t, higher_is_better, positions)
        if len(x) < 2:
            continue
        xc = x - x.mean()
        out[t] = float((xc * (d - d.mean())).sum() / (xc ** 2).sum())
    return out


def td_score(M, higher_is_better: bool = True, absolute: bool = True,
             positions: Sequence[float] | None = None) -> float:
    """Mean over evaluation periods of TD(t): of |TD(t)| as published (default), else signed."""
    slopes = td_slopes(M, higher_is_better, positions)
    return nanmean(np.abs(slopes) if absolute else slopes)
