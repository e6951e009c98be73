"""PNG figures (bytes) for the audit: heatmaps in drift-matrix orientation, prevalence lines.

Heatmaps put slice ``i`` on the rows (y axis) and slice ``j`` on the columns (x axis) with the
origin in the lower-left corner, so time increases upwards and to the right, like the model
drift matrices.
"""

from __future__ import annotations

import io
from typing import Sequence

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def _ticks(labels: Sequence[str], max_ticks: int = 20) -> tuple[list[int], list[str]]:
    step = max(1, int(np.ceil(len(labels) / max_ticks)))
    idx = list(range(0, len(labels), step))
    return idx, [str(labels[i]) for i in idx]


def heatmap(matrix: np.ndarray, labels: Sequence[str], title: str, colorbar: str, cmap: str = "magma_r") -> bytes:
    plt = _plt()
    k = len(labels)
    size = min(9.0, 3.0 + 0.25 * k)
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    data = np.ma.masked_invalid(np.asarray(matrix, float))
    im = ax.imshow(data, origin="lower", cmap=cmap, aspect="equal", interpolation="nearest")
    idx, names = _ticks(labels)
    ax.set_xticks(idx, names, rotation=90)
    ax.set_yticks(idx, names)
    ax.set_xlabel("slice j")
    ax.set_ylabel("slice i")
    ax.set_title(title)
    fig.colorbar(im, ax=ax, label=colorbar, shrink=0.8)
    return _png(fig)


def prevalence_lines(prev: np.ndarray, labels: Sequence[str], names: Sequence[str], ylabel: str) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8, 4))
    x = np.arange(len(labels))
    for c, name in enumerate(names):
        ax.plot(x, prev[:, c], marker="o", ms=3, label=str(name))
    idx, ticks = _ticks(labels)
    ax.set_xticks(idx, ticks, rotation=90)
    ax.set_xlabel("slice")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(1e-9, float(np.nanmax(prev)) * 1.05) if np.isfinite(prev).any() else 1)
    if len(names) <= 12:
        ax.legend(fontsize=8, ncols=min(4, len(names)))
    return _png(fig)


def scatter(x: Sequence[float], y: Sequence[float], xlabel: str, ylabel: str, title: str) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(x, y, s=12, alpha=0.7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    return _png(fig)
