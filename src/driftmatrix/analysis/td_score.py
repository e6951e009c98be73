"""Temporal-degradation (TD) score of Luu et al. (2022), section 2.3 and appendix A.

For an evaluation period t and a training period t', with S(t' -> t) = M[t', t]:

    D(t' -> t) = -(S(t' -> t) - S(t -> t)) * sign(t' - t)

so D grows as performance falls, whichever side of t the training period lies on. TD(t) is the
least-squares slope of D against t' and TD the mean of TD(t) over evaluation periods.

Choices made here (the paper leaves them open for cumulative training):
- t' is the slice *index* (0..K-1), so TD is "points lost per slice of misalignment"; with
  dropped periods (gaps in the labels) one step is one kept slice, not one calendar period.
- The fit for column t uses every training row t' != t whose cell M[t', t] is filled, and needs
  S(t -> t) filled and at least two such rows; otherwise TD(t) is NaN and left out of the mean.
  (t' = t would add the point (t, 0) that every fit passes near anyway; leaving it out keeps
  the fit to genuinely misaligned pairs.)
- The slope keeps its sign (Luu et al. print the absolute value): negative TD means the model
  improves with misalignment, which a drift matrix can show and should not hide.
- For lower-is-better metrics the difference is flipped, so larger TD is always worse.
"""

from __future__ import annotations

import numpy as np

from driftmatrix.analysis._nan import nanmean


def misalignment_penalty(M, t: int, higher_is_better: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """(t', D(t' -> t)) for every filled training row t' != t of column t."""
    M = np.asarray(M, dtype=float)
    rows = np.arange(M.shape[0])
    col = M[:, t]
    keep = (rows != t) & ~np.isnan(col)
    diff = col[keep] - M[t, t]
    if not higher_is_better:
        diff = -diff
    return rows[keep].astype(float), -diff * np.sign(rows[keep] - t)


def td_slopes(M, higher_is_better: bool = True) -> np.ndarray:
    """TD(t) for every evaluation period t (NaN where the fit is undefined)."""
    M = np.asarray(M, dtype=float)
    out = np.full(M.shape[0], np.nan)
    for t in range(M.shape[0]):
        if np.isnan(M[t, t]):
            continue
        x, d = misalignment_penalty(M, t, higher_is_better)
        if len(x) < 2:
            continue
        xc = x - x.mean()
        out[t] = float((xc * (d - d.mean())).sum() / (xc ** 2).sum())
    return out


def td_score(M, higher_is_better: bool = True) -> float:
    return nanmean(td_slopes(M, higher_is_better))
