"""Yearbook portraits: ``{F,M}/<year>_<state>_<city>_<school>_<n>.png`` (label M = 1, F = 0).

The input is a folder or an archive of the original layout (``F``/``M`` up to two levels down),
streamed member by member. Images are decoded once here with OpenCV's INTER_AREA resize, as the
authors did, and kept as uint8 (Pillow reads the header first; both give the same RGB bytes for
PNG). Decoding runs on ``workers`` threads with results taken in submission order, so the output is
the same for any number of workers. Untrusted input: members over ``max_bytes`` or images over
``max_pixels`` are dropped unread; corrupt members and truncated tars are counted drops."""

from __future__ import annotations

import io
import os
import re
import tarfile
import zipfile
from collections import deque
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any, Callable, Iterable, Iterator, TypeVar

import numpy as np

from driftmatrix.data.jsonl import (BAD_IMAGE, BAD_MEMBER, BAD_TIME, NOT_IMAGE, TOO_LARGE, UNREADABLE, Drop,
                                    error_text)
from driftmatrix.data.sources.common import FIRST_YEAR, LAST_YEAR, TableBuilder, take_options
from driftmatrix.data.table import DataError, DatasetMeta, IngestReport, IngestResult

CLASSES = ("F", "M")
YEAR_RE = re.compile(r"^(\d{4})_")
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg"}
MAX_DEPTH = 2  # folders allowed above F/ and M/
ARCHIVE_SUFFIXES = (".zip", ".tar", ".tar.gz", ".tgz")
DEFAULTS: dict[str, Any] = {
    "workers": 0,              # reading and decoding threads; 0 = one per core this process may use, plus
                               # one (a thread waiting on the disk leaves its core to the others)
    "window": 64,              # images in flight at most
    "max_bytes": 16 << 20,     # per file / archive member (a portrait is about 10 KB)
    "max_pixels": 1 << 24,     # per image, from its header (a portrait is 186 x 171)
}

# (class or None for the unreadable rest of an archive, location, file name, read-bytes callable
# that may raise Drop)
Member = tuple[str | None, str, str, Callable[[], bytes]]
T = TypeVar("T")


def class_of(parts: tuple[str, ...]) -> str | None:
    """``F``/``M`` when a member path is ``[<=2 folders/]{F,M}/<file>``, else None."""
    if len(parts) < 2 or len(parts) > MAX_DEPTH + 2 or parts[-2] not in CLASSES:
        return None
    if any(p.startswith((".", "__MACOSX")) for p in parts):  # macOS resource forks, hidden files
        return None
    return parts[-2]


def _too_large(size: int, max_bytes: int) -> Drop:
    return Drop(TOO_LARGE, "bytes", f"{size} bytes > max_bytes {max_bytes}")


def _read_file(path: Path, max_bytes: int) -> bytes:
    with open(path, "rb") as fh:  # no stat first: one system call less per file on slow disks
        data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise _too_large(os.fstat(fh.fileno()).st_size, max_bytes)
    return data


def _folder_members(root: Path, max_bytes: int) -> Iterator[Member]:
    for cls_dir in sorted(p for depth in range(MAX_DEPTH + 1) for p in root.glob("/".join(["*"] * depth + ["[FM]"]))
                          if p.is_dir()):
        rel = cls_dir.relative_to(root).parts
        with os.scandir(cls_dir) as entries:  # file type from the directory listing, no stat per file
            files = sorted((e.name, e.path) for e in entries if e.is_file())
        for name, path in files:
            parts = (*rel, name)
            if class_of(parts):
                yield parts[-2], "/".join((root.name, *parts)), name, lambda p=path: _read_file(p, max_bytes)


def _read_zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, max_bytes: int) -> bytes:
    if info.file_size > max_bytes:
        raise _too_large(info.file_size, max_bytes)
    try:
        with zf.open(info) as fh:
            data = fh.read(max_bytes + 1)  # the declared size may lie: never read past the cap
    except Exception as exc:  # noqa: BLE001 - bad CRC, corrupt deflate, encryption, odd methods
        raise Drop(BAD_MEMBER, "member", error_text(exc)) from None
    if len(data) > max_bytes:
        raise _too_large(len(data), max_bytes)
    return data


