"""How localised a saliency map is: pure numpy functions of non-negative maps (``(H, W)`` or a stack
``(..., H, W)``): ``top_share`` of the top ``fraction`` of pixels, ``normalised_entropy`` (1
uniform, 0 one pixel) and ``region_share``.

``pool`` sums a map over ``block x block`` cells first: raw pixels reward speckle (an MLP's few
isolated bright pixels hold a large share without being localised), 2 x 2 cells no longer do."""

from __future__ import annotations

import math

import numpy as np

TOP_FRACTION = 0.05


def _flat(maps: np.ndarray) -> np.ndarray:
    maps = np.asarray(maps, dtype=np.float64)
    if maps.ndim < 2 or (maps < 0).any():
        raise ValueError("concentration: expected non-negative maps of shape (..., H, W)")
    return maps.reshape(*maps.shape[:-2], -1)


def top_share(maps: np.ndarray, fraction: float = TOP_FRACTION) -> np.ndarray:
    flat = _flat(maps)
    k = max(1, math.ceil(fraction * flat.shape[-1]))
    top = -np.partition(-flat, k - 1, axis=-1)[..., :k]
    total = flat.sum(axis=-1)
    return np.where(total > 0, top.sum(axis=-1) / np.where(total > 0, total, 1.0), np.nan)


def normalised_entropy(maps: np.ndarray) -> np.ndarray:
    flat = _flat(maps)
    total = flat.sum(axis=-1, keepdims=True)
    p = flat / np.where(total > 0, total, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.where(p > 0, p * np.log(p), 0.0).sum(axis=-1)
    return np.where(total[..., 0] > 0, h / math.log(flat.shape[-1]), np.nan)


def region_share(maps: np.ndarray, rows: slice, cols: slice) -> np.ndarray:
    maps = np.asarray(maps, dtype=np.float64)
    inside = maps[..., rows, cols].sum(axis=(-2, -1))
    total = maps.sum(axis=(-2, -1))
    return np.where(total > 0, inside / np.where(total > 0, total, 1.0), np.nan)


def pool(maps: np.ndarray, block: int = 1) -> np.ndarray:
    """Sum over non-overlapping ``block x block`` cells (edges that do not fill a cell are dropped)."""
    maps = np.asarray(maps, dtype=np.float64)
    if block == 1:
        return maps
    h, w = (maps.shape[-2] // block) * block, (maps.shape[-1] // block) * block
    cut = maps[..., :h, :w]
    return cut.reshape(*cut.shape[:-2], h // block, block, w // block, block).sum(axis=(-3, -1))


def scores(one_map: np.ndarray, block: int = 1) -> dict[str, float]:
    """The two concentration numbers of one ``(H, W)`` map over ``block`` cells, as plain floats."""
    cells = pool(one_map, block)
    return {"top5_share": float(top_share(cells)), "entropy": float(normalised_entropy(cells))}
