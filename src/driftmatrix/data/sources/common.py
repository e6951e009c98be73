"""Pure helpers shared by the readers: options, timestamps, period labels, text, table assembly."""

from __future__ import annotations

import math
import numbers
from bisect import bisect_right
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Iterable, Mapping

from driftmatrix.data.jsonl import BAD_TIME, BAD_TYPE, DUPLICATE, EMPTY, MISSING, OUT_OF_SCOPE, Drop
from driftmatrix.data.table import DataError, IngestReport
from driftmatrix.data.periods import PERIOD_MONTHS, month_label

PERIODS = tuple(PERIOD_MONTHS)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# The normalised table stores pandas datetime64[ns]: whole years inside its range are kept
# (pd.Timestamp.min is 1677-09-21, max 2262-04-11); anything outside is a bad timestamp.
FIRST_YEAR, LAST_YEAR = 1678, 2261
TIME_MIN = datetime(FIRST_YEAR, 1, 1, tzinfo=timezone.utc)
TIME_STOP = datetime(LAST_YEAR + 1, 1, 1, tzinfo=timezone.utc)
_SPAN = f"[{TIME_MIN.date()}, {TIME_STOP.date()})"


def preview(value: Any, limit: int = 40) -> str:
    """``repr`` of the first ``limit`` characters of ``str(value)`` for a drop message; never
    fails (``str`` of an integer over 4,300 digits raises, so such a number is described)."""
    if isinstance(value, int) and value.bit_length() > 64:
        sign = "-" if value < 0 else ""
        return f"<{sign}integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    try:
        text = str(value)
    except Exception:  # noqa: BLE001 - an object whose str() fails is named by its type
        text = f"<{type(value).__name__}>"
    return repr(text[:limit])


