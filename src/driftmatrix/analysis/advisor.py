"""Retraining-horizon advisor: a model retrained every H periods scores the served score of
``policy.periodic``; ranking models by it for each H shows which to deploy for a retraining budget,
and the crossovers are the horizons at which the leader changes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from driftmatrix.analysis._nan import nanmean, nanstd
from driftmatrix.analysis.forgetting import Curve
from driftmatrix.analysis.policy import periodic_scores
from driftmatrix.analysis.ranking import rank_by_score


@dataclass(frozen=True)
class HorizonScore:
    model: str
    mean: float
    std: float  # across seeds (ddof=1); NaN for a single seed / published matrices


def horizon_score(stack: np.ndarray, horizon: int, model: str = "") -> HorizonScore:
    """Served score when retraining every ``horizon`` periods (seed stack (S, K, K)), with its seed spread."""
    per_seed = periodic_scores(stack, horizon)
    return HorizonScore(model, nanmean(per_seed), nanstd(per_seed, ddof=1))


def rank_for_horizon(stacks: Mapping[str, np.ndarray], horizon: int,
                     higher_is_better: bool = True) -> list[HorizonScore]:
    scores = {m: horizon_score(st, horizon, m) for m, st in stacks.items()}
    return [scores[m] for m in rank_by_score({m: s.mean for m, s in scores.items()}, higher_is_better)]


def leaders(stacks: Mapping[str, np.ndarray], higher_is_better: bool = True,
            max_horizon: int | None = None) -> list[HorizonScore]:
    """Best model for H = 1..max_horizon (default: K - 1, beyond which nothing is retrained)."""
    n = max_horizon or max(max(st.shape[-1] - 1 for st in stacks.values()), 1)
    return [rank_for_horizon(stacks, h, higher_is_better)[0] for h in range(1, n + 1)]


def lag_leaders(curves: Mapping[str, Curve], higher_is_better: bool = True) -> list[HorizonScore]:
    """Best model at each lag L = 0, 1, ...: the score of a model that is L periods old (its last
    period before a retrain, where a fast-decaying leader is overtaken first)."""
    n = max(len(c.mean) for c in curves.values())
    out = []
    for lag in range(n):
        scores = {m: c.mean[lag] if lag < len(c.mean) else np.nan for m, c in curves.items()}
        best = rank_by_score(scores, higher_is_better)[0]
        out.append(HorizonScore(best, float(scores[best]), float(curves[best].std[lag])))
    return out


@dataclass(frozen=True)
class Cadence:
    model: str
    horizon: int  # longest H whose expected score stays within the tolerance of retraining every period
    every_period: float  # served score when retrained every period (H = 1)
    expected: float  # the served score when retrained every ``horizon`` periods


def cadence(model: str, stack: np.ndarray, tolerance: float, higher_is_better: bool = True) -> Cadence:
    """How rarely ``model`` may be retrained: the longest horizon H whose served score is within
    ``tolerance`` of retraining every period. H is at least 1 and at most K - 1 (train once)."""
    if tolerance < 0:
        raise ValueError("tolerance must be >= 0")
    first, best = horizon_score(stack, 1).mean, 1
    for h in range(2, stack.shape[-1]):
        expected = horizon_score(stack, h).mean
        loss = first - expected if higher_is_better else expected - first
        if np.isfinite(loss) and loss <= tolerance + 1e-12:
            best = h
        else:
            break
    return Cadence(model, best, float(first), float(horizon_score(stack, best).mean))


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