def _zip_members(path: Path, max_bytes: int) -> Iterator[Member]:
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, EOFError, ValueError, OSError) as exc:
        raise DataError(f"{path}: not a readable zip archive ({error_text(exc)})") from None
    with zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            parts = PurePosixPath(info.filename).parts
            cls = None if info.is_dir() else class_of(parts)
            if cls:  # read here, while the archive is open (the decoding threads may come later)
                try:
                    data = _read_zip_member(zf, info, max_bytes)
                except Drop as drop:
                    yield cls, f"{path.name}:{info.filename}", parts[-1], _raise(drop)
                    continue
                yield cls, f"{path.name}:{info.filename}", parts[-1], lambda d=data: d


def _raise(drop: Drop) -> Callable[[], bytes]:
    def read() -> bytes:
        raise drop
    return read


def _tar_members(path: Path, max_bytes: int) -> Iterator[Member]:
    try:
        tf = tarfile.open(path, mode="r|*")  # stream: no seeking, one pass over the archive
    except Exception as exc:  # noqa: BLE001 - tarfile and its decompressors raise many types
        raise DataError(f"{path}: not a readable tar archive ({error_text(exc)})") from None
    last = "its start"
    with tf:
        members = iter(tf)
        while True:
            try:
                info = next(members)
            except StopIteration:
                return
            except Exception as exc:  # noqa: BLE001 - truncated or corrupt stream: the rest is lost
                yield None, f"{path.name}: after {last}", "", _raise(Drop(UNREADABLE, "archive", error_text(exc)))
                return
            last = info.name
            parts = PurePosixPath(info.name).parts
            cls = class_of(parts) if info.isfile() else None
            if not cls:
                continue
            loc = f"{path.name}:{info.name}"
            if info.size > max_bytes:  # skipped, never held in memory
                yield cls, loc, parts[-1], _raise(_too_large(info.size, max_bytes))
                continue
            try:
                data = tf.extractfile(info).read()  # type: ignore[union-attr]
            except Exception as exc:  # noqa: BLE001 - the stream broke inside this member
                yield cls, loc, parts[-1], _raise(Drop(UNREADABLE, "archive", error_text(exc)))
                return
            yield cls, loc, parts[-1], lambda d=data: d


def members(root: Path, max_bytes: int = DEFAULTS["max_bytes"]) -> Iterator[Member]:
    if root.is_dir():
        return _folder_members(root, max_bytes)
    name = root.name.lower()
    if name.endswith(".zip"):
        return _zip_members(root, max_bytes)
    if name.endswith((".tar", ".tar.gz", ".tgz")):
        return _tar_members(root, max_bytes)
    raise DataError(f"{root}: not a Yearbook folder or archive ({', '.join(ARCHIVE_SUFFIXES)}) "
                    "with F/ and M/ folders of <year>_*.png")


def year_of(file_name: str) -> int:
    """The leading ``<year>_`` of a file name, within the years a table can hold."""
    m = YEAR_RE.match(file_name)
    if not m:
        raise Drop(BAD_TIME, "file name", "must start with <year>_")
    year = int(m.group(1))
    if not FIRST_YEAR <= year <= LAST_YEAR:
        raise Drop(BAD_TIME, "file name", f"year {m.group(1)} outside the representable years "
                                          f"{FIRST_YEAR}-{LAST_YEAR}")
    return year


#: PNG modes OpenCV decodes to the RGB bytes of Pillow's ``convert("RGB")`` (alpha dropped, palette
#: and grey expanded); 16-bit, CMYK and the rest go through Pillow.
OPENCV_PNG_MODES = frozenset({"RGB", "RGBA", "L", "LA", "P"})


@lru_cache(maxsize=1)
def _opencv():
    """OpenCV with its per-image warnings off: a broken image is a counted drop, reported once."""
    import cv2

    cv2.utils.logging.setLogLevel(cv2.utils.logging.LOG_LEVEL_ERROR)
    return cv2


