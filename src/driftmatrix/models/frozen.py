"""Frozen pretrained encoders with one trainable linear layer (protocol section 6).

The encoder itself never runs during training: the ``embed`` stage caches its pooled output once
(masked mean of the token states for text, the backbone's pooled features for images) and these
heads read only that cache (``inputs="pooled"``). Heads: 769 parameters on 768-d features with one
output, ``dim * C + C`` in general. Image heads train with Adam at lr 1e-4, text heads with the
text optimiser (AdamW, weight decay 0.01, grad-clip 1.0, lr 5e-4).
"""

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
