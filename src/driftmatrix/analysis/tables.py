"""Everything the report, the CLI and the matrices stage print about a cohort of models,
computed once from their drift matrices (one dataset, shared slices and metric)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Mapping

import numpy as np

from driftmatrix.analysis import cohort, forgetting, ranking, summary
from driftmatrix.analysis.matrixfile import DriftMatrices


@dataclass
class Cohort:
    models: Mapping[str, DriftMatrices]
    n_cutoffs: int = 4

    def __post_init__(self):
        if not self.models:
            raise ValueError("a cohort needs at least one model")
        self.models = dict(sorted(self.models.items()))
        first = self.first
        for m in self.models.values():
            if m.slices != first.slices or m.higher_is_better != first.higher_is_better:
                raise ValueError(f"{m.model} and {first.model} differ in slices or metric direction; "
                                 "a cohort is one dataset scored one way")

    @property
    def first(self) -> DriftMatrices:
        return next(iter(self.models.values()))

    @property
    def higher_is_better(self) -> bool:
        return self.first.higher_is_better

    @property
    def slices(self) -> list[str]:
        return self.first.slices

    @property
    def metric(self) -> str:
        return self.first.metric

    @property
    def unit(self) -> str:
        return self.first.unit

    @cached_property
    def means(self) -> dict[str, np.ndarray]:
        return {m: d.mean for m, d in self.models.items()}

    @cached_property
    def stacks(self) -> dict[str, np.ndarray]:
        return {m: d.seed_values for m, d in self.models.items()}

    @cached_property
    def families(self) -> dict[str, str | None]:
        return {m: d.family for m, d in self.models.items()}

    @cached_property
    def summaries(self) -> dict[str, summary.MatrixSummary]:
        return {m: summary.summarize(M, self.higher_is_better) for m, M in self.means.items()}

    @cached_property
    def cutoff_indices(self) -> list[int]:
        return summary.cutoff_indices(len(self.slices), self.n_cutoffs)

    @cached_property
    def cutoff_rows(self) -> dict[int, dict[str, summary.CutoffRow]]:
        return {i: {m: summary.cutoff_row(M, i, self.higher_is_better) for m, M in self.means.items()}
                for i in self.cutoff_indices}

    @cached_property
    def curves(self) -> dict[str, forgetting.Curve]:
        return {m: forgetting.seed_curves(d.seed_values) for m, d in self.models.items()}

    @cached_property
    def family_curves(self) -> dict[str, forgetting.Curve]:
        return forgetting.family_curves(self.curves, self.families)

    @cached_property
    def learned_means(self) -> dict[str, np.ndarray]:
        """Means of the models that learn: no-learning baselines (Prior) stay out of the cohort."""
        from driftmatrix.models.catalog import BASELINE_FAMILY

        learned = {m: M for m, M in self.means.items() if self.families[m] != BASELINE_FAMILY}
        return learned or self.means

    @cached_property
    def cohort_mean(self) -> np.ndarray:
        return cohort.cohort_mean(self.learned_means)

    @cached_property
    def deviations(self) -> dict[str, np.ndarray]:
        return cohort.deviations(self.learned_means)

    # --- tables -----------------------------------------------------------------------------
    def records(self) -> list[dict]:
        """One record per model: the summarize/metrics view."""
        return [{"model": m, "family": self.families[m], **s.as_dict()}
                for m, s in self.summaries.items()]

    def rank_by_future(self) -> list[str]:
        return ranking.rank_by_score({m: s.future for m, s in self.summaries.items()},
                                     self.higher_is_better)

    def rank_by_decay(self) -> list[str]:
        return ranking.rank_by_decay({m: s.decay for m, s in self.summaries.items()})

    def robustness(self) -> list[tuple[str, float, float]]:
        """(model, future, decay), most robust (smallest decay) first, as the paper's table."""
        return [(m, self.summaries[m].future, self.summaries[m].decay) for m in self.rank_by_decay()]

    def cutoff_table(self, i: int) -> list[tuple[int, str, float, float, float]]:
        """(rank, model, M_ii, future mean, decay) at cutoff i, best future first."""
        rows = self.cutoff_rows[i]
        order = ranking.rank_by_score({m: r.future for m, r in rows.items()}, self.higher_is_better)
        return [(k + 1, m, rows[m].in_distribution, rows[m].future, rows[m].decay)
                for k, m in enumerate(order)]

    def family_cutoffs(self) -> dict[str, list[tuple[float, float]]]:
        """Per family, (mean future, mean decay) at each cutoff."""
        per_cutoff = [ranking.family_means(
            {m: {"future": r.future, "decay": r.decay} for m, r in self.cutoff_rows[i].items()},
            self.families) for i in self.cutoff_indices]
        fams = sorted(per_cutoff[0]) if per_cutoff else []
        return {f: [(c[f]["future"], c[f]["decay"]) for c in per_cutoff] for f in fams}

    def family_summary(self) -> dict[str, dict[str, float]]:
        return ranking.family_means({m: s.as_dict() for m, s in self.summaries.items()},
                                    self.families)
