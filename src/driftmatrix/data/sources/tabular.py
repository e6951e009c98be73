"""Any timestamped table: CSV, Parquet or JSON lines (a file, or a folder of such files).

Options (``params.yaml: dataset.options`` or ``--option key=value``):

- ``timestamp`` (required): column with an epoch (s or ms), an ISO-8601 string or a plain year;
  ``time_format``: ``auto`` (default; >= 1e11 is ms, a 4-digit integer is a year) | ``s`` | ``ms`` |
  ``iso`` | ``year``;
- ``input`` (required): text column(s), joined with a blank line;
- ``label`` (required): the label column; for ``multilabel`` either several 0/1 columns or one
  column holding category names separated by ``label_sep`` (default space) or a JSON list;
- ``task`` (required): binary | multiclass | multilabel | regression;
- ``classes``: class/category names in label order (default: sorted values found in the data;
  numerically sorted when all are numbers); a label outside a given set is dropped;
- ``id``: column with a unique record id (default: ``file:line``); ``period``: year | half-year |
  quarter | month (default year); ``start`` / ``end`` (inclusive): date scope; ``format``: csv |
  parquet | jsonl (default: from the file suffix); ``delimiter``: CSV delimiter (default ``,``);
- ``target_range`` (regression, default ``[0, 1000]``): regression targets are rating-like levels
  (the balanced MSE and the loss weights work per rounded level, and the level indexes the weight
  table), so a target outside the range is dropped (``label outside the set``).

CSV files are read as UTF-8 (a byte-order mark is skipped); a row with bytes that are not UTF-8 in
a column the reader uses is dropped as ``unparseable line``. The unreadable rest of a truncated
gzip or Parquet file counts as one dropped record.
"""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

from driftmatrix.data.jsonl import (BAD_LABEL, BAD_TYPE, MISSING, STREAM_ERRORS, UNPARSEABLE, Drop,
                                    count_unreadable, error_text, is_gzip, parse_records, rel_label,
                                    stream_jsonl)
from driftmatrix.data.sources.common import (TableBuilder, as_list, check_scope, end_of_scope, join_inputs,
                                             parse_date, parse_time, period_label, preview, take_options)
from driftmatrix.data.table import TASKS, DataError, DatasetMeta, IngestReport, IngestResult

FORMATS = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl",
           ".ndjson": "jsonl", ".json": "jsonl"}
TIME_FORMATS = ("auto", "s", "ms", "iso", "year")
DEFAULTS: dict[str, Any] = {
    "timestamp": None, "time_format": "auto", "input": None, "label": None, "task": None,
    "classes": None, "id": None, "period": "year", "start": None, "end": None, "format": None,
    "delimiter": ",", "label_sep": " ", "progress": True, "target_range": [0, 1000],
}
_TRUE = {"1", "true", "yes"}
_FALSE = {"0", "false", "no"}


@dataclass(frozen=True)
class Spec:
    time_col: str
    time_format: str
    inputs: tuple[str, ...]
    labels: tuple[str, ...]
    task: str
    classes: tuple[str, ...] | None
    id_col: str | None
    period: str
    start: datetime | None
    stop: datetime | None
    label_sep: str
    target_range: tuple[float, float] = (0.0, 1000.0)


@dataclass(frozen=True)
class Row:
    id: str | None
    time: datetime
    period: str
    label: Any  # float | class key | tuple of 0/1 | frozenset of category keys
    text: str


def _blank(v: Any) -> bool:
    return v is None or (isinstance(v, str) and not v.strip()) or (isinstance(v, float) and v != v)


def label_key(v: Any, col: str | None = None) -> str:
    """Canonical string of a class value: 1, 1.0 and "1" are the same class. A value that cannot
    name a class (a list, an object, bytes, a number of hundreds of digits) is Drop(wrong type)."""
    if isinstance(v, bool):
        return str(int(v))
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (str, float)) or (isinstance(v, int) and v.bit_length() <= 64):
        return str(v).strip()
    raise Drop(BAD_TYPE, col, f"{preview(v, 20)} ({type(v).__name__}) cannot be a label or id")


