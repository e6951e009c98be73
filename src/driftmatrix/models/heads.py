"""Output priors: every model starts at the best constant, and the ``Prior`` baseline is that
constant.

A cutoff's prior is the constant output that minimises its own training loss: the log class
frequencies for cross-entropy; for the weighted MSE the *weighted* mean, i.e. the mean of the rating
levels present (also the best constant under the reported balanced MSE, where the plain mean is
not); for weighted BCE the log-odds of the prevalence as the loss weights it (0 for every category
with positives). Absent classes use a pseudo-count of 0.5 so logits stay finite.
:func:`init_output_bias` writes it into the final layer's bias, so training starts at it (regression
outputs otherwise start far below the 1-5 scale); :class:`Prior` outputs that bias only and trains 0
epochs, so it *is* the fitted baseline, trained by the same loop for every task and input kind."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch
from torch import nn


PSEUDO_COUNT = 0.5


def prior_bias(task: str, train_targets: np.ndarray, num_outputs: int) -> np.ndarray:
    """The constant output (length ``num_outputs``) that minimises the task's training loss."""
    from driftmatrix.learn.tasks import level_weights, pos_weights

    y = np.asarray(train_targets)
    if len(y) == 0:
        raise ValueError("output prior: the cutoff has no training rows")
    if task in ("binary", "multiclass"):
        counts = np.bincount(y.astype(np.int64).reshape(-1), minlength=num_outputs)
        if len(counts) > num_outputs:
            raise ValueError(f"output prior: class {len(counts) - 1} in the targets but the model has "
                             f"{num_outputs} outputs")
        return np.log(np.maximum(counts, PSEUDO_COUNT) / len(y))
    if task == "regression":
        y = y.astype(np.float64).reshape(-1)
        levels, weights = level_weights(y)
        w = weights[np.searchsorted(levels, np.round(y).astype(np.int64))].astype(np.float64)
        return np.full(num_outputs, float((w * y).sum() / w.sum()))
    if task == "multilabel":
        y = y.astype(np.float64).reshape(len(y), -1)
        if y.shape[1] != num_outputs:
            raise ValueError(f"output prior: {y.shape[1]} categories in the targets, {num_outputs} outputs")
        pos = y.sum(axis=0)
        neg = len(y) - pos
        return np.log(np.maximum(pos_weights(y) * pos, PSEUDO_COUNT) / np.maximum(neg, PSEUDO_COUNT))
    raise ValueError(f"unknown task {task!r}")


def output_bias(model: nn.Module) -> nn.Parameter:
    """The bias of the layer that produces ``model``'s outputs: ``Prior``'s ``output_bias``, else
    the final ``nn.Linear``, registered after every other layer (tests check it per model)."""
    own = getattr(model, "output_bias", None)
    if isinstance(own, nn.Parameter):
        return own
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears or linears[-1].bias is None:
        raise ValueError(f"{type(model).__name__}: no final linear layer with a bias to initialise")
    return linears[-1].bias


def init_output_bias(model: nn.Module, task: str, train_targets: np.ndarray) -> np.ndarray:
    """Set ``model``'s output bias to the prior of ``train_targets``, before training; returns it."""
    bias = output_bias(model)
    prior = prior_bias(task, train_targets, bias.numel())
    with torch.no_grad():
        bias.copy_(torch.as_tensor(prior, dtype=bias.dtype, device=bias.device))
    return prior


class Prior(nn.Module):
    """The "no learning" baseline: the same output for every row, that output being its bias."""

    def __init__(self, num_outputs: int):
        super().__init__()
        self.output_bias = nn.Parameter(torch.zeros(num_outputs))

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return self.output_bias.repeat(len(inputs[0]), 1)  # a copy: no view of the parameter escapes


def build(cls: str, shape: Mapping[str, Any], num_outputs: int, info: Mapping[str, Any] | None = None,
          dropout: float | None = None) -> nn.Module:
    """The ``Prior`` baseline network (catalogue entry ``Prior``)."""
    return Prior(num_outputs)
