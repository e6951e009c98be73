"""Yearbook portraits: ``<root>/{F,M}/<year>_<anything>.png`` (label M = 1, F = 0).

Images are decoded once here, resized to ``size`` x ``size`` RGB and kept as uint8; nothing
downstream decodes an image again.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

from driftmatrix.data.table import DataError, DatasetMeta, IngestReport, IngestResult

CLASSES = ("F", "M")
YEAR_RE = re.compile(r"^(\d{4})_")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}


def _files(root: Path) -> Iterator[tuple[str, Path]]:
    for cls in CLASSES:
        folder = root / cls
        if folder.is_dir():
            for p in sorted(folder.iterdir()):
                yield cls, p


def read_yearbook(path: str | Path, name: str = "yearbook", size: int = 32,
                  strict: bool = False, **options: Any) -> IngestResult:
    """Read a Yearbook folder into the normalised table plus a uint8 image array."""
    import numpy as np
    import pandas as pd
    from PIL import Image, UnidentifiedImageError

    if options:
        raise DataError(f"yearbook reader: unknown option(s) {sorted(options)}")
    root = Path(path)
    if not root.is_dir() or not any((root / c).is_dir() for c in CLASSES):
        raise DataError(f"{root}: not a Yearbook folder (expected sub-folders F/ and M/ of <year>_*.png)")
    report = IngestReport(strict=strict)
    rows, images = [], []
    for cls, p in _files(root):
        report.read += 1
        rel = f"{root.name}/{cls}/{p.name}"
        if p.suffix.lower() not in IMAGE_SUFFIXES:
            report.drop("not an image file", rel, f"suffix {p.suffix!r}")
            continue
        m = YEAR_RE.match(p.name)
        if not m:
            report.drop("bad timestamp", rel, "file name must start with <year>_")
            continue
        try:
            with Image.open(p) as im:
                im = im.convert("RGB")
                if im.size != (size, size):
                    im = im.resize((size, size), Image.BILINEAR)
                arr = np.asarray(im, dtype=np.uint8)
        except (UnidentifiedImageError, OSError) as exc:
            report.drop("undecodable image", rel, str(exc)[:80])
            continue
        year = int(m.group(1))
        rows.append({"id": f"{cls}/{p.stem}", "timestamp": pd.Timestamp(year=year, month=1, day=1, tz="UTC"),
                     "period": str(year), "source": rel, "label": CLASSES.index(cls)})
        images.append(arr)
        report.per_period[str(year)] += 1
    if not rows:
        raise DataError(f"{root}: no readable images found ({report.summary()})")
    table = pd.DataFrame(rows)
    table["timestamp"] = pd.to_datetime(table["timestamp"], utc=True)
    table["label"] = table["label"].astype("int64")
    report.kept = len(table)
    meta = DatasetMeta(name=name, task="binary", input_kind="image", label_columns=("label",),
                       class_names=CLASSES, period="year")
    return IngestResult(table=table, meta=meta, report=report, images=np.stack(images))
