"""Slice stage: period binning, small-slice dropping, one stratified 70/30 split per slice.

The split depends only on (split_seed, slice rows): model seeds never touch it, so every model
and seed sees the same train/test rows (protocol section 1).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from driftmatrix.config import SlicingConfig
from driftmatrix.data.table import DataError, DatasetMeta, read_manifest
from driftmatrix.data.periods import PERIOD_MONTHS, slice_label

log = logging.getLogger(__name__)


def period_bins(timestamps: pd.Series, period: str = "year", width: int = 1) -> tuple[pd.Series, pd.Series]:
    """Start and label of each row's slice, bins anchored at year 0 so labels do not depend on the rows."""
    if period not in PERIOD_MONTHS:
        raise DataError(f"params.yaml: slicing.period {period!r} not in {sorted(PERIOD_MONTHS)}")
    if width < 1:
        raise DataError(f"params.yaml: slicing.width must be >= 1, got {width}")
    ts = pd.to_datetime(timestamps, utc=True)
    months = ts.dt.year * 12 + (ts.dt.month - 1)
    step = PERIOD_MONTHS[period] * width
    start_m = (months // step) * step
    start = pd.to_datetime({"year": start_m // 12, "month": start_m % 12 + 1, "day": 1}, utc=True)
    labels = start_m.map(lambda m: slice_label(int(m), period, width))
    return start, labels


def stratify_key(table: pd.DataFrame, meta: DatasetMeta) -> pd.Series:
    """What the split stratifies on: the class, the rating, or the multi-hot pattern."""
    if meta.task == "multilabel":
        return table[list(meta.label_columns)].astype(int).astype(str).agg("".join, axis=1)
    return table[meta.label_columns[0]].astype(str)


def stratified_split(keys: np.ndarray, test_fraction: float, seed: int) -> np.ndarray:
    """Boolean test mask: a seeded shuffle per stratum puts round(frac * n) rows in test."""
    rng = np.random.default_rng(seed)
    test = np.zeros(len(keys), dtype=bool)
    for key in sorted(set(keys.tolist())):
        idx = np.flatnonzero(keys == key)
        idx = idx[rng.permutation(len(idx))]
        n_test = int(np.floor(test_fraction * len(idx) + 0.5))
        test[idx[:n_test]] = True
    return test


def make_slices(table: pd.DataFrame, meta: DatasetMeta, cfg: SlicingConfig) -> tuple[pd.DataFrame, dict[str, Any]]:
    """Pure slicing: returns the sliced rows (sorted by slice, id) and the manifest (without version)."""
    table = table.copy()
    table["_pos"] = np.arange(len(table))
    start, labels = period_bins(table["timestamp"], cfg.period, cfg.width)
    table["_start"] = start.values
    table["_label"] = labels.values
    step = pd.DateOffset(months=PERIOD_MONTHS[cfg.period] * cfg.width)
    counts = table.groupby("_start", sort=True).size()
    kept_starts, dropped = [], []
    for s, n in counts.items():
        label = table.loc[table["_start"] == s, "_label"].iloc[0]
        if n < cfg.min_samples:
            dropped.append({"label": label, "n": int(n), "reason": f"fewer than min_samples={cfg.min_samples} rows"})
        else:
            kept_starts.append(s)
    if not kept_starts:
        raise DataError(f"slicing: no slice has at least min_samples={cfg.min_samples} rows "
                        f"({len(dropped)} slices dropped)")
    index_of = {s: k for k, s in enumerate(kept_starts)}
    rows = table[table["_start"].isin(index_of)].copy()
    rows["slice"] = rows["_start"].map(index_of).astype("int64")
    rows = rows.sort_values(["slice", "id"], kind="stable").reset_index(drop=True)

    keys = stratify_key(rows, meta).to_numpy()
    split = np.empty(len(rows), dtype=object)
    slices_info = []
    for k, s in enumerate(kept_starts):
        sel = np.flatnonzero(rows["slice"].to_numpy() == k)
        # Per-slice seed: the split of a slice does not change when other slices come or go.
        seed = [cfg.split_seed, int(pd.Timestamp(s).year), int(pd.Timestamp(s).month)]
        test = stratified_split(keys[sel], cfg.test_fraction, np.random.SeedSequence(seed).generate_state(1)[0])
        split[sel] = np.where(test, "test", "train")
        part = rows.iloc[sel]
        slices_info.append({
            "index": k, "label": str(part["_label"].iloc[0]),
            "start": pd.Timestamp(s).isoformat(), "end": (pd.Timestamp(s) + step).isoformat(),
            "n": int(len(sel)), "n_train": int((~test).sum()), "n_test": int(test.sum()),
            "label_counts": label_counts(part, meta),
        })
    rows["split"] = split.astype(str)
    manifest = {
        "dataset": meta.to_dict(), "period": cfg.period, "width": cfg.width,
        "split_seed": cfg.split_seed, "test_fraction": cfg.test_fraction, "min_samples": cfg.min_samples,
        "slices": slices_info, "dropped": dropped,
        "rows_dropped": int(sum(d["n"] for d in dropped)),
    }
    return rows, manifest


def label_counts(part: pd.DataFrame, meta: DatasetMeta) -> dict[str, int]:
    """Per class / rating level / category counts of one slice."""
    if meta.task == "multilabel":
        return {c.removeprefix("label_"): int(part[c].sum()) for c in meta.label_columns}
    col = part[meta.label_columns[0]]
    if meta.task == "regression":
        return {str(k): int(v) for k, v in col.value_counts().sort_index().items()}
    names = meta.class_names or tuple(str(i) for i in range(int(col.max()) + 1))
    return {names[int(k)]: int(v) for k, v in col.value_counts().sort_index().items()}


def slice_content_hashes(rows: pd.DataFrame, images: np.ndarray | None,
                         manifest: dict[str, Any]) -> list[str]:
    """One content hash per slice, changing only when its own rows do: what keys units and cells."""
    import hashlib

    slice_ids = rows["slice"].to_numpy()
    content = rows.drop(columns=["slice"])
    out = []
    for info in manifest["slices"]:
        sel = np.flatnonzero(slice_ids == info["index"])
        h = hashlib.sha256(str(info["label"]).encode())
        h.update(pd.util.hash_pandas_object(content.iloc[sel], index=False).to_numpy().tobytes())
        h.update(",".join(content.columns).encode())
        if images is not None:
            h.update(np.ascontiguousarray(images[sel]).tobytes())
        out.append(h.hexdigest()[:16])
    return out


def load_slices(slices_dir: str | Path) -> tuple[pd.DataFrame, dict[str, Any], np.ndarray | None]:
    """Rows, manifest and images (or None) of a slices folder."""
    slices_dir = Path(slices_dir)
    if not (slices_dir / "rows.parquet").exists():
        raise DataError(f"{slices_dir}: no rows.parquet (run `driftmatrix slice` first)")
    manifest = read_manifest(slices_dir)
    rows = pd.read_parquet(slices_dir / "rows.parquet")
    images_path = slices_dir / "images.npy"
    images = np.load(images_path, mmap_mode="r", allow_pickle=False) if images_path.exists() else None
    if images is not None and len(images) != len(rows):
        raise DataError(f"{images_path}: {len(images)} images for {len(rows)} rows")
    return rows, manifest, images
