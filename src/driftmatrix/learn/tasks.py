"""Task-specific targets, losses and cell metrics (protocol section 4).

Loss weights come from the training targets of the cutoff being trained only. Metrics are in the
paper's units (accuracy and macro AUC in percent, balanced MSE raw); binary and multiclass tasks may
choose theirs (:data:`CLASSIFICATION_METRICS`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    import torch

    from driftmatrix.data.table import DatasetMeta


def targets_array(rows: "pd.DataFrame", meta: "DatasetMeta") -> np.ndarray:
    """Targets of every row: int64 classes, float32 (N, C) multi-hot, or float32 ratings."""
    if meta.task == "multilabel":
        return rows[list(meta.label_columns)].to_numpy(dtype=np.float32)
    col = rows[meta.label_columns[0]]
    if meta.task == "regression":
        return col.to_numpy(dtype=np.float32)
    return col.to_numpy(dtype=np.int64)


def make_loss(task: str, train_targets: np.ndarray) -> Callable[["torch.Tensor", "torch.Tensor"], "torch.Tensor"]:
    """The training loss of a task, weighted from this cutoff's training targets only:
    cross-entropy; BCE with ``pos_weight_c = negatives_c / positives_c`` (1 for a category
    without positives yet); or the paper's weighted MSE (Eq. 4) with ``w_r = n_train / n_r`` per
    rating level (Eq. 5)."""
    import torch
    import torch.nn.functional as F

    if task in ("binary", "multiclass"):
        return lambda out, y: F.cross_entropy(out, y)
    if task == "multilabel":
        pos_weight = torch.as_tensor(pos_weights(train_targets), dtype=torch.float32)
        return lambda out, y: F.binary_cross_entropy_with_logits(out, y, pos_weight=pos_weight.to(out.device))
    if task == "regression":
        levels, weights = level_weights(train_targets)
        levels_t, weights_t = torch.as_tensor(levels), torch.as_tensor(weights)

        def weighted_mse(out: "torch.Tensor", y: "torch.Tensor") -> "torch.Tensor":
            lv, wt = levels_t.to(y.device), weights_t.to(out.device)
            r = y.round().long()
            pos = torch.searchsorted(lv, r).clamp(max=len(lv) - 1)
            w = torch.where(lv[pos] == r, wt[pos], torch.zeros((), dtype=wt.dtype, device=wt.device))
            return (w * (out.reshape(-1) - y) ** 2).mean()

        return weighted_mse
    raise ValueError(f"unknown task {task!r}")


def pos_weights(train_targets: np.ndarray) -> np.ndarray:
    """``negatives_c / positives_c`` per category (1 where a category has no positives yet)."""
    pos = np.asarray(train_targets, dtype=np.float64).sum(axis=0)
    neg = len(train_targets) - pos
    return np.where(pos > 0, neg / np.maximum(pos, 1), 1.0)


def level_weights(train_targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(sorted rating levels, ``w_r = n / n_r``) of one cutoff's training targets (paper Eq. 5)."""
    levels, counts = np.unique(np.round(np.asarray(train_targets, dtype=np.float64)).astype(np.int64),
                               return_counts=True)
    return levels, (len(train_targets) / counts).astype(np.float32)


def cell_score(task: str, outputs: np.ndarray, targets: np.ndarray,
               categories: tuple[str, ...] = (), metric: str = "accuracy") -> tuple[float, list[str]]:
    """Score of one drift-matrix cell in the reported unit, plus the categories left out: NaN for an
    empty set; a category macro AUC (or balanced accuracy) cannot score in this cell is left out
    and named."""
    if len(targets) == 0:
        return float("nan"), []
    if task in ("binary", "multiclass"):
        return classification_score(metric, np.asarray(outputs, dtype=np.float64), np.asarray(targets))
    if task == "regression":
        return balanced_mse(outputs.reshape(-1), targets), []
    if task == "multilabel":
        return macro_auc(outputs, targets, categories)
    raise ValueError(f"unknown task {task!r}")


def classification_score(metric: str, logits: np.ndarray, targets: np.ndarray) -> tuple[float, list[str]]:
    """Accuracy, balanced accuracy (mean recall over the classes present), one-vs-rest macro AUC
    (binary: the ROC AUC) in percent, or log loss in nats, from (N, C) logits."""
    classes = np.arange(logits.shape[1])
    if metric == "log_loss":
        top = logits.max(axis=1)
        lse = top + np.log(np.exp(logits - top[:, None]).sum(axis=1))
        return float(np.mean(lse - logits[np.arange(len(targets)), targets])), []
    right = logits.argmax(axis=1) == targets
    if metric == "balanced_accuracy":
        present = [c for c in classes if (targets == c).any()]
        return (float(np.mean([right[targets == c].mean() for c in present]) * 100.0),
                [str(c) for c in classes if c not in present])
    if metric == "macro_auc":
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        return macro_auc(probs / probs.sum(axis=1, keepdims=True), (targets[:, None] == classes).astype(float))
    return float(right.mean() * 100.0), []


def balanced_mse(pred: np.ndarray, target: np.ndarray) -> float:
    """Mean over the rating levels present of the per-level MSE."""
    levels = np.round(target).astype(np.int64)
    per_level = [np.mean((pred[levels == r] - target[levels == r]) ** 2) for r in np.unique(levels)]
    return float(np.mean(per_level))


def macro_auc(scores: np.ndarray, targets: np.ndarray, categories: tuple[str, ...] = ()) -> tuple[float, list[str]]:
    """Macro ROC AUC in percent over categories with both classes present; names the others."""
    from sklearn.metrics import roc_auc_score

    names = categories or tuple(str(c) for c in range(targets.shape[1]))
    aucs, left_out = [], []
    for c, name in enumerate(names):
        y = targets[:, c]
        if y.min() == y.max():
            left_out.append(name)
            continue
        aucs.append(roc_auc_score(y, scores[:, c]))
    return (float(np.mean(aucs) * 100.0) if aucs else float("nan")), left_out
