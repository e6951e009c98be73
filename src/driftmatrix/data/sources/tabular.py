"""Any timestamped table: CSV, Parquet or JSON lines (a file, or a folder of such files).

Options (``dataset.options`` or ``--option key=value``; docs/real-datasets.md and docs/tabular.md):
``timestamp`` and ``label`` (required), ``time_format``, ``input`` (text columns), ``features``
(``auto`` or ``{numeric, categorical}``), ``na_values``, ``task``, ``classes``, ``id``, ``period``,
``start`` / ``end``, ``format``, ``delimiter`` and ``target_range`` (regression targets are
rating-like levels that index the loss weights, so one outside the range is dropped). A missing
feature value never drops a row; a value of the wrong type does, naming the column. CSV is read as
UTF-8; the unreadable rest of a truncated gzip or Parquet file counts as one dropped record."""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from driftmatrix.data.jsonl import (BAD_LABEL, BAD_TYPE, MISSING, STREAM_ERRORS, UNPARSEABLE, Drop,
                                    count_unreadable, error_text, is_gzip, parse_records, rel_label,
                                    stream_jsonl)
from driftmatrix.data.sources.common import (FIRST_YEAR, LAST_YEAR, TableBuilder, as_list, check_scope,
                                             end_of_scope, join_inputs, parse_date, parse_time, period_label,
                                             preview, take_options, time_kind)
from driftmatrix.data.table import TASKS, DataError, DatasetMeta, IngestReport, IngestResult

FORMATS = {".csv": "csv", ".tsv": "csv", ".parquet": "parquet", ".pq": "parquet", ".jsonl": "jsonl",
           ".ndjson": "jsonl", ".json": "jsonl"}
TIME_FORMATS = ("auto", "s", "ms", "iso", "year", "yyyymmdd", "date")
NA_VALUES = ("", "NA", "N/A", "NaN", "null", "None", "?", "-")
DEFAULTS: dict[str, Any] = {
    "timestamp": None, "time_format": "auto", "input": None, "label": None, "task": None,
    "classes": None, "id": None, "period": "year", "start": None, "end": None, "format": None,
    "delimiter": ",", "label_sep": " ", "progress": True, "target_range": [0, 1000],
    "features": None, "max_categories": 1000, "na_values": list(NA_VALUES),
}
#: Records read from the first file to infer ``features: auto``; a column is numeric when at least
#: NUMERIC_SHARE of the values present there are numbers.
SAMPLE_ROWS = 5000
NUMERIC_SHARE = 0.99
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
    numeric: tuple[str, ...] = ()
    categorical: tuple[str, ...] = ()
    na: frozenset = frozenset(NA_VALUES)
    time_kind: str | None = None  # time_format auto: how the column's numbers read (time_kind_of)


@dataclass(frozen=True)
class Row:
    id: str | None
    time: datetime
    period: str
    label: Any  # float | class key | tuple of 0/1 | frozenset of category keys
    text: str | None
    features: tuple = ()  # numeric values (float, NaN = missing), then categories (str | None)


def _blank(v: Any, na: frozenset = frozenset()) -> bool:
    """A missing value: None, NaN, blank text or a missing-value marker (``na``)."""
    return v is None or (isinstance(v, str) and (not v.strip() or v.strip() in na)) or (isinstance(v, float) and v != v)


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
            if _blank(raw.get(col), spec.na):
                raise Drop(MISSING, col)
        return tuple(_flag(raw[col], col) for col in spec.labels)
    col = spec.labels[0]
    v = raw.get(col)
    if _blank(v, spec.na) and not (spec.task == "multilabel" and isinstance(v, str) and not v.strip()):
        raise Drop(MISSING, col)  # multilabel: blank text is the empty set
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
    rid, na = None, spec.na
    if spec.id_col is not None:
        if _blank(raw.get(spec.id_col), na):
            raise Drop(MISSING, spec.id_col)
        rid = label_key(raw[spec.id_col], spec.id_col)
    t = raw.get(spec.time_col)
    t = parse_time(None if _blank(t, na) else t, spec.time_format, spec.time_col, spec.time_kind)
    check_scope(t, spec.start, spec.stop, spec.time_col)
    label = parse_label(raw, spec)
    text = join_inputs(raw, spec.inputs, normalise=False) if spec.inputs else None
    return Row(rid, t, period_label(t, spec.period), label, text,
               parse_features(raw, spec.numeric, spec.categorical, na))