def decode(data: bytes, size: int, max_pixels: int = DEFAULTS["max_pixels"]) -> np.ndarray:
    """PNG/JPEG bytes -> uint8 (size, size, 3) RGB array, or Drop (undecodable / oversized image)."""
    from PIL import Image

    cv2 = _opencv()
    try:
        with Image.open(io.BytesIO(data)) as im:  # reads the header only
            w, h = im.size
            if w * h > max_pixels:
                raise Drop(TOO_LARGE, "pixels", f"{w}x{h} pixels > max_pixels {max_pixels}")
            arr = None
            if im.format == "PNG" and im.mode in OPENCV_PNG_MODES:
                arr = cv2.imdecode(np.frombuffer(data, np.uint8),
                                   cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION)
            if arr is None or arr.shape[:2] != (h, w):  # not for OpenCV, or broken: Pillow decides (and says why)
                arr = np.asarray(im.convert("RGB"), dtype=np.uint8)
    except Drop:
        raise
    except Image.DecompressionBombError as exc:
        raise Drop(TOO_LARGE, "pixels", error_text(exc, 80)) from None
    except Exception as exc:  # noqa: BLE001 - a decoder fed untrusted bytes: any failure is a drop
        raise Drop(BAD_IMAGE, "pixels", error_text(exc, 80)) from None
    return arr if arr.shape[:2] == (size, size) else cv2.resize(arr, (size, size), interpolation=cv2.INTER_AREA)


def ordered_map(fn: Callable[[Any], T], items: Iterable[Any], workers: int, window: int) -> Iterator[tuple[Any, T]]:
    """``(item, fn(item))`` in input order, ``fn`` on ``workers`` threads with ``window`` in flight."""
    if workers <= 1:
        for item in items:
            yield item, fn(item)
        return
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="yearbook-decode") as pool:
        queue: deque = deque()
        for item in items:
            queue.append((item, pool.submit(fn, item)))
            if len(queue) >= window:
                head, future = queue.popleft()
                yield head, future.result()
        while queue:
            head, future = queue.popleft()
            yield head, future.result()


def _prepared(found: Iterable[Member]) -> Iterator[tuple[tuple[str | None, str, str, int], Callable[[], bytes]]]:
    """Checks that need no reading, and a reader per member: decoding threads read too, so disks overlap."""
    for cls, loc, file_name, read in found:
        year = 0
        try:
            if cls is not None:
                suffix = PurePosixPath(file_name).suffix
                if suffix.lower() not in IMAGE_SUFFIXES:
                    raise Drop(NOT_IMAGE, None, f"suffix {suffix!r}")
                year = year_of(file_name)
        except Drop as d:
            read = _raise(d)
        yield (cls, loc, file_name, year), read


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def read_yearbook(path: str | Path, name: str = "yearbook", size: int = 32,
                  strict: bool = False, **options: Any) -> IngestResult:
    """Read a Yearbook folder or archive into the normalised table plus a uint8 image array."""
    opts = take_options("yearbook", options, DEFAULTS)
    workers = int(opts["workers"]) or available_cores() + 1
    window, max_bytes, max_pixels = (int(opts[k]) for k in ("window", "max_bytes", "max_pixels"))
    if min(window, max_bytes, max_pixels) < 1 or workers < 0:
        raise DataError(f"yearbook reader: options workers, window, max_bytes, max_pixels must be positive, got "
                        f"{ {k: opts[k] for k in DEFAULTS} }")
    root = Path(path)
    if not root.exists():
        raise DataError(f"{root}: no such folder or archive (fetch it: driftmatrix data fetch yearbook)")
    report = IngestReport(strict=strict)
    builder = TableBuilder(("label",), report, text=False)
    images = []

    def job(item: tuple[Any, Callable[[], bytes]]) -> np.ndarray | Drop:
        try:
            return decode(item[1](), size, max_pixels)
        except Drop as d:
            return d

    for ((cls, loc, file_name, year), _), out in ordered_map(job, _prepared(members(root, max_bytes)), workers, window):
        report.read += 1
        if isinstance(out, Drop):
            report.drop(out.reason, loc, out.describe())
            continue
        t = datetime(year, 1, 1, tzinfo=timezone.utc)
        if builder.add(loc, f"{cls}/{PurePosixPath(file_name).stem}", t, str(year),
                       {"label": CLASSES.index(cls)}):
            images.append(out)
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