def sort_classes(keys: set[str]) -> tuple[str, ...]:
    try:
        return tuple(sorted(keys, key=float))
    except ValueError:
        return tuple(sorted(keys))


def _flag(v: Any, col: str) -> int:
    s = label_key(v, col).lower()
    if s in _TRUE:
        return 1
    if s in _FALSE:
        return 0
    raise Drop(BAD_LABEL, col, f"{preview(v, 20)} is not 0/1")


def parse_label(raw: dict[str, Any], spec: Spec) -> Any:
    if spec.task == "multilabel" and len(spec.labels) > 1:
        for col in spec.labels:
            if _blank(raw.get(col)):
                raise Drop(MISSING, col)
        return tuple(_flag(raw[col], col) for col in spec.labels)
    col = spec.labels[0]
    v = raw.get(col)
    if v is None or (not isinstance(v, str) and _blank(v)) or (spec.task != "multilabel" and _blank(v)):
        raise Drop(MISSING, col)
    if spec.task == "regression":
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise Drop(BAD_TYPE, col, f"{preview(v, 20)} ({type(v).__name__}) is not a number")
        try:
            x = float(v)
        except (ValueError, OverflowError):
            raise Drop(BAD_LABEL, col, f"{preview(v, 20)} is not a number") from None
        if x != x or x in (float("inf"), float("-inf")):
            raise Drop(BAD_LABEL, col, f"{preview(v, 20)} is not finite")
        lo, hi = spec.target_range
        if not lo <= round(x) <= hi:
            raise Drop(BAD_LABEL, col, f"{x:g} outside target_range [{lo:g}, {hi:g}] "
                                       "(rating levels index the loss weights)")
        return x
    if spec.task == "multilabel":
        items = v if isinstance(v, (list, tuple)) else str(label_key(v, col)).split(spec.label_sep)
        keys = frozenset(k for k in (label_key(i, col) for i in items) if k)
        if spec.classes is not None and not keys <= set(spec.classes):
            raise Drop(BAD_LABEL, col, f"{sorted(keys - set(spec.classes))} not in {list(spec.classes)}")
        return keys
    key = label_key(v, col)
    if spec.classes is not None and key not in spec.classes:
        raise Drop(BAD_LABEL, col, f"{key!r} not in {list(spec.classes)}")
    return key


def parse_row(raw: dict[str, Any], spec: Spec) -> Row:
    """One record (column -> value) -> :class:`Row`, or :class:`Drop` naming the column."""
    rid = None
    if spec.id_col is not None:
        if _blank(raw.get(spec.id_col)):
            raise Drop(MISSING, spec.id_col)
        rid = label_key(raw[spec.id_col], spec.id_col)
    t = parse_time(raw.get(spec.time_col), spec.time_format, spec.time_col)
    check_scope(t, spec.start, spec.stop, spec.time_col)
    label = parse_label(raw, spec)
    text = join_inputs(raw, spec.inputs, normalise=False)
    return Row(rid, t, period_label(t, spec.period), label, text)


# --- record streams: (file:line, {column: value}) -------------------------------------------------
def _not_utf8(record: dict[str, Any], columns: list[str]) -> str | None:
    """The first used column whose text came from bytes that are not UTF-8 (surrogate escapes)."""
    for c in columns:
        v = record.get(c)
        if isinstance(v, str) and not v.isascii():
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return c
    return None


