"""Compare our drift matrices with published ones (seed means, read as S = 1), aligned by slice
label and every statistic recomputed on the common slices, so the differences are like for like."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from driftmatrix.analysis._nan import nanmean
from driftmatrix.analysis.matrixfile import DriftMatrices
from driftmatrix.analysis.summary import MatrixSummary, summarize

@dataclass(frozen=True)
class Comparison:
    model: str
    slices: list[str]  # common labels, in time order
    cell_diff: np.ndarray  # ours - published on the common slices (NaN where either is empty)
    ours: MatrixSummary
    published: MatrixSummary

    @property
    def n_cells(self) -> int:
        return int((~np.isnan(self.cell_diff)).sum())

    @property
    def mean_abs_diff(self) -> float:
        return nanmean(np.abs(self.cell_diff))

    @property
    def max_abs_diff(self) -> float:
        return float(np.nanmax(np.abs(self.cell_diff))) if self.n_cells else float("nan")


def common_slices(a: list[str], b: list[str]) -> tuple[list[str], list[int], list[int]]:
    """Labels present in both, with their indices in each."""
    shared = [s for s in a if s in set(b)]
    return shared, [a.index(s) for s in shared], [b.index(s) for s in shared]


def compare_model(ours: DriftMatrices, published: DriftMatrices) -> Comparison:
    if ours.higher_is_better != published.higher_is_better:
        raise ValueError(f"{ours.model}: metric direction differs from the published matrix")
    labels, ia, ib = common_slices(ours.slices, published.slices)
    a, b = ours.mean[np.ix_(ia, ia)], published.mean[np.ix_(ib, ib)]
    hib = ours.higher_is_better
    return Comparison(ours.model, labels, a - b, summarize(a, hib), summarize(b, hib))


def compare(ours: Mapping[str, DriftMatrices], published: Mapping[str, DriftMatrices],
            ) -> list[Comparison]:
    """One comparison per model present on both sides, sorted by name."""
    return [compare_model(ours[m], published[m]) for m in sorted(set(ours) & set(published))]
