"""arXiv metadata snapshot (Kaggle ``arxiv-metadata-oai-snapshot.json``, JSON lines).

Year of the first version; default scope 2000-2025 and the paper's 7 categories (rule ``all`` or
``any``); input title + abstract; one 0/1 ``label_<cat>`` column per category (multilabel)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from driftmatrix.data.jsonl import BAD_LABEL, BAD_TIME, EMPTY, MISSING, Drop, parse_records, stream_jsonl
from driftmatrix.data.sources.common import (TableBuilder, as_list, check_scope, clean_text, end_of_scope,
                                             parse_date, period_label, take_options)
from driftmatrix.data.table import DataError, DatasetMeta, IngestReport, IngestResult

CATEGORIES = ("cs.LG", "hep-ph", "cs.CV", "cs.AI", "hep-th", "quant-ph", "gr-qc")
RULES = ("all", "any")
MONTHS = {m: i for i, m in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), 1)}
DEFAULTS: dict[str, Any] = {
    "categories": list(CATEGORIES),
    "rule": "all",
    "start": 2000,
    "end": 2025,        # inclusive
    "period": "year",
    "progress": True,
}


@dataclass(frozen=True)
class Scope:
    categories: tuple[str, ...]
    rule: str
    start: datetime
    stop: datetime
    period: str


@dataclass(frozen=True)
class Paper:
    id: str
    time: datetime
    period: str
    labels: dict[str, int]
    text: str


def parse_created(value: Any) -> datetime:
    """RFC-2822-style ``"Mon, 2 Apr 2007 19:18:42 GMT"`` -> aware UTC datetime (pure, no locale)."""
    try:
        parts = str(value).replace(",", " ").split()
        if parts and parts[0].isalpha():
            parts = parts[1:]  # weekday
        day, mon, year, clock = parts[0], parts[1], parts[2], parts[3]
        hh, mm, ss = (int(x) for x in clock.split(":"))
        return datetime(int(year), MONTHS[mon[:3].lower()], int(day), hh, mm, ss, tzinfo=timezone.utc)
    except (IndexError, KeyError, ValueError) as exc:
        raise Drop(BAD_TIME, "versions[0].created", f"{str(value)[:40]!r}: {exc!r}") from None


def first_created(versions: Any) -> Any:
    if not isinstance(versions, list) or not versions or not all(isinstance(v, dict) for v in versions):
        raise Drop(MISSING, "versions", "expected a non-empty list of {version, created}")
    v1 = next((v for v in versions if v.get("version") == "v1"), versions[0])
    if v1.get("created") is None:
        raise Drop(MISSING, "versions[0].created")
    return v1["created"]


def parse_paper(obj: dict[str, Any], scope: Scope) -> Paper:
    for name in ("id", "title", "abstract", "categories", "versions"):
        if obj.get(name) is None:
            raise Drop(MISSING, name)
    cats = str(obj["categories"]).split()
    inside = [c for c in cats if c in scope.categories]
    if not cats or not inside or (scope.rule == "all" and len(inside) != len(cats)):
        outside = sorted(set(cats) - set(scope.categories))
        raise Drop(BAD_LABEL, "categories", f"{' '.join(cats)!r} ({scope.rule} rule; outside: {outside})")
    t = parse_created(first_created(obj["versions"]))
    check_scope(t, scope.start, scope.stop, "versions[0].created")
    title, abstract = clean_text(obj["title"]), clean_text(obj["abstract"])
    if not title and not abstract:
        raise Drop(EMPTY, "title+abstract")
    text = "\n\n".join(p for p in (title, abstract) if p)
    labels = {f"label_{c}": int(c in inside) for c in scope.categories}
    return Paper(str(obj["id"]), t, period_label(t, scope.period), labels, text)


def read_arxiv(path: str | Path, name: str = "arxiv", strict: bool = False, **options: Any) -> IngestResult:
    opts = take_options("arxiv", options, DEFAULTS)
    cats = tuple(as_list(opts["categories"]))
    if not cats or len(set(cats)) != len(cats):
        raise DataError(f"arxiv reader: option categories must be distinct names, got {list(cats)}")
    if opts["rule"] not in RULES:
        raise DataError(f"arxiv reader: option rule {opts['rule']!r} not in {RULES}")
    scope = Scope(cats, opts["rule"], parse_date(opts["start"], "start"), end_of_scope(opts["end"], "end"),
                  opts["period"])
    period_label(scope.start, scope.period)
    file = Path(path)
    if file.is_dir():
        found = sorted(file.glob("arxiv-metadata-oai-snapshot*.json*"))
        if not found:
            raise DataError(f"{file}: no arxiv-metadata-oai-snapshot.json in this folder")
        file = found[0]
    if not file.is_file():
        raise DataError(f"{file}: no such file (fetch it: driftmatrix data fetch arxiv)")
    report = IngestReport(strict=strict)
    label_cols = tuple(f"label_{c}" for c in cats)
    builder = TableBuilder(label_cols, report)
    objects = stream_jsonl(file, report, file.name, bool(opts["progress"]))
    for loc, p in parse_records(objects, lambda o: parse_paper(o, scope), report):
        builder.add(loc, p.id, p.time, p.period, p.labels, p.text)
    if not len(builder):
        raise DataError(f"{file}: no paper kept ({report.summary()})")
    table = builder.frame(label_dtype="int64")
    meta = DatasetMeta(name=name, task="multilabel", input_kind="text", label_columns=label_cols,
                       class_names=cats, period=scope.period)
    return IngestResult(table=table, meta=meta, report=report)
