"""Pixel-space forward passes for checkpoints that do not read pixels themselves: a frozen-encoder
head's saliency needs the whole path pixels -> frozen backbone -> head."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def encoder_prepare(encoder: Any, size: int | None = None):
    """``[-1, 1]`` pixels (B, 3, h, w) -> ``(pooled features,)`` through a frozen vision encoder, as
    its caching path does but without ``inference_mode``, so it can be differentiated."""
    from driftmatrix.features.encoders import IMAGE_SIZE

    size = size or IMAGE_SIZE

    def prepare(x: torch.Tensor) -> tuple[torch.Tensor]:
        x01 = (x + 1.0) / 2.0
        x01 = F.interpolate(x01, size=(size, size), mode="bilinear", align_corners=False)
        mean = torch.tensor(encoder.mean, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        std = torch.tensor(encoder.std, device=x.device, dtype=x.dtype).view(1, 3, 1, 1)
        return (encoder._forward((x01 - mean) / std).float(),)

    return prepare
