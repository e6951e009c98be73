"""Rankings of models and family means of per-model statistics."""

from __future__ import annotations

import math
from typing import Mapping

from driftmatrix.analysis._nan import nanmean


def rank_by_score(scores: Mapping[str, float], higher_is_better: bool = True) -> list[str]:
    """Best first; NaN last; ties broken by name for a stable order."""
    sign = -1.0 if higher_is_better else 1.0

    def key(m):
        v = scores[m]
        return (math.isnan(v), sign * v if not math.isnan(v) else 0.0, m)

    return sorted(scores, key=key)


def rank_by_decay(decays: Mapping[str, float]) -> list[str]:
    """Most robust (smallest decay) first; decay is oriented so larger is always worse."""
    return rank_by_score(decays, higher_is_better=False)


def family_means(stats: Mapping[str, Mapping[str, float]], families: Mapping[str, str | None],
                 ) -> dict[str, dict[str, float]]:
    """Mean of each per-model statistic within each family (models without a family: 'other')."""
    groups: dict[str, list[str]] = {}
    for model in stats:
        groups.setdefault(families.get(model) or "other", []).append(model)
    out = {}
    for fam in sorted(groups):
        keys = stats[groups[fam][0]].keys()
        out[fam] = {k: nanmean([stats[m][k] for m in groups[fam]]) for k in keys}
    return out
