"""Slice stage: the ingested table cut into periods, small slices dropped (reported), each split
into train and test (``data.slicing``), written with the slices' content hashes."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from driftmatrix.config import Params, fingerprint
from driftmatrix.data.slicing import make_slices, slice_content_hashes
from driftmatrix.data.table import load_ingested

log = logging.getLogger(__name__)


def run(params: Params, src: str | Path, out: str | Path) -> dict[str, Any]:
    """Slice the ingested table and write ``rows.parquet``, ``images.npy`` and ``manifest.json``."""
    ingested = load_ingested(src)
    rows, manifest = make_slices(ingested.table, ingested.meta, params.slicing)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    positions = rows["_pos"].to_numpy()
    rows = rows.drop(columns=["_pos", "_start", "_label"])
    images = ingested.images[positions] if ingested.images is not None else None
    if images is not None:
        np.save(out / "images.npy", images)
    rows.to_parquet(out / "rows.parquet", index=False)
    for info, digest in zip(manifest["slices"], slice_content_hashes(rows, images, manifest)):
        info["hash"] = digest
    manifest["data_version"] = fingerprint(
        pd.util.hash_pandas_object(rows.drop(columns=["timestamp"]), index=False).sum().item(),
        manifest["slices"], str(ingested.images.sum()) if ingested.images is not None else "")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return manifest


def describe(manifest: dict[str, Any]) -> str:
    """Short terminal table of the slices and what was dropped."""
    lines = [f"{len(manifest['slices'])} slices ({manifest['period']} x {manifest['width']}), "
             f"split seed {manifest['split_seed']}, data version {manifest.get('data_version', '?')}"]
    for s in manifest["slices"]:
        counts = ", ".join(f"{k}={v}" for k, v in s["label_counts"].items())
        lines.append(f"  {s['label']:>12}  n={s['n']:>6}  train={s['n_train']:>6}  test={s['n_test']:>5}  {counts}")
    for d in manifest["dropped"]:
        lines.append(f"  dropped slice {d['label']}: {d['n']} rows ({d['reason']})")
    return "\n".join(lines)
