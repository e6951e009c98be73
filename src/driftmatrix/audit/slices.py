"""Read ``outputs/slices/`` (docs/CONTRACTS.md) and count labels per slice, over classes, categories
or rating levels: validation and drift both use :func:`label_counts`, so they agree."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd

from driftmatrix.data.table import DatasetMeta


@dataclass(frozen=True)
class Slices:
    rows: pd.DataFrame
    manifest: dict[str, Any]
    meta: DatasetMeta
    images: np.ndarray | None = None

    @property
    def labels(self) -> list[str]:
        return [str(s["label"]) for s in self.manifest["slices"]]

    @property
    def specs(self) -> list[dict[str, Any]]:
        return list(self.manifest["slices"])

    def frame(self, index: int) -> pd.DataFrame:
        return self.rows[self.rows["slice"] == index]


def load_slices(slices_dir: str | Path, images: bool = False) -> Slices:
    """The slices folder as a Slices record (images memory-mapped, only when asked)."""
    from driftmatrix.data import slicing

    rows, manifest, imgs = slicing.load_slices(slices_dir)
    return Slices(rows=rows, manifest=manifest, meta=DatasetMeta.from_dict(manifest["dataset"]),
                  images=imgs if images else None)


def label_levels(meta: DatasetMeta, rows: pd.DataFrame, declared: Sequence[Any] | None = None) -> list[Any]:
    """The label axis: class indices, category columns (multilabel) or rating levels."""
    if meta.task == "multilabel":
        return list(meta.label_columns)
    if declared:
        return list(declared)
    if meta.task == "regression":
        return sorted({float(v) for v in rows["label"].dropna().unique()})
    if meta.class_names:
        return list(range(len(meta.class_names)))
    return sorted(int(v) for v in rows["label"].dropna().unique())


def allowed_values(meta: DatasetMeta, levels: Sequence[Any]) -> list[Any]:
    """Values a label column may hold: 0/1 per category (multilabel), else the axis levels."""
    return [0, 1] if meta.task == "multilabel" else list(levels)


def axis_names(meta: DatasetMeta, levels: Sequence[Any]) -> list[str]:
    """Readable names of the label axis (class names, categories, rating levels)."""
    if meta.task == "multilabel":
        return [c.removeprefix("label_") for c in meta.label_columns]
    if meta.task == "regression":
        return [f"{v:g}" for v in levels]
    if meta.class_names and len(meta.class_names) == len(levels):
        return list(meta.class_names)
    return [str(v) for v in levels]


def label_counts(frame: pd.DataFrame, meta: DatasetMeta, levels: Sequence[Any]) -> np.ndarray:
    """Counts along the label axis for one frame (positives per category for multilabel)."""
    if meta.task == "multilabel":
        return np.array([int(frame[c].fillna(0).sum()) for c in meta.label_columns], dtype=float)
    counts = frame["label"].dropna().value_counts()
    return np.array([float(counts.get(v, 0)) for v in levels])


def counts_by_slice(rows: pd.DataFrame, meta: DatasetMeta, levels: Sequence[Any], k: int) -> tuple[np.ndarray, np.ndarray]:
    """(K x C label counts, K row counts) over slices 0..K-1."""
    groups = dict(tuple(rows.groupby("slice", sort=True)))
    counts = np.zeros((k, len(levels)))
    n = np.zeros(k)
    for i in range(k):
        if i in groups:
            counts[i] = label_counts(groups[i], meta, levels)
            n[i] = len(groups[i])
    return counts, n
