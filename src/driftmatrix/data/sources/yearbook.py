"""Yearbook portraits: ``{F,M}/<year>_<state>_<city>_<school>_<n>.png`` (label M = 1, F = 0).

The input is a folder or a ``.zip`` / ``.tar`` / ``.tar.gz`` archive of the original layout
``faces_aligned_small_mirrored_co_aligned_cropped_cleaned/{F,M}/...``; the ``F``/``M`` folders may
sit at the top or up to two folder levels down. Archives are streamed member by member (no
extraction to disk). Images are decoded once here, resized to ``size`` x ``size`` RGB and kept as
uint8; nothing downstream decodes an image again. Rows are ordered by (class, file name), whatever
the archive order.
"""

from __future__ import annotations

import io
import re
import tarfile
import zipfile
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterator

from driftmatrix.data.jsonl import BAD_IMAGE, BAD_TIME, Drop
from driftmatrix.data.sources.common import TableBuilder, take_options
from driftmatrix.data.table import DataError, DatasetMeta, IngestReport, IngestResult

CLASSES = ("F", "M")
YEAR_RE = re.compile(r"^(\d{4})_")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
MAX_DEPTH = 2  # folders allowed above F/ and M/
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")

# (class, location, file name, read-bytes callable)
Member = tuple[str, str, str, Callable[[], bytes]]


def class_of(parts: tuple[str, ...]) -> str | None:
    """``F``/``M`` when a member path is ``[<=2 folders/]{F,M}/<file>``, else None."""
    if len(parts) < 2 or len(parts) > MAX_DEPTH + 2 or parts[-2] not in CLASSES:
        return None
    if any(p.startswith((".", "__MACOSX")) for p in parts):  # macOS resource forks, hidden files
        return None
    return parts[-2]


def _folder_members(root: Path) -> Iterator[Member]:
    for cls_dir in sorted(p for depth in range(MAX_DEPTH + 1) for p in root.glob("/".join(["*"] * depth + ["[FM]"]))
                          if p.is_dir()):
        rel = cls_dir.relative_to(root).parts
        for p in sorted(cls_dir.iterdir()):
            parts = (*rel, p.name)
            cls = class_of(parts) if p.is_file() else None
            if cls:
                yield cls, "/".join((root.name, *parts)), p.name, p.read_bytes


def _zip_members(path: Path) -> Iterator[Member]:
    with zipfile.ZipFile(path) as zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            parts = PurePosixPath(info.filename).parts
            cls = None if info.is_dir() else class_of(parts)
            if cls:
                yield cls, f"{path.name}:{info.filename}", parts[-1], lambda i=info: zf.read(i)


def _tar_members(path: Path) -> Iterator[Member]:
    with tarfile.open(path, mode="r|*") as tf:  # stream: no seeking, one pass over the archive
        for info in tf:
            parts = PurePosixPath(info.name).parts
            cls = class_of(parts) if info.isfile() else None
            if cls:
                data = tf.extractfile(info).read()  # type: ignore[union-attr]
                yield cls, f"{path.name}:{info.name}", parts[-1], lambda d=data: d


def members(root: Path) -> Iterator[Member]:
    if root.is_dir():
        return _folder_members(root)
    name = root.name.lower()
    if name.endswith(".zip"):
        return _zip_members(root)
    if name.endswith((".tar", ".tar.gz", ".tgz")):
        return _tar_members(root)
    raise DataError(f"{root}: not a Yearbook folder or archive ({', '.join(ARCHIVE_SUFFIXES)}) "
                    "with F/ and M/ folders of <year>_*.png")


def year_of(file_name: str) -> int:
    m = YEAR_RE.match(file_name)
    if not m:
        raise Drop(BAD_TIME, "file name", "must start with <year>_")
    return int(m.group(1))


def decode(data: bytes, size: int):
    """PNG/JPEG bytes -> uint8 (size, size, 3) array, or Drop(undecodable image)."""
    import numpy as np
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im = im.convert("RGB")
            if im.size != (size, size):
                im = im.resize((size, size), Image.BILINEAR)
            return np.asarray(im, dtype=np.uint8)
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise Drop(BAD_IMAGE, "pixels", str(exc)[:80]) from None


def read_yearbook(path: str | Path, name: str = "yearbook", size: int = 32,
                  strict: bool = False, **options: Any) -> IngestResult:
    """Read a Yearbook folder or archive into the normalised table plus a uint8 image array."""
    import numpy as np

    take_options("yearbook", options, {})
    root = Path(path)
    if not root.exists():
        raise DataError(f"{root}: no such folder or archive (fetch it: driftmatrix data fetch yearbook)")
    report = IngestReport(strict=strict)
    builder = TableBuilder(("label",), report, text=False)
    images = []
    for cls, loc, file_name, read in members(root):
        report.read += 1
        suffix = PurePosixPath(file_name).suffix
        if suffix.lower() not in IMAGE_SUFFIXES:
            report.drop("not an image file", loc, f"suffix {suffix!r}")
            continue
        try:
            year = year_of(file_name)
            arr = decode(read(), size)
        except Drop as d:
            report.drop(d.reason, loc, d.describe())
            continue
        t = datetime(year, 1, 1, tzinfo=timezone.utc)
        if builder.add(loc, f"{cls}/{PurePosixPath(file_name).stem}", t, str(year),
                       {"label": CLASSES.index(cls)}):
            images.append(arr)
    if not report.read:
        raise DataError(f"{root}: no F/ or M/ folder of <year>_*.png found (at most {MAX_DEPTH} folder "
                        "levels below the folder or archive root)")
    if not len(builder):
        raise DataError(f"{root}: no readable images found ({report.summary()})")
    table = builder.frame(label_dtype="int64")
    order = np.argsort(table["id"].to_numpy(dtype=object), kind="stable")
    table = table.iloc[order].reset_index(drop=True)
    meta = DatasetMeta(name=name, task="binary", input_kind="image", label_columns=("label",),
                       class_names=CLASSES, period="year")
    return IngestResult(table=table, meta=meta, report=report, images=np.stack(images)[order])
