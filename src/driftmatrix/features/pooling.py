"""Masked pooling shared by the encoders (pooled caches) and the text models (FFN, TX heads)."""

from __future__ import annotations

import torch


def masked_mean(states: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``states`` (B, L, D) over the positions where ``mask`` (B, L) is true; padding is
    multiplied out, and a row without a valid position pools to zeros."""
    keep = mask.unsqueeze(-1)
    total = torch.where(keep, states, torch.zeros((), dtype=states.dtype, device=states.device)).sum(dim=1)
    return total / keep.sum(dim=1).clamp_min(1).to(states.dtype)