def parse_features(raw: Mapping[str, Any], numeric: Sequence[str], categorical: Sequence[str],
                   na: frozenset = frozenset(NA_VALUES)) -> tuple:
    """A record's feature values: numbers (:func:`parse_number`), then categories (:func:`parse_category`)."""
    return tuple(parse_number(raw.get(c), c, na) for c in numeric) + \
        tuple(parse_category(raw.get(c), c, na) for c in categorical)


def parse_number(v: Any, col: str, na: frozenset = frozenset(NA_VALUES)) -> float:
    """A numeric feature value: NaN when missing (or a marker in ``na``); Drop(wrong type) for text
    that is not a number, a non-finite number or a value of another kind (list, object, date)."""
    if _blank(v, na):
        return math.nan
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) or type(v).__name__ == "Decimal":
        try:
            x = float(v)
        except OverflowError:
            x = math.inf
    elif isinstance(v, str):
        try:
            x = float(v.strip())
        except ValueError:
            raise Drop(BAD_TYPE, col, f"{preview(v, 20)} is not a number") from None
    else:
        raise Drop(BAD_TYPE, col, f"{preview(v, 20)} ({type(v).__name__}) is not a number")
    if not math.isfinite(x):
        raise Drop(BAD_TYPE, col, f"{preview(v, 20)} is not a finite number")
    return x


def parse_category(v: Any, col: str, na: frozenset = frozenset(NA_VALUES)) -> str | None:
    """A categorical feature value as its canonical text, however a file or pandas typed it (1, 1.0,
    "1.0", "01" and True are one category, "1"); None when missing; Drop(wrong type) for a list,
    an object or bytes."""
    if _blank(v, na):
        return None
    if isinstance(v, str):
        text = v.strip()
        if text.lower() in ("true", "false"):
            return str(int(text.lower() == "true"))
        try:
            x = float(text)
        except ValueError:
            return text
        if "_" in text or not (math.isfinite(x) and x.is_integer()):
            return text
        return str(int(text)) if text.lstrip("+-").isdigit() else str(int(x))
    return label_key(v, col)


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    try:
        parse_number(v, "", frozenset())
    except Drop:
        return False
    return True


def infer_features(records: Iterator[tuple[str, dict]], skip: set[str], max_categories: int,
                   limit: int = SAMPLE_ROWS, na: frozenset = frozenset(NA_VALUES)
                   ) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]]:
    """``features: auto`` from up to ``limit`` records: (numeric, categorical, {ignored column:
    why}). Numeric when at least :data:`NUMERIC_SHARE` of the present values parse as numbers;
    left out when empty, nested, a date, or of unique or over ``max_categories`` values."""
    order: dict[str, None] = {}
    values: dict[str, list] = {}
    for n, (_, raw) in enumerate(records):
        if n >= limit:
            break
        for col, v in raw.items():
            if col in skip:
                continue
            order.setdefault(col, None)
            if not _blank(v, na):
                values.setdefault(col, []).append(v)
    numeric, categorical, ignored = [], [], {}
    for col in order:
        vals = values.get(col, [])
        if not vals:
            ignored[col] = "no value in the first records"
            continue
        if any(isinstance(v, (list, tuple, dict, bytes, bytearray)) or hasattr(v, "isoformat") for v in vals):
            ignored[col] = "nested values or dates"
            continue
        if sum(_is_number(v) for v in vals) >= NUMERIC_SHARE * len(vals):
            numeric.append(col)  # the rare value that is not a number drops its row as `wrong type`
            continue
        distinct = {str(v) for v in vals}
        if len(distinct) > max_categories:
            ignored[col] = f"{len(distinct)} distinct values > max_categories {max_categories}"
        elif len(distinct) == len(vals) and len(vals) > 50:
            ignored[col] = "every value distinct (an identifier or free text)"
        else:
            categorical.append(col)
    return tuple(numeric), tuple(categorical), ignored


