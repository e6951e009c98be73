"""Temporal-degradation (TD) score of Luu et al. (2022), section 2.3 and appendix A.

For an evaluation period t and a training period t', with S(t' -> t) = M[t', t]:

    D(t' -> t) = -(S(t' -> t) - S(t -> t)) * sign(t' - t)

so D grows as performance falls, whichever side of t the training period lies on (D = 0 at
t' = t). TD(t) is the least-squares slope of D against t' over *all* training periods t' whose
cell is filled, the aligned one included (protocol section 3; appendix A sums over every
t' in the set of training timestamps).

Published definition (appendix A) and what this module does:

- Slope: appendix A takes the absolute value, TD(t) = |slope|, and TD = mean over t of |TD(t)|.
  :func:`td_score` does the same by default (``absolute=True``). ``absolute=False`` gives the
  signed mean instead: a negative TD(t) means the column *improves* with misalignment (common
  with cumulative training, where later cutoffs also train on t), which the absolute value
  counts as degradation. :func:`td_slopes` always returns the signed per-period slopes (the
  TD(t) figure shows them).
- Direction: for lower-is-better metrics the difference is flipped, so a larger signed TD is
  always worse (this only matters for the signed variant and the slopes).
- x-axis: appendix A regresses on the timestamps themselves ("points per year of
  misalignment"). Here t' is the slice *index* (0..K-1) unless ``positions`` gives each slice's
  place on the calendar (:func:`label_positions`, in units of the slicing period). The two agree
  when no period was dropped; with gaps (Yearbook has no 1907) an index step is one kept slice.
- Undefined fits: a column needs S(t -> t) and at least one other filled cell (two points);
  otherwise TD(t) is NaN and left out of the mean. Luu et al. train on single periods; with the
  protocol's cumulative training the same formula is applied to the cutoff models f_t'.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from driftmatrix.analysis._nan import nanmean

_LABEL = re.compile(r"^(\d{1,4})(?:-(H[12]|Q[1-4]|\d{2}))?$")


def label_positions(labels: Sequence[str]) -> np.ndarray:
    """Calendar place of each slice label in units of its period.

    ``"1905"`` -> 1905 (years), ``"2014-H2"`` -> 2014 * 2 + 1 (half-years), ``"2014-Q3"`` ->
    2014 * 4 + 2, ``"2014-07"`` -> 2014 * 12 + 6; a multi-period slice ``"1950..1954"`` takes its
    first period. Raises ValueError naming a label it cannot read.
    """
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
