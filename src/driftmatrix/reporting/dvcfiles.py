"""The per-model matrix files DVC plots: one long-format CSV per model, beside
``metrics/metrics.json`` in a git-tracked folder, so every commit and ``dvc exp run`` carries them
and ``dvc plots diff`` can put two revisions' matrices side by side (``.dvc/plots/drift_matrix.json``).
One row per cell (:data:`COLUMNS`); an empty field is a cell never scored, a std of fewer than two
seeds, or an unknown row count.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

COLUMNS = ("trained_up_to", "evaluated", "value", "std", "n_eval")


def _field(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def n_eval_grid(m) -> np.ndarray | None:
    """(K, K) rows scored per cell from ``extra["n_eval"]``; None when absent or misshapen."""
    grid = (m.extra or {}).get("n_eval")
    if grid is None:
        return None
    try:
        arr = np.array(grid, dtype=float)  # None -> NaN
    except (TypeError, ValueError):
        return None
    k = len(m.slices)
    return arr if arr.shape == (k, k) else None


def long_rows(m) -> list[tuple]:
    """One (trained_up_to, evaluated, value, std, n_eval) row per cell, rows then columns."""
    mean, std, n = m.mean, m.std, n_eval_grid(m)
    return [(a, b, float(mean[i, j]), float(std[i, j]),
             None if n is None or math.isnan(n[i, j]) else int(n[i, j]))
            for i, a in enumerate(m.slices) for j, b in enumerate(m.slices)]


def write_matrix_csvs(cohort, out_dir: str | Path) -> list[Path]:
    """``<out_dir>/<model>.csv`` per model; CSVs of models no longer in the cohort are removed
    (they are git-tracked: a stale one would live on in every later commit)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, m in cohort.models.items():
        path = out_dir / f"{name}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            w = csv.writer(f, lineterminator="\n")
            w.writerow(COLUMNS)
            w.writerows([_field(v) for v in row] for row in long_rows(m))
        written.append(path)
    for stale in set(out_dir.glob("*.csv")) - set(written):
        stale.unlink()
    return written
