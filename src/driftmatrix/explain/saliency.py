"""Gradient saliency (paper section 5.1.1, Figure 3) as pure tensor functions.

The map of an image is ``max_c |d f_k(x) / d x_c|`` for the predicted output ``k``, min-max
normalised to [0, 1]. The gradient is taken with respect to the input only, so frozen backbones work
and no parameter gradient accumulates; ``prepare`` (pixels -> forward arguments) is differentiated
through."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Mapping

import torch

Prepare = Callable[[torch.Tensor], tuple[torch.Tensor, ...]]
EPS = 1e-12


@dataclass(frozen=True)
class SaliencySummary:
    mean_map: torch.Tensor  # (H, W)
    mean_image: torch.Tensor  # (C, H, W), in the model's pixel space
    n_images: int
    per_image: Mapping[str, float]  # mean over images of each per-image score


def _identity(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return (x,)


def minmax_per_image(maps: torch.Tensor) -> torch.Tensor:
    """Scale each ``(H, W)`` map of a ``(B, H, W)`` stack to [0, 1]; a constant map becomes 0."""
    flat = maps.flatten(1)
    lo = flat.min(dim=1, keepdim=True).values
    hi = flat.max(dim=1, keepdim=True).values
    return ((flat - lo) / (hi - lo).clamp_min(EPS)).view_as(maps)


def saliency_maps(model: torch.nn.Module, pixels: torch.Tensor, prepare: Prepare | None = None) -> torch.Tensor:
    """Per-image saliency ``(B, H, W)`` in [0, 1] of pixel images; each map depends on its image only."""
    prepare = prepare or _identity
    x = pixels.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        out = model(*prepare(x))
        if out.ndim == 1:
            out = out[:, None]
        target = out.gather(1, out.argmax(dim=1, keepdim=True)).sum()
        (grad,) = torch.autograd.grad(target, x)
    return minmax_per_image(grad.abs().amax(dim=1))


def mean_saliency(model: torch.nn.Module, batches: Iterable[torch.Tensor], prepare: Prepare | None = None,
                  per_image: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] | None = None) -> SaliencySummary:
    """Mean map, mean pixel image and mean of each ``per_image`` score over all images of ``batches``."""
    per_image = dict(per_image or {})
    total_map, total_img, n = None, None, 0
    totals = {name: 0.0 for name in per_image}
    for x in batches:
        maps = saliency_maps(model, x, prepare)
        total_map = maps.sum(dim=0) if total_map is None else total_map + maps.sum(dim=0)
        img = x.detach().sum(dim=0)
        total_img = img if total_img is None else total_img + img
        for name, fn in per_image.items():
            totals[name] += float(torch.as_tensor(fn(maps)).sum())
        n += len(x)
    if n == 0:
        raise ValueError("mean_saliency: no images")
    return SaliencySummary(total_map / n, total_img / n, n, {k: v / n for k, v in totals.items()})
