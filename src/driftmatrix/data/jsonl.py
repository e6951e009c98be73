"""Streaming record sources shared by every reader, with the drop bookkeeping in one place.

A reader is a pure ``parse(raw)`` that raises :class:`Drop` for a record it will not keep;
:func:`parse_records` counts every record, reports each drop with its place (an error in strict
mode) and yields the parsed values, one line at a time."""

from __future__ import annotations

import gzip
import logging
import os
import re
import sys
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, TypeVar

from driftmatrix.data.table import IngestReport

try:  # orjson is ~3x faster than json on review-sized lines; both give the same objects
    import orjson

    _loads = orjson.loads
    _JSONError: tuple[type[Exception], ...] = (orjson.JSONDecodeError,)
except ImportError:  # pragma: no cover
    import json

    _loads = json.loads
    _JSONError = (ValueError, UnicodeDecodeError, RecursionError)  # RecursionError: deep nesting

log = logging.getLogger(__name__)

T = TypeVar("T")
LOG_EVERY = 1_000_000  # progress log line interval when stderr is not a terminal
_PROGRESS_CHUNK = 4096


# reasons used across readers (the report keys)
UNPARSEABLE = "unparseable line"
MISSING = "missing field"
BAD_TIME = "bad timestamp"
OUT_OF_SCOPE = "out-of-scope date"
BAD_LABEL = "label outside the set"
BAD_IMAGE = "undecodable image"
BAD_TYPE = "wrong type"
DUPLICATE = "duplicate id"
EMPTY = "empty input"
TOO_LARGE = "oversized input"
BAD_MEMBER = "unreadable archive member"
UNREADABLE = "unreadable rest of file"  # truncated gzip / archive / Parquet: the rest is one drop
NOT_IMAGE = "not an image file"
REASONS = (UNPARSEABLE, MISSING, BAD_TIME, OUT_OF_SCOPE, BAD_LABEL, BAD_IMAGE, BAD_TYPE, DUPLICATE, EMPTY,
           TOO_LARGE, BAD_MEMBER, UNREADABLE, NOT_IMAGE)
BOM = b"\xef\xbb\xbf"
# a compressed stream that ends early or holds garbage (a plain I/O error still propagates)
STREAM_ERRORS: tuple[type[Exception], ...] = (EOFError, gzip.BadGzipFile, zlib.error)


class Drop(Exception):
    """A record is not kept: ``reason`` is the report key, ``field`` the offending field."""

    def __init__(self, reason: str, field: str | None = None, detail: str = "") -> None:
        super().__init__(reason)
        self.reason, self.field, self.detail = reason, field, detail

    def describe(self) -> str:
        where = f"field {self.field!r}" if self.field else ""
        return ": ".join(p for p in (where, self.detail) if p)


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class Unreadable(Exception):
    """The rest of a stream cannot be read: the caller counts it as one drop at ``lineno``."""

    def __init__(self, lineno: int, detail: str) -> None:
        super().__init__(detail)
        self.lineno, self.detail = lineno, detail


def error_text(exc: BaseException, limit: int = 100) -> str:
    """``Type: first line of the message``, without memory addresses so that reports are reproducible."""
    msg = _ADDRESS.sub("", str(exc).splitlines()[0])[:limit] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


class _Progress:
    """Byte-based progress on stderr: a tqdm bar on a terminal, else a log line per LOG_EVERY records."""

    def __init__(self, path: Path, enabled: bool) -> None:
        self.total = path.stat().st_size
        self.label = path.name
        self.bar = None
        self.done = 0
        self.records = 0
        if enabled and sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="B", unit_scale=True, desc=path.name,
                            file=sys.stderr, leave=False)
        self.enabled = enabled

    def update(self, position: int, records: int) -> None:
        if self.bar is not None:
            self.bar.update(position - self.done)
        elif self.enabled and records // LOG_EVERY > self.records // LOG_EVERY:
            log.info("%s: %d records, %.0f%% of %.1f MB", self.label, records,
                     100.0 * position / max(self.total, 1), self.total / 1e6)
        self.done, self.records = position, records

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def iter_lines(path: str | Path, progress: bool = True) -> Iterator[tuple[int, bytes]]:
    """``(line number, raw bytes)`` of every non-blank line of a plain or gzip file (a leading
    UTF-8 byte-order mark is removed); raises :class:`Unreadable` where a gzip stream breaks."""
    path = Path(path)
    raw = open(path, "rb")
    stream = gzip.GzipFile(fileobj=raw) if is_gzip(path) else raw
    bar = _Progress(path, progress)
    lineno = 0
    try:
        for lineno, line in enumerate(stream, 1):
            if lineno % _PROGRESS_CHUNK == 0:
                bar.update(raw.tell(), lineno)
            if lineno == 1 and line.startswith(BOM):
                line = line[len(BOM):]
            if line.strip():
                yield lineno, line
    except STREAM_ERRORS as exc:
        raise Unreadable(lineno + 1, error_text(exc)) from None
    finally:
        bar.close()
        stream.close()
        raw.close()


def stream_jsonl(path: str | Path, report: IngestReport, label: str | None = None,
                 progress: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(file:line, object)`` for each JSON-object line; counts reads, drops unparseable lines."""
    label = label or Path(path).name
    try:
        for lineno, line in iter_lines(path, progress):
            report.read += 1
            loc = f"{label}:{lineno}"
            try:
                obj = _loads(line)
            except _JSONError as exc:
                report.drop(UNPARSEABLE, loc, (str(exc).splitlines() or [type(exc).__name__])[0][:100])
                continue
            if not isinstance(obj, dict):
                report.drop(UNPARSEABLE, loc, f"expected a JSON object, got {type(obj).__name__}")
                continue
            yield loc, obj
    except Unreadable as exc:
        count_unreadable(report, f"{label}:{exc.lineno}", exc.detail)


def count_unreadable(report: IngestReport, loc: str, detail: str) -> None:
    """The unreadable rest of a file is read once and dropped once (read = kept + dropped holds)."""
    report.read += 1
    report.drop(UNREADABLE, loc, detail)


def parse_records(records: Iterable[tuple[str, Any]], parse: Callable[[Any], T],
                  report: IngestReport) -> Iterator[tuple[str, T]]:
    """Apply a pure ``parse`` to each record; a :class:`Drop` becomes a counted drop at its location."""
    for loc, raw in records:
        try:
            value = parse(raw)
        except Drop as d:
            report.drop(d.reason, loc, d.describe())
            continue
        yield loc, value


def rel_label(path: Path, root: Path) -> str:
    """Location prefix for ``path``: relative to the input root when the root is a folder."""
    try:
        return os.path.relpath(path, root) if root.is_dir() else path.name
    except ValueError:  # pragma: no cover - different drives
        return path.name
