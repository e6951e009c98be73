"""PNG figures (bytes) for the audit, heatmaps drawn by the model matrices' code
(``reporting.figures``) so both read the same way."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from driftmatrix.reporting import figures as base


def heatmap(matrix: np.ndarray, labels: Sequence[str], title: str, colorbar: str, cmap: str = "magma_r") -> bytes:
    """A K x K data-drift matrix, axes labelled slice i / slice j."""
    vmin, vmax = base.value_range([matrix])
    fig = base.matrix_figure(matrix, list(labels), title=title, vmin=vmin, vmax=max(vmax, vmin + 1e-12),
                             cmap=cmap, colorbar_label=colorbar)
    ax = fig.axes[0]
    ax.set_xlabel("slice j", fontsize=8)
    ax.set_ylabel("slice i", fontsize=8)
    return base.png_bytes(fig, dpi=110)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def prevalence_lines(prev: np.ndarray, labels: Sequence[str], names: Sequence[str], ylabel: str) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4))
    for c, name in enumerate(names):
        ax.plot(np.arange(len(labels)), prev[:, c], marker="o", ms=3, label=str(name))
    ticks = base.tick_positions(len(labels))
    ax.set_xticks(ticks, [labels[t] for t in ticks], rotation=90)
    ax.set_xlabel("slice")
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, float(np.nanmax(prev)) * 1.05 + 1e-9 if np.isfinite(prev).any() else 1)
    if len(names) <= 12:
        ax.legend(fontsize=8, ncols=min(4, len(names)))
    fig.tight_layout()
    return base.png_bytes(fig, dpi=110)


def scatter(x: Sequence[float], y: Sequence[float], xlabel: str, ylabel: str, title: str) -> bytes:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(x, y, s=12, alpha=0.7)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    fig.tight_layout()
    return base.png_bytes(fig, dpi=110)


def feature_grid(values: np.ndarray, features: Sequence[str], labels: Sequence[str], title: str, colorbar: str,
                 xlabel: str = "slice", cmap: str = "magma_r") -> bytes:
    """Features (rows) x periods (columns) heatmap, e.g. drift against the first slice or importance."""
    plt = _pyplot()
    values = np.asarray(values, dtype=float)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(labels) + 2.5), max(2.5, 0.3 * len(features) + 1.2)))
    finite = values[np.isfinite(values)]
    vmax = float(finite.max()) if finite.size else 1.0
    im = ax.imshow(np.ma.masked_invalid(values), aspect="auto", cmap=cmap, vmin=min(0.0, float(finite.min()) if finite.size else 0.0),
                   vmax=max(vmax, 1e-12), interpolation="nearest")
    ax.set_yticks(range(len(features)), list(features), fontsize=8)
    ticks = base.tick_positions(len(labels))
    ax.set_xticks(ticks, [labels[t] for t in ticks], rotation=90, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=10)
    fig.colorbar(im, ax=ax, label=colorbar)
    fig.tight_layout()
    return base.png_bytes(fig, dpi=110)