def describe_schema(numeric: Sequence[str], categorical: Sequence[str], ignored: Mapping[str, str] | None = None,
                    how: str = "declared") -> str:
    """One line of the ingest report naming the features (``auto``: as inferred)."""
    text = (f"features ({how}): numeric [{', '.join(numeric)}]; categorical [{', '.join(categorical)}]")
    if ignored:
        text += "; left out " + ", ".join(f"{c} ({why})" for c, why in ignored.items())
    return text


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


def _declared_features(value: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``features`` option -> (numeric, categorical); None for ``auto`` or absent."""
    if value is None or value == "auto":
        return None
    if not isinstance(value, Mapping) or not set(value) <= {"numeric", "categorical"} or not value:
        raise DataError(f"table reader: option features must be auto or {{numeric: [...], categorical: [...]}}, "
                        f"got {value!r}")
    numeric, categorical = tuple(as_list(value.get("numeric"))), tuple(as_list(value.get("categorical")))
    both = sorted(set(numeric) & set(categorical))
    if both:
        raise DataError(f"table reader: features {both} are declared both numeric and categorical")
    if not numeric and not categorical:
        raise DataError("table reader: option features declares no column")
    return numeric, categorical


def _spec(opts: dict[str, Any]) -> Spec:
    required = ("timestamp", "label", "task") if opts["features"] is not None else ("timestamp", "input", "label", "task")
    for key in required:
        if not opts[key]:
            raise DataError(f"table reader: option {key!r} is required (e.g. --option {key}=...)")
    if opts["task"] not in TASKS:
        raise DataError(f"table reader: option task {opts['task']!r} not in {TASKS}")
    if opts["time_format"] not in TIME_FORMATS:
        raise DataError(f"table reader: option time_format {opts['time_format']!r} not in {TIME_FORMATS}")
    na = opts["na_values"]
    if not isinstance(na, (list, tuple)) or not all(isinstance(v, str) for v in na):
        raise DataError(f"table reader: option na_values must be a list of texts, got {na!r}")
    labels = tuple(as_list(opts["label"]))
    if len(labels) > 1 and opts["task"] != "multilabel":
        raise DataError(f"table reader: several label columns {list(labels)} need task multilabel")
    classes = tuple(label_key(c) for c in as_list(opts["classes"])) if opts["classes"] is not None else None
    if opts["task"] == "binary" and classes is not None and len(classes) != 2:
        raise DataError(f"table reader: binary task needs exactly 2 classes, got {list(classes)}")
    start = parse_date(opts["start"], "start") if opts["start"] is not None else None
    stop = end_of_scope(opts["end"], "end") if opts["end"] is not None else None
    period_label(datetime(2000, 1, 1), opts["period"])
    declared = _declared_features(opts["features"]) or ((), ())
    used = {str(opts["timestamp"]), *labels, *([opts["id"]] if opts["id"] else [])}
    clash = sorted(used & {*declared[0], *declared[1]})
    if clash:
        raise DataError(f"table reader: {clash} cannot be a feature (timestamp, label or id column)")
    return Spec(str(opts["timestamp"]), "yyyymmdd" if opts["time_format"] == "date" else opts["time_format"],
                tuple(as_list(opts["input"])), labels, opts["task"], classes, opts["id"], opts["period"], start,
                stop, str(opts["label_sep"]), _target_range(opts["target_range"]), *declared,
                frozenset(v.strip() for v in na))


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


def _file_columns(file: Path, kind: str, delimiter: str) -> list[str] | None:
    """Column names of a CSV header or a Parquet schema (None for JSON lines or an unreadable file)."""
    try:
        if kind == "csv":
            opener = gzip.open if is_gzip(file) else open
            with opener(file, "rt", newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
                return next(csv.reader(fh, delimiter=delimiter), [])
        if kind == "parquet":
            import pyarrow.parquet as pq

            return list(pq.ParquetFile(file).schema_arrow.names)
    except Exception:  # noqa: BLE001 - the record stream reports an unreadable file as a drop
        return None
    return None


def _records(file: Path, kind: str, label: str, report: IngestReport, opts: Mapping[str, Any],
             columns: list[str] | None) -> Iterator[tuple[str, dict]]:
    if kind == "csv":
        return _csv_rows(file, label, report, str(opts["delimiter"]), columns or [])
    if kind == "parquet":
        return _parquet_rows(file, label, report, columns) if columns is not None else \
            _parquet_rows(file, label, report, _file_columns(file, kind, "") or [])
    return stream_jsonl(file, report, label, bool(opts["progress"]))


def _sample(files: list[tuple[Path, str]], root: Path, opts: Mapping[str, Any]) -> list[tuple[str, dict]]:
    """The first file's first :data:`SAMPLE_ROWS` records: what ``auto`` options decide from."""
    from itertools import islice

    file, kind = files[0]
    records = _records(file, kind, rel_label(file, root), IngestReport(), {**opts, "progress": False}, None)
    return list(islice(records, SAMPLE_ROWS))


_READS = {"yyyymmdd": "a yyyymmdd date", "year": "a year", "epoch": "an epoch (s or ms)"}


def time_kind_of(sample: Sequence[tuple[str, dict]], col: str, na: frozenset = frozenset()) -> str | None:
    """How ``time_format: auto`` reads the numbers of column ``col``, decided once from ``sample``
    (``common.time_kind``); None when it holds no number. Numbers of two kinds are a DataError:
    one column is never read two ways."""
    first: dict[str, tuple[str, Any]] = {}
    for loc, raw in sample:
        v = raw.get(col)
        if _blank(v, na) or isinstance(v, bool) or not isinstance(v, (str, int, float)):
            continue
        try:
            num = float(v)
        except (ValueError, OverflowError):
            continue  # ISO text (or a bad value: dropped when read)
        if not math.isfinite(num):
            continue
        kind, ask = time_kind(num), "set dataset.options.time_format to one of s, ms, year, yyyymmdd"
        if kind == "year" and not FIRST_YEAR <= num <= LAST_YEAR:
            raise DataError(f"{loc}: column {col!r}: {v!r} reads as a year outside {FIRST_YEAR}-{LAST_YEAR} or as "
                            f"epoch seconds; {ask}")
        first.setdefault(kind, (loc, v))
        if len(first) > 1:
            (a, (loc_a, va)), (b, (loc_b, vb)) = first.items()
            raise DataError(f"{loc_b}: column {col!r}: {vb!r} reads as {_READS[b]} but {va!r} ({loc_a}) as "
                            f"{_READS[a]}; {ask}")
    return next(iter(first), None)


def _with_auto_features(spec: Spec, sample: list[tuple[str, dict]], file: Path, opts: Mapping[str, Any],
                        report: IngestReport) -> Spec:
    """``features: auto``: the schema inferred from the sampled records, noted in the report."""
    skip = {spec.time_col, *spec.labels, *spec.inputs, *([spec.id_col] if spec.id_col else [])}
    numeric, categorical, ignored = infer_features(iter(sample), skip, int(opts["max_categories"]), na=spec.na)
    if not numeric and not categorical:
        raise DataError(f"{file}: features auto found no numeric or categorical column besides "
                        f"{sorted(skip)}")
    report.notes.append(describe_schema(numeric, categorical, ignored, "auto"))
    return replace(spec, numeric=numeric, categorical=categorical)


def read_table(path: str | Path, name: str = "table", strict: bool = False, **options: Any) -> IngestResult:
    import numpy as np

    from driftmatrix.data.table import feature_column

    opts = take_options("table", options, DEFAULTS)
    spec = _spec(opts)
    root = Path(path)
    report = IngestReport(strict=strict)
    builder = TableBuilder(("_label",), report, text=bool(spec.inputs))
    files = _files(root, opts["format"])
    sample = _sample(files, root, opts) if "auto" in (opts["features"], spec.time_format) else []
    if opts["features"] == "auto":
        spec = _with_auto_features(spec, sample, files[0][0], opts, report)
    elif spec.numeric or spec.categorical:
        report.notes.append(describe_schema(spec.numeric, spec.categorical))
    if spec.time_format == "auto":
        spec = replace(spec, time_kind=time_kind_of(sample, spec.time_col, spec.na))
        if spec.time_kind:
            report.notes.append(f"time_format auto: numbers in {spec.time_col!r} read as {_READS[spec.time_kind]}")
    features = (*spec.numeric, *spec.categorical)
    columns = [spec.time_col, *spec.inputs, *spec.labels, *features] + ([spec.id_col] if spec.id_col else [])
    values: list[tuple] = []
    seen: set[str] = set()
    for file, kind in files:
        label = rel_label(file, root)
        header = _file_columns(file, kind, str(opts["delimiter"]))
        absent = [c for c in features if header is not None and c not in header]
        if absent:
            raise DataError(f"{file}: declared feature column {absent[0]!r} is not in the file")
        for loc, r in parse_records(_records(file, kind, label, report, opts, columns),
                                    lambda raw: _seen(parse_row(raw, spec), raw, features, seen), report):
            if builder.add(loc, r.id if r.id is not None else loc, r.time, r.period, {"_label": r.label}, r.text):
                values.append(r.features)
    if not len(builder):
        raise DataError(f"{root}: no record kept ({report.summary()})")
    unseen = [c for c in features if c not in seen]
    if unseen and all(kind == "jsonl" for _, kind in files):
        raise DataError(f"{root}: declared feature column {unseen[0]!r} is in no record")
    table = builder.frame(label_dtype="object")
    cols, labels, classes = _label_columns(spec, list(table.pop("_label")))
    for c in cols:
        table[c] = labels[c]
        table[c] = table[c].astype("float64" if spec.task == "regression" else "int64")
    for k, f in enumerate(features):
        column = [v[k] for v in values]
        table[feature_column(f)] = np.asarray(column, dtype=np.float64) if k < len(spec.numeric) else \
            pd_object(column)
        report.missing[f] = int(table[feature_column(f)].isna().sum())
    meta = DatasetMeta(name=name, task=spec.task, input_kind="table" if features else "text", label_columns=cols,
                       class_names=tuple(classes), period=spec.period, numeric=spec.numeric,
                       categorical=spec.categorical)
    return IngestResult(table=table, meta=meta, report=report)


def _seen(row: Row, raw: Mapping[str, Any], features: Sequence[str], seen: set[str]) -> Row:
    """``row``, noting which feature columns the record had (JSON lines have no header to check)."""
    if len(seen) < len(features):
        seen.update(c for c in features if c in raw)
    return row


def pd_object(values: list) -> Any:
    """A text column with None for missing values."""
    import pandas as pd

    return pd.Series(values, dtype=object).to_numpy()


def read_inputs(path: str | Path, numeric: Sequence[str] = (), categorical: Sequence[str] = (),
                **options: Any) -> tuple[Any, IngestReport]:
    """(frame, report): the inputs of a table whose labels have not arrived (``driftmatrix estimate
    --data``), read as :func:`read_table` reads them; a record ingestion would drop is dropped
    and counted."""
    import pandas as pd

    opts = take_options("table", options, DEFAULTS)
    features, inputs = [*numeric, *categorical], tuple(as_list(opts["input"]))
    if not features and not inputs:
        raise DataError("table reader: no input or feature column to read")
    root, report, kept = Path(path), IngestReport(), []
    na = frozenset(str(v) for v in opts["na_values"])
    parse = (lambda raw: parse_features(raw, numeric, categorical, na)) if features else \
        (lambda raw: (join_inputs(raw, inputs, normalise=False),))
    for file, kind in _files(root, opts["format"]):
        header = _file_columns(file, kind, str(opts["delimiter"]))
        absent = [c for c in features or inputs if header is not None and c not in header]
        if absent:
            raise DataError(f"{file}: column {absent[0]!r} of the dataset is not in the file")
        records = _records(file, kind, rel_label(file, root), report, opts, features or list(inputs))
        kept += [values for _, values in parse_records(records, parse, report)]
    report.kept = len(kept)
    return pd.DataFrame(kept, columns=features or ["text"]), report
