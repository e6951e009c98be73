"""Output priors: every model starts at the best constant, and the ``Prior`` baseline is that constant.

The prior of a cutoff is the constant output that minimises the cutoff's own training loss
(``tasks.make_loss``) over its training targets, i.e. what a model learns when its inputs carry no
information:

- binary / multiclass (cross-entropy): logit_k = log(n_k / n), the log class frequencies
  (softmax gives the class shares; for two classes the logit gap is the log-odds). The argmax is
  the majority class, the best constant under accuracy.
- regression (weighted MSE, ``w_r = n / n_r``): the *weighted* training mean
  ``sum_i w_i y_i / sum_i w_i``. With inverse-frequency weights every rating level counts once,
  so for 1-5 stars this is the mean of the levels present (3.0 when all five are), not the plain
  training mean (about 4.2 on skewed reviews). It is the best constant under the reported
  balanced MSE too, where the plain mean is not: ``(1/L) sum_r (r - c)^2`` is smallest at the
  mean of the levels.
- multilabel (BCE with ``pos_weight_c = neg_c / pos_c``): per category
  ``logit_c = log(pos_weight_c * pos_c / neg_c)``, the log-odds of the prevalence *as the loss
  weights it*. That weighting balances every category that has positives, so its logit is 0;
  a category with no positives gets a large negative logit. (The raw prevalence log-odds would be
  pulled back to 0 by the weighted loss in the first steps.) A constant scores 50 in macro AUC
  whatever its value.

Absent classes and categories use a pseudo-count of 0.5 so logits stay finite.

:func:`init_output_bias` writes that prior into the bias of a model's final output layer, so
training starts at the constant instead of near 0 (regression outputs otherwise start far below
the 1-5 scale). :class:`Prior` is a model that outputs the bias only; ``train_defaults`` gives it
0 epochs, so after :func:`init_output_bias` it *is* the fitted baseline, trained by the same loop
at no cost, for every task and input kind (it reads only the batch size).
"""

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
    """The bias of the layer that produces ``model``'s outputs.

    ``Prior`` exposes it as ``output_bias``; every other registry model ends in an ``nn.Linear``
    registered after all its other layers (tests check this per model: with that layer's weight
    at zero the model outputs exactly its bias).
    """
    own = getattr(model, "output_bias", None)
    if isinstance(own, nn.Parameter):
        return own
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if not linears or linears[-1].bias is None:
        raise ValueError(f"{type(model).__name__}: no final linear layer with a bias to initialise")
    return linears[-1].bias


def init_output_bias(model: nn.Module, task: str, train_targets: np.ndarray) -> np.ndarray:
    """Set the output bias of ``model`` to the prior of ``train_targets`` (this cutoff's training
    rows); returns the prior. Call it right after the fresh model is built, before training."""
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
