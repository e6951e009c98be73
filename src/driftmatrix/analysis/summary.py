"""Whole-matrix and per-cutoff summary statistics (paper section 4.5), over a K x K matrix or an (S,
K, K) stack; every mean runs over filled cells only, as an empty cell is not zero."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from driftmatrix.analysis._nan import nanmean, nanstd


def as_seed_stack(values) -> np.ndarray:
    """(S, K, K) float array from a K x K matrix or a seed stack; ``None`` becomes NaN."""
    arr = np.array(values, dtype=float)  # None -> nan
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3 or arr.shape[1] != arr.shape[2]:
        raise ValueError(f"expected (S, K, K) or (K, K) values, got shape {arr.shape}")
    return arr


def seed_mean(seed_values) -> np.ndarray:
    """Cell-wise mean over seeds; a seed missing a cell (NaN) just does not count there."""
    return nanmean(as_seed_stack(seed_values), axis=0)


def seed_std(seed_values) -> np.ndarray:
    """Cell-wise seed std with ddof=1; NaN where fewer than two seeds filled the cell."""
    return nanstd(as_seed_stack(seed_values), axis=0, ddof=1)


def diagonal(M) -> np.ndarray:
    return np.diagonal(np.asarray(M, dtype=float)).copy()


def future_cells(M) -> np.ndarray:
    """Values of the cells with j > i (evaluated after the training cutoff)."""
    M = np.asarray(M, dtype=float)
    return M[np.triu_indices(M.shape[0], k=1)]


def backward_cells(M) -> np.ndarray:
    """Values of the cells with j < i (earlier, in-training periods)."""
    M = np.asarray(M, dtype=float)
    return M[np.tril_indices(M.shape[0], k=-1)]


def in_distribution(M) -> float:
    return nanmean(diagonal(M))


def future(M) -> float:
    return nanmean(future_cells(M))


def backward(M) -> float:
    return nanmean(backward_cells(M))


def decay(id_score: float, future_score: float, higher_is_better: bool = True) -> float:
    """Oriented so that a positive decay always means worse on the future."""
    return id_score - future_score if higher_is_better else future_score - id_score


@dataclass(frozen=True)
class MatrixSummary:
    in_distribution: float
    future: float
    decay: float
    backward: float
    td_score: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def summarize(M, higher_is_better: bool = True) -> MatrixSummary:
    """ID, Fut, Decay, backward mean and TD score of one seed-mean matrix."""
    from driftmatrix.analysis.td_score import td_score

    i, f = in_distribution(M), future(M)
    return MatrixSummary(i, f, decay(i, f, higher_is_better), backward(M), td_score(M, higher_is_better))


def cutoff_indices(n_slices: int, n: int = 4) -> list[int]:
    """``n`` cutoffs spread evenly over slices[:-1] (on Yearbook 1905, 1944, 1978, 2012, as the paper)."""
    if n_slices < 2:
        return []
    picks = np.rint(np.linspace(0, n_slices - 2, n)).astype(int)
    return sorted(set(int(p) for p in picks))


@dataclass(frozen=True)
class CutoffRow:
    index: int
    in_distribution: float  # M_ii
    future: float  # mean over filled j > i of M_ij
    decay: float


def cutoff_row(M, i: int, higher_is_better: bool = True) -> CutoffRow:
    M = np.asarray(M, dtype=float)
    m_ii = float(M[i, i])
    fut = nanmean(M[i, i + 1:])
    return CutoffRow(i, m_ii, fut, decay(m_ii, fut, higher_is_better))