def take_options(reader: str, options: Mapping[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """``defaults`` updated by ``options``; an unknown option name is a DataError naming the reader."""
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise DataError(f"{reader} reader: unknown option(s) {unknown}; known: {sorted(defaults)}")
    return {**defaults, **options}


def as_list(value: Any) -> list[str]:
    """An option that may be a single name, a comma/plus-separated string or a list."""
    if value is None:
        return []
    if isinstance(value, str):
        for sep in ("+", ","):
            if sep in value:
                return [v.strip() for v in value.split(sep) if v.strip()]
        return [value]
    return [str(v) for v in value]


def _is_year(value: Any) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()
                                      and len(value.strip()) == 4)


def parse_date(value: Any, what: str) -> datetime:
    """An option date (``2014-01-01``, a datetime, or a plain year) as an aware UTC datetime."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=timezone.utc)
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
    if _is_year(value):
        return datetime(int(value), 1, 1, tzinfo=timezone.utc)
    try:
        d = datetime.fromisoformat(str(value).strip())
    except ValueError:
        raise DataError(f"option {what}: {value!r} is not an ISO date like 2014-01-01 or a year") from None
    return d if d.tzinfo else d.replace(tzinfo=timezone.utc)


def end_of_scope(value: Any, what: str) -> datetime:
    """Exclusive upper bound for an inclusive ``end`` option: a year or a bare date covers all of it."""
    if _is_year(value):
        return datetime(int(value) + 1, 1, 1, tzinfo=timezone.utc)
    d = parse_date(value, what)
    bare_date = (isinstance(value, date) and not isinstance(value, datetime)) or (
        isinstance(value, str) and len(value.strip()) <= 10)
    return d + timedelta(days=1) if bare_date else d


def from_epoch(value: float, unit: str) -> datetime:
    seconds = value / 1000.0 if unit == "ms" else float(value)
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def time_kind(num: float) -> str:
    """How ``time_format: auto`` may read a number: ``yyyymmdd``, ``year`` or ``epoch`` (ms from 1e11)."""
    if num.is_integer() and 10_000_000 <= num <= 99_999_999:
        y, md = divmod(int(num), 10_000)
        try:
            if FIRST_YEAR <= y <= LAST_YEAR and date(y, md // 100, md % 100):
                return "yyyymmdd"
        except ValueError:
            pass
    return "year" if num.is_integer() and 1000 <= num <= 9999 else "epoch"


def parse_time(value: Any, fmt: str = "auto", field: str = "timestamp", kind: str | None = None) -> datetime:
    """Parse an epoch, a ``yyyymmdd`` integer, an ISO-8601 string or a ``year``; ``auto`` reads a
    number as its column's ``kind`` (None: its own). Raises Drop(bad timestamp)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Drop(MISSING, field)
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, Decimal, str, datetime, date)):
        raise Drop(BAD_TIME, field, f"{preview(value)} ({type(value).__name__}) is not a time")
    try:
        if isinstance(value, datetime):
            return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)
        if isinstance(value, date):
            return datetime(value.year, value.month, value.day, tzinfo=timezone.utc)
        num: float | None = None
        if not isinstance(value, str):
            num = float(value)  # OverflowError for an integer beyond the float range
        elif fmt != "iso":
            try:
                num = float(value.strip())
            except ValueError:
                num = None
        if num is not None and fmt != "iso":
            if math.isnan(num) or math.isinf(num):
                raise ValueError("not finite")
            kind = (kind or time_kind(num)) if fmt == "auto" else fmt
            if kind == "yyyymmdd":
                if not (num.is_integer() and 10_000_000 <= num <= 99_999_999):
                    raise ValueError("not a yyyymmdd date")
                y, md = divmod(int(num), 10_000)
                return datetime(y, md // 100, md % 100, tzinfo=timezone.utc)
            if kind == "year":
                if not (num.is_integer() and 1 <= num <= 9999):
                    raise ValueError("not a year")
                return datetime(int(num), 1, 1, tzinfo=timezone.utc)
            unit = kind if kind in ("s", "ms") else ("ms" if abs(num) >= 1e11 else "s")
            return from_epoch(num, unit)
        if fmt != "auto" and fmt != "iso":
            raise ValueError(f"expected a number ({fmt})")
        d = datetime.fromisoformat(value.strip())
        return d.astimezone(timezone.utc) if d.tzinfo else d.replace(tzinfo=timezone.utc)
    except (ValueError, OverflowError, OSError) as exc:
        raise Drop(BAD_TIME, field, f"{preview(value)}: {exc}") from None


def check_representable(t: datetime, field: str) -> None:
    """Raise Drop(bad timestamp) for an instant the normalised table cannot hold."""
    if not TIME_MIN <= t < TIME_STOP:
        raise Drop(BAD_TIME, field, f"{t.isoformat()} outside the representable range {_SPAN}")


def period_label(t: datetime, period: str) -> str:
    if period not in PERIODS:
        raise DataError(f"period {period!r} not in {PERIODS}")
    return month_label(t.year * 12 + t.month - 1, period)


def check_scope(t: datetime, start: datetime | None, stop: datetime | None, field: str) -> None:
    """Drop(out-of-scope date) unless ``start <= t < stop``; Drop(bad timestamp) if unrepresentable."""
    check_representable(t, field)
    if (start is not None and t < start) or (stop is not None and t >= stop):
        lo = start.date().isoformat() if start else "-inf"
        hi = stop.date().isoformat() if stop else "+inf"
        raise Drop(OUT_OF_SCOPE, field, f"{t.isoformat()} outside [{lo}, {hi})")


def clean_text(value: Any) -> str:
    """Whitespace-normalised text ('' for None)."""
    if value is None:
        return ""
    return " ".join(str(value).split())


def join_inputs(raw: Mapping[str, Any], fields: Iterable[str], sep: str = "\n\n",
                normalise: bool = True) -> str:
    """Join the named input fields; a missing field is Drop(missing field), all-empty is Drop(empty input)."""
    parts = []
    names = list(fields)
    for name in names:
        if name not in raw or raw[name] is None:
            raise Drop(MISSING, name)
        value = raw[name]
        if isinstance(value, (dict, list, tuple, bytes, bytearray)):
            raise Drop(BAD_TYPE, name, f"expected text, got {type(value).__name__}")
        text = clean_text(value) if normalise else str(value).strip()
        if text:
            parts.append(text)
    if not parts:
        raise Drop(EMPTY, "+".join(names))
    return sep.join(parts)


class TableBuilder:
    """Column-wise accumulation of kept rows; duplicate ids are dropped (first kept) and counted."""

    def __init__(self, label_columns: Iterable[str], report: IngestReport, text: bool = True) -> None:
        self.report = report
        self.cols: dict[str, list[Any]] = {c: [] for c in ("id", "timestamp", "period", "source")}
        if text:
            self.cols["text"] = []
        self.label_columns = tuple(label_columns)
        for c in self.label_columns:
            self.cols[c] = []
        self.seen: set[str] = set()

    def add(self, loc: str, rid: str, t: datetime, period: str, labels: Mapping[str, Any],
            text: str | None = None) -> bool:
        if rid in self.seen:
            self.report.drop(DUPLICATE, loc, f"field 'id': {rid!r} seen before")
            return False
        self.seen.add(rid)
        c = self.cols
        c["id"].append(rid)
        c["timestamp"].append(t)
        c["period"].append(period)
        c["source"].append(loc)
        if "text" in c:
            c["text"].append(text)
        for name in self.label_columns:
            c[name].append(labels[name])
        self.report.per_period[period] += 1
        return True

    def __len__(self) -> int:
        return len(self.cols["id"])

    def frame(self, label_dtype: str | Mapping[str, str] = "int64"):
        import pandas as pd

        table = pd.DataFrame(self.cols)
        table["timestamp"] = pd.to_datetime(table["timestamp"], utc=True).astype("datetime64[ns, UTC]")
        for name in self.label_columns:
            dtype = label_dtype[name] if isinstance(label_dtype, Mapping) else label_dtype
            table[name] = table[name].astype(dtype)
        self.report.kept = len(table)
        return table


_STEP_MONTHS = {"year": 12, "half-year": 6, "quarter": 3, "month": 1}


class PeriodClock:
    """Period labels of epoch-ms instants in ``[start, stop)`` by bisection: no datetime per record."""

    def __init__(self, start: datetime, stop: datetime, period: str) -> None:
        if period not in _STEP_MONTHS:
            raise DataError(f"period {period!r} not in {PERIODS}")
        step = _STEP_MONTHS[period]
        self.period = period
        self.scope = (_ms(start), _ms(stop))  # as asked: an instant outside it is out of scope
        start, stop = max(start, TIME_MIN), min(stop, TIME_STOP)
        t = datetime(start.year, (start.month - 1) // step * step + 1, 1, tzinfo=timezone.utc)
        self.start_ms, self.stop_ms = _ms(start), _ms(stop)
        self.bounds = f"[{_iso(self.start_ms)}, {_iso(self.stop_ms)})"
        self.starts: list[int] = []
        self.labels: list[str] = []
        while t < stop:
            self.starts.append(_ms(t))
            self.labels.append(period_label(t, period))
            month = t.month - 1 + step
            t = t.replace(year=t.year + month // 12, month=month % 12 + 1)

    def label(self, t_ms: int, field: str) -> str:
        """Label of ``t_ms``; Drop outside ``[start, stop)`` or for an instant no table can hold."""
        if not self.start_ms <= t_ms < self.stop_ms:
            if self.scope[0] <= t_ms < self.scope[1] or not _DATETIME_MS[0] <= t_ms < _DATETIME_MS[1]:
                raise Drop(BAD_TIME, field, f"{preview(t_ms)} ms is outside the representable range {_SPAN} "
                                            "(an epoch in micro- or nanoseconds?)")
            t = _EPOCH + timedelta(milliseconds=t_ms)
            raise Drop(OUT_OF_SCOPE, field, f"{t.isoformat()} outside {self.bounds}")
        return self.labels[bisect_right(self.starts, t_ms) - 1]


def _ms(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(milliseconds=1)


def _iso(t_ms: int) -> str:
    return (_EPOCH + timedelta(milliseconds=t_ms)).date().isoformat()


_DATETIME_MS = (_ms(datetime.min.replace(tzinfo=timezone.utc)), _ms(datetime.max.replace(tzinfo=timezone.utc)))