def _csv_rows(path: Path, label: str, report: IngestReport, delimiter: str,
              columns: list[str]) -> Iterator[tuple[str, dict]]:
    opener = gzip.open if is_gzip(path) else open
    # utf-8-sig: a byte-order mark is not part of the first column's name; surrogateescape keeps
    # bytes that are not UTF-8 visible so that their row is dropped, not silently altered
    with opener(path, "rt", newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
        reader = csv.reader(fh, delimiter=delimiter)
        try:
            header = next(reader)
        except StopIteration:
            return
        except (csv.Error, *STREAM_ERRORS) as exc:
            count_unreadable(report, f"{label}:1", f"header: {error_text(exc)}")
            return
        while True:
            try:
                values = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                report.read += 1
                report.drop(UNPARSEABLE, f"{label}:{reader.line_num}", str(exc))
                continue
            except STREAM_ERRORS as exc:
                count_unreadable(report, f"{label}:{reader.line_num + 1}", error_text(exc))
                return
            if not values:
                continue
            report.read += 1
            loc = f"{label}:{reader.line_num}"
            if len(values) != len(header):
                report.drop(UNPARSEABLE, loc, f"{len(values)} fields, header has {len(header)}")
                continue
            record = dict(zip(header, values))
            bad = _not_utf8(record, columns)
            if bad is not None:
                report.drop(UNPARSEABLE, loc, f"column {bad!r}: bytes that are not UTF-8")
                continue
            yield loc, record


def _parquet_rows(path: Path, label: str, report: IngestReport, columns: list[str]) -> Iterator[tuple[str, dict]]:
    """Rows of a Parquet file; a row Arrow cannot turn into Python values (e.g. a timestamp beyond
    year 9999) is an unparseable line, and an unreadable file or rest of file is one drop."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    row = 0
    try:
        pf = pq.ParquetFile(path)
        present = set(pf.schema_arrow.names)
        for batch in pf.iter_batches(batch_size=8192, columns=[c for c in columns if c in present]):
            try:
                records: list[dict | None] = batch.to_pylist()
            except (pa.ArrowException, ValueError, OverflowError):
                records = [None] * batch.num_rows  # convert row by row to find the bad ones
            for i, rec in enumerate(records):
                row += 1
                report.read += 1
                if rec is None:
                    try:
                        rec = batch.slice(i, 1).to_pylist()[0]
                    except (pa.ArrowException, ValueError, OverflowError) as exc:
                        report.drop(UNPARSEABLE, f"{label}:{row}", error_text(exc))
                        continue
                yield f"{label}:{row}", rec
    except (pa.ArrowException, OSError, ValueError) as exc:
        count_unreadable(report, f"{label}:{row + 1}", error_text(exc))


def _files(root: Path, fmt: str | None) -> list[tuple[Path, str]]:
    def kind(p: Path) -> str | None:
        suffixes = [s for s in p.suffixes if s != ".gz"]
        return fmt or (FORMATS.get(suffixes[-1].lower()) if suffixes else None)

    if root.is_file():
        k = kind(root)
        if k is None:
            raise DataError(f"{root}: unknown table format; set option format to one of {sorted(set(FORMATS.values()))}")
        return [(root, k)]
    if not root.is_dir():
        raise DataError(f"{root}: no such file or folder")
    files = [(p, kind(p)) for p in sorted(root.iterdir()) if p.is_file() and kind(p)]
    if not files:
        raise DataError(f"{root}: no CSV, Parquet or JSON-lines files")
    return files  # type: ignore[return-value]


def _spec(opts: dict[str, Any]) -> Spec:
    for key in ("timestamp", "input", "label", "task"):
        if not opts[key]:
            raise DataError(f"table reader: option {key!r} is required (e.g. --option {key}=...)")
    if opts["task"] not in TASKS:
        raise DataError(f"table reader: option task {opts['task']!r} not in {TASKS}")
    if opts["time_format"] not in TIME_FORMATS:
        raise DataError(f"table reader: option time_format {opts['time_format']!r} not in {TIME_FORMATS}")
    labels = tuple(as_list(opts["label"]))
    if len(labels) > 1 and opts["task"] != "multilabel":
        raise DataError(f"table reader: several label columns {list(labels)} need task multilabel")
    classes = tuple(label_key(c) for c in as_list(opts["classes"])) if opts["classes"] is not None else None
    if opts["task"] == "binary" and classes is not None and len(classes) != 2:
        raise DataError(f"table reader: binary task needs exactly 2 classes, got {list(classes)}")
    start = parse_date(opts["start"], "start") if opts["start"] is not None else None
    stop = end_of_scope(opts["end"], "end") if opts["end"] is not None else None
    period_label(datetime(2000, 1, 1), opts["period"])
    return Spec(str(opts["timestamp"]), opts["time_format"], tuple(as_list(opts["input"])), labels,
                opts["task"], classes, opts["id"], opts["period"], start, stop, str(opts["label_sep"]),
                _target_range(opts["target_range"]))


def _target_range(value: Any) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in (value.split(",") if isinstance(value, str) else value))
    except (TypeError, ValueError):
        lo, hi = 1.0, 0.0
    if not (lo <= hi and math.isfinite(lo) and math.isfinite(hi)):
        raise DataError(f"table reader: option target_range must be [low, high] with low <= high, got {value!r}")
    return lo, hi


def _label_columns(spec: Spec, values: list[Any]) -> tuple[tuple[str, ...], dict[str, list], tuple[str, ...]]:
    """(label column names, their values, class names) from the parsed labels."""
    if spec.task == "regression":
        return ("label",), {"label": [float(v) for v in values]}, ()
    if spec.task == "multilabel" and len(spec.labels) > 1:
        cols = tuple(f"label_{c}" for c in spec.labels)
        return cols, {c: [v[i] for v in values] for i, c in enumerate(cols)}, spec.labels
    if spec.task == "multilabel":
        classes = spec.classes or sort_classes(set().union(*values) if values else set())
        cols = tuple(f"label_{c}" for c in classes)
        return cols, {col: [int(c in v) for v in values] for c, col in zip(classes, cols)}, classes
    classes = spec.classes or sort_classes(set(values))
    if spec.task == "binary" and len(classes) != 2:
        raise DataError(f"table reader: binary task needs exactly 2 classes; the data has {list(classes)} "
                        "(set option classes or task multiclass)")
    index = {c: i for i, c in enumerate(classes)}
    return ("label",), {"label": [index[v] for v in values]}, classes


def read_table(path: str | Path, name: str = "table", strict: bool = False, **options: Any) -> IngestResult:
    opts = take_options("table", options, DEFAULTS)
    spec = _spec(opts)
    root = Path(path)
    report = IngestReport(strict=strict)
    builder = TableBuilder(("_label",), report)
    columns = [spec.time_col, *spec.inputs, *spec.labels] + ([spec.id_col] if spec.id_col else [])
    for file, kind in _files(root, opts["format"]):
        label = rel_label(file, root)
        if kind == "csv":
            records: Iterator = _csv_rows(file, label, report, str(opts["delimiter"]), columns)
        elif kind == "parquet":
            records = _parquet_rows(file, label, report, columns)
        else:
            records = stream_jsonl(file, report, label, bool(opts["progress"]))
        for loc, r in parse_records(records, lambda raw: parse_row(raw, spec), report):
            builder.add(loc, r.id if r.id is not None else loc, r.time, r.period, {"_label": r.label}, r.text)
    if not len(builder):
        raise DataError(f"{root}: no record kept ({report.summary()})")
    table = builder.frame(label_dtype="object")
    cols, values, classes = _label_columns(spec, list(table.pop("_label")))
    for c in cols:
        table[c] = values[c]
        table[c] = table[c].astype("float64" if spec.task == "regression" else "int64")
    meta = DatasetMeta(name=name, task=spec.task, input_kind="text", label_columns=cols,
                       class_names=tuple(classes), period=spec.period)
    return IngestResult(table=table, meta=meta, report=report)
