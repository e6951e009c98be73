"""Frozen pretrained encoders with one trainable linear layer (protocol section 6): the ``embed``
stage caches the encoder's pooled output once and these heads read only that cache."""

from __future__ import annotations

from typing import Any, Mapping

import torch
from torch import nn


class LinearHead(nn.Module):
    def __init__(self, dim: int, num_outputs: int):
        super().__init__()
        self.linear = nn.Linear(dim, num_outputs)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.linear(pooled)


def build(cls: str, shape: Mapping[str, Any], num_outputs: int, info: Mapping[str, Any],
          dropout: float | None = None) -> nn.Module:
    """A linear head on ``info["dim"]``-d pooled features (catalogue entries of frozen encoders)."""
    return LinearHead(int(info["dim"]), num_outputs)
