"""Model inputs held as tensors, fetched by row index: no per-sample decoding in training loops.

An inputs object has ``len()``, ``to(device)`` and ``batch(idx) -> tuple of tensors`` (the
positional arguments of the model's forward). Pixels are kept as uint8 and normalised per batch;
cached text or encoder features come from ``driftmatrix.features.cache``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from driftmatrix.data.table import DataError


class Inputs(Protocol):
    def __len__(self) -> int: ...

    def to(self, device: torch.device) -> "Inputs": ...

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]: ...


class PixelInputs:
    """uint8 images (N, H, W, 3) -> float batches (B, 3, H, W) in [-1, 1], channels-last unless
    ``channels_last`` is off (an MLP would pay a copy per batch). Where every image's floats fit
    in ``FLOAT_BUDGET`` they are normalised once, as a small model otherwise spends a fifth of
    each step converting; either way a batch holds the same numbers."""

    channels_last = True
    FLOAT_BUDGET = 1 << 30

    def __init__(self, images: np.ndarray | torch.Tensor):
        data = images if isinstance(images, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(images))
        if data.ndim != 4 or data.shape[-1] != 3:
            raise DataError(f"pixel inputs must be (N, H, W, 3) uint8, got shape {tuple(data.shape)}")
        self.data = data.permute(0, 3, 1, 2).contiguous()
        self.floats: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.data)

    def to(self, device: torch.device) -> "PixelInputs":
        out = PixelInputs.__new__(PixelInputs)
        out.data, out.channels_last, out.floats = self.data.to(device), self.channels_last, None
        return out

    @property
    def layout(self) -> torch.memory_format:
        """The memory layout of the batches."""
        return torch.channels_last if self.channels_last else torch.contiguous_format

    def _resident(self) -> torch.Tensor | None:
        """Every image's floats, in the layout of the batches (made at the first batch)."""
        if self.floats is None and self.data.nelement() * 4 <= self.FLOAT_BUDGET:
            self.floats = normalise(self.data.contiguous(memory_format=self.layout))
        return self.floats

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor]:
        idx = idx.to(self.data.device)
        floats = self._resident()
        x = normalise(take_rows(self.data, idx)) if floats is None else take_rows(floats, idx)
        return (x.contiguous(memory_format=self.layout),)


class RowCountInputs:
    """Inputs of a model that reads none (the ``Prior`` baseline): a batch is its row indices."""

    def __init__(self, n_rows: int):
        self.n_rows = int(n_rows)

    def __len__(self) -> int:
        return self.n_rows

    def to(self, device: torch.device) -> "RowCountInputs":
        return self

    def batch(self, idx: torch.Tensor) -> tuple[torch.Tensor]:
        return (idx,)


def take_rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t[idx]`` (rows of the first dimension) in ``t``'s memory layout, channels-last included.
    ``index_select`` copies whole rows; indexing gathers element by element, 5-8x slower for a
    batch of images (tests/features/test_inputs.py)."""
    if t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last):
        return torch.index_select(t.permute(0, 2, 3, 1), 0, idx).permute(0, 3, 1, 2)
    return torch.index_select(t, 0, idx)


def normalise(pixels: torch.Tensor) -> torch.Tensor:
    """uint8 [0, 255] -> float [-1, 1] (the authors fed raw 0-255 floats; protocol section 6)."""
    return pixels.float().div_(127.5).sub_(1.0)


def load_inputs(inputs: str, slices_dir: str | Path, features_dir: str | Path = "outputs/features",
                encoder: str | None = None, embed=None) -> Inputs:
    """Inputs of kind ``pixels``, ``token_states``, ``pooled``, ``table`` or ``none`` for every row."""
    from driftmatrix.data.slicing import load_slices

    if inputs == "none":
        rows, _, _ = load_slices(slices_dir)
        return RowCountInputs(len(rows))
    if inputs == "table":
        from driftmatrix.data.table import DatasetMeta, feature_column
        from driftmatrix.features.table import TableInputs

        rows, manifest, _ = load_slices(slices_dir)
        meta = DatasetMeta.from_dict(manifest["dataset"])
        if not meta.features:
            raise DataError(f"{slices_dir}: a tabular model needs a feature table (dataset.options.features), "
                            f"the slices hold {meta.input_kind} data")
        return TableInputs.from_frame(rows, meta.numeric, meta.categorical,
                                      [feature_column(f) for f in meta.features])
    if inputs == "pixels":
        _, _, images = load_slices(slices_dir)
        if images is None:
            raise DataError(f"{slices_dir}: image model requested but the slices hold no images.npy")
        return PixelInputs(np.array(images))
    from driftmatrix.features import cache  # cached encoder features (text states, pooled vectors)

    return cache.load_cached_inputs(inputs, slices_dir, features_dir, encoder, embed)
