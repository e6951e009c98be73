"""Retraining-horizon advisor.

If a model is retrained every H periods, it is scored at lags 0..H-1 after each retrain, so its
expected score is the mean of its forgetting curve over lags 0..H-1 (each lag equally likely).
Ranking models by that number for each H shows which architecture to deploy for a given
retraining budget; the crossovers are the horizons at which the leader changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from driftmatrix.analysis._nan import nanmean, nanstd
from driftmatrix.analysis.forgetting import Curve
from driftmatrix.analysis.ranking import rank_by_score


@dataclass(frozen=True)
class HorizonScore:
    model: str
    mean: float
    std: float  # across seeds (ddof=1); NaN for a single seed / published matrices


def horizon_score(curve: Curve, horizon: int) -> HorizonScore:
    """Expected score when retraining every ``horizon`` periods, with its seed spread."""
    if horizon < 1:
        raise ValueError("horizon must be >= 1")
    per_seed = nanmean(curve.per_seed[:, :horizon], axis=1)
    return HorizonScore("", nanmean(per_seed), nanstd(per_seed, ddof=1))


def rank_for_horizon(curves: Mapping[str, Curve], horizon: int,
                     higher_is_better: bool = True) -> list[HorizonScore]:
    scores = {m: horizon_score(c, horizon) for m, c in curves.items()}
    order = rank_by_score({m: s.mean for m, s in scores.items()}, higher_is_better)
    return [HorizonScore(m, scores[m].mean, scores[m].std) for m in order]


def leaders(curves: Mapping[str, Curve], higher_is_better: bool = True,
            max_horizon: int | None = None) -> list[HorizonScore]:
    """Best model for H = 1..max_horizon (default: the longest lag any curve reaches)."""
    n = max_horizon or max(len(c.mean) for c in curves.values())
    return [rank_for_horizon(curves, h, higher_is_better)[0] for h in range(1, n + 1)]


def lag_leaders(curves: Mapping[str, Curve], higher_is_better: bool = True) -> list[HorizonScore]:
    """Best model at each lag L = 0, 1, ...: the score of a model that is L periods old.

    The horizon mean above averages over a model's whole deployment; this is its score in the
    last period before a retrain, where a fast-decaying leader is overtaken first.
    """
    n = max(len(c.mean) for c in curves.values())
    out = []
    for lag in range(n):
        scores = {m: c.mean[lag] if lag < len(c.mean) else np.nan for m, c in curves.items()}
        best = rank_by_score(scores, higher_is_better)[0]
        std = curves[best].std[lag]
        out.append(HorizonScore(best, float(scores[best]), float(std)))
    return out


@dataclass(frozen=True)
class Cadence:
    model: str
    horizon: int  # longest H whose expected score stays within the tolerance of a fresh model's
    fresh: float  # F(0): the in-distribution score right after a retrain
    expected: float  # the expected score when retrained every ``horizon`` periods


def cadence(model: str, curve: Curve, tolerance: float, higher_is_better: bool = True) -> Cadence:
    """How rarely ``model`` may be retrained: the longest horizon H whose expected score (mean of
    the forgetting curve over lags 0..H-1) is within ``tolerance`` of F(0), the fresh model's.
    H is at least 1 (retrain every period) and at most the longest lag the curve reaches."""
    if tolerance < 0:
        raise ValueError("tolerance must be >= 0")
    fresh, best = float(curve.mean[0]), 1
    for h in range(1, len(curve.mean) + 1):
        expected = horizon_score(curve, h).mean
        loss = fresh - expected if higher_is_better else expected - fresh
        if np.isfinite(loss) and loss <= tolerance + 1e-12:
            best = h
        else:
            break
    return Cadence(model, best, fresh, float(horizon_score(curve, best).mean))


@dataclass(frozen=True)
class Crossover:
    horizon: int  # first horizon at which ``to`` leads
    previous: str
    to: str


def crossovers(leading: list[HorizonScore]) -> list[Crossover]:
    """Horizons (1-based, as in ``leaders``) where the leading model changes."""
    return [Crossover(h + 1, leading[h - 1].model, leading[h].model)
            for h in range(1, len(leading)) if leading[h].model != leading[h - 1].model]


def leader_spans(lead: list[HorizonScore], first: int = 1) -> list[tuple[str, str, float, float]]:
    """Runs of consecutive horizons (or lags, numbered from ``first``) with the same leader:
    (span label, model, score at the start of the run, score at its end)."""
    rows, start = [], 0
    for k in range(1, len(lead) + 1):
        if k == len(lead) or lead[k].model != lead[start].model:
            a, b = start + first, k - 1 + first
            rows.append((str(a) if a == b else f"{a}-{b}", lead[start].model,
                         lead[start].mean, lead[k - 1].mean))
            start = k
    return rows
