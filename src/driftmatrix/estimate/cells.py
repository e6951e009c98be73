"""Per-cell forward-pass statistics as arrays (``evaluation.forward_stats``), pooled over cells,
and the unlabelled view an estimator gets of a period whose labels it must not see."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Iterable, Mapping

import numpy as np

from driftmatrix.learn.score import CONF_BINS, decode_correctness


@dataclass(frozen=True)
class CellStats:
    """One cell's (or several pooled cells') statistics; ``correct``, ``confusion`` and ``right``
    (each row's correctness, None once a pooled cell lacks it) use the labels and are None
    unlabelled."""

    counts: np.ndarray  # (C, B) rows per (predicted class, confidence bin)
    pred: np.ndarray  # (C,) rows predicted as each class
    conf_sum: float  # sum of max probabilities
    conf_var: float  # sum of p (1 - p) of the max probabilities
    prob_sum: np.ndarray  # (C,) sum of each class's probability
    correct: np.ndarray | None = None  # (C, B) correct rows per bin
    confusion: np.ndarray | None = None  # (C, C) true x predicted
    right: np.ndarray | None = None  # (n,) bool: row r predicted its label

    @cached_property
    def n(self) -> int:
        return int(self.pred.sum())

    @property
    def n_classes(self) -> int:
        return len(self.pred)

    @property
    def labelled(self) -> bool:
        return self.correct is not None

    @cached_property
    def accuracy(self) -> float:
        """Share of correct rows (0..1); needs labels."""
        if self.correct is None:
            raise ValueError("an unlabelled cell has no accuracy")
        return float(self.correct.sum() / max(self.n, 1))

    @cached_property
    def mean_conf(self) -> float:
        return self.conf_sum / max(self.n, 1)

    @cached_property
    def label_counts(self) -> np.ndarray:
        """Rows of each true class; needs labels."""
        if self.confusion is None:
            raise ValueError("an unlabelled cell has no label counts")
        return self.confusion.sum(axis=1)

    def unlabelled(self) -> "CellStats":
        return replace(self, correct=None, confusion=None, right=None)

    def __add__(self, other: "CellStats") -> "CellStats":
        both = self.labelled and other.labelled
        rows = self.right is not None and other.right is not None
        return CellStats(self.counts + other.counts, self.pred + other.pred, self.conf_sum + other.conf_sum,
                         self.conf_var + other.conf_var, self.prob_sum + other.prob_sum,
                         self.correct + other.correct if both else None,
                         self.confusion + other.confusion if both else None,
                         np.concatenate([self.right, other.right]) if rows else None)


def from_doc(stats: Mapping[str, Any] | None) -> CellStats | None:
    """Arrays from a score doc's ``stats`` (None stays None)."""
    if not stats:
        return None
    c = len(stats["pred"])
    counts, correct = np.zeros((c, CONF_BINS)), np.zeros((c, CONF_BINS))
    for k, b, n, *right in stats["hist"]:
        counts[k, b], correct[k, b] = n, (right or [0])[0]
    confusion = np.asarray(stats["confusion"], dtype=float) if "confusion" in stats else None
    return CellStats(counts, np.asarray(stats["pred"], dtype=float), float(stats["conf_sum"]),
                     float(stats["conf_var"]), np.asarray(stats["prob_sum"], dtype=float),
                     correct if confusion is not None else None, confusion,
                     decode_correctness(stats) if confusion is not None else None)


def pooled(cells: Iterable[CellStats | None]) -> CellStats | None:
    """Sum of the cells that have statistics (None when none has), their rows in this order."""
    out = None
    for c in cells:
        if c is not None and c.n > 0:
            out = c if out is None else out + c
    return out
