"""Frozen pretrained encoders with one trainable linear layer (protocol section 6).

The encoder itself never runs during training: the ``embed`` stage caches its pooled output once
(masked mean of the token states for text, the backbone's pooled features for images) and these
heads read only that cache (``inputs="pooled"``). Heads: 769 parameters on 768-d features with one
output, ``dim * C + C`` in general. Image heads train with Adam at lr 1e-4, text heads with the
text optimiser (AdamW, weight decay 0.01, grad-clip 1.0, lr 5e-4).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Mapping

import torch
from torch import nn

from driftmatrix.features.encoders import CATALOGUE
from driftmatrix.models.registry import ModelSpec, register
from driftmatrix.models.text import TRAIN_DEFAULTS as TEXT_DEFAULTS

IMAGE_DEFAULTS = {"optimizer": "adam", "lr": 1e-4}
FAMILY = {"text": "Frozen", "image": "Transfer"}  # the paper's section names


class LinearHead(nn.Module):
    def __init__(self, dim: int, num_outputs: int):
        super().__init__()
        self.linear = nn.Linear(dim, num_outputs)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.linear(pooled)


def _build(num_outputs: int, info: Mapping[str, Any], dropout: float | None = None) -> nn.Module:
    return LinearHead(int(info["dim"]), num_outputs)


for _name, _enc in CATALOGUE.items():
    register(ModelSpec(name=_name, family=FAMILY[_enc.modality], modality=_enc.modality, inputs="pooled",
                       build=_build, encoder=_name,
                       train_defaults=TEXT_DEFAULTS if _enc.modality == "text" else IMAGE_DEFAULTS,
                       description=f"linear head on frozen {_enc.source} ({_enc.backend}) pooled features"))
