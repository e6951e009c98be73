"""Constructed cells with known answers for the estimator tests."""

from __future__ import annotations

import numpy as np

from driftmatrix.estimate.cells import from_doc
from driftmatrix.learn.score import forward_stats, row_correctness


def logits_for(pred: np.ndarray, conf: np.ndarray, n_classes: int = 2) -> np.ndarray:
    """Logits whose softmax gives ``conf`` to class ``pred`` and shares the rest evenly."""
    rest = (1 - conf) / (n_classes - 1)
    probs = np.repeat(rest[:, None], n_classes, axis=1)
    probs[np.arange(len(pred)), pred] = conf
    return np.log(np.maximum(probs, 1e-300))


def calibrated(rng, n: int, low: float = 0.5, high: float = 1.0):
    """(logits, targets) of a calibrated binary classifier: a row of confidence c is right with
    probability c."""
    conf = rng.uniform(low, high, n)
    pred = rng.integers(0, 2, n)
    right = rng.random(n) < conf
    return logits_for(pred, conf), np.where(right, pred, 1 - pred)


def class_conditional(rng, y: np.ndarray, recall=(0.9, 0.7)):
    """Outputs that depend on the true class only (so a change in P(y) is a pure label shift)."""
    right = rng.random(len(y)) < np.asarray(recall)[y]
    pred = np.where(right, y, 1 - y)
    conf = np.where(right, rng.uniform(0.7, 1.0, len(y)), rng.uniform(0.5, 0.8, len(y)))
    return logits_for(pred, conf), y


def stats(logits, targets, per_row: bool = False):
    """A labelled cell's statistics; ``per_row``: with each row's correctness (a held-out cell)."""
    doc = forward_stats(logits, targets, "binary")
    return from_doc({**doc, **row_correctness(logits, targets)} if per_row else doc)
