"""Amazon Reviews 2023: a folder of per-category JSON-lines files ``<Category>.jsonl[.gz]``.

Defaults reproduce the paper's scope: 7 categories, 2014-2023, half-year periods, a stratified
sample of 300,000 reviews (half-year x rating, seed 42), rating as a regression label. The sample is
streamed with bounded memory, independent of file order (``sampling``)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Iterator, NamedTuple

from driftmatrix.data.jsonl import (BAD_LABEL, BAD_TIME, BAD_TYPE, DUPLICATE, EMPTY, MISSING, Drop, parse_records,
                                    stream_jsonl)
from driftmatrix.data.sources.common import (PeriodClock, TableBuilder, as_list, end_of_scope, join_inputs,
                                             parse_date, preview, take_options)
from driftmatrix.data.sources.sampling import StratifiedSampler
from driftmatrix.data.table import DataError, DatasetMeta, IngestReport, IngestResult

log = logging.getLogger(__name__)

SUFFIXES = (".jsonl.gz", ".jsonl", ".json.gz", ".json")
RATINGS = (1, 2, 3, 4, 5)
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
DEFAULTS: dict[str, Any] = {
    "categories": 7,            # an int = the first N present (alphabetical), or a list of names
    "start": "2014-01-01",
    "end": "2023-12-31",        # inclusive
    "period": "half-year",
    "sample_size": 300_000,     # 0 or null = keep every valid review
    "allocation": "proportional",  # proportional | equal (see sampling.py)
    "seed": 42,
    "input_fields": ["text"],   # e.g. [title, text]: joined with a blank line
    "progress": True,
}


class Review(NamedTuple):
    id: str
    ms: int          # epoch milliseconds
    period: str
    rating: int
    text: str


@dataclass(frozen=True)
class Scope:
    clock: PeriodClock
    input_fields: tuple[str, ...]


def category_of(path: Path) -> str:
    name = path.name
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def find_files(root: Path, categories: Any) -> list[tuple[str, Path]]:
    """``(category, file)`` in alphabetical category order, chosen by name list or first-N rule."""
    if root.is_file():
        found = {category_of(root): root}
    elif root.is_dir():
        found = {}
        for p in sorted(root.iterdir()):
            if p.is_file() and p.name.endswith(SUFFIXES) and not p.name.startswith("meta_"):
                found.setdefault(category_of(p), p)
    else:
        raise DataError(f"{root}: no such file or folder (expected <Category>.jsonl[.gz] files)")
    if not found:
        raise DataError(f"{root}: no <Category>.jsonl or .jsonl.gz files")
    names = sorted(found)
    if isinstance(categories, int):
        chosen = names[:categories]
    else:
        chosen = as_list(categories)
        missing = [c for c in chosen if c not in found]
        if missing:
            raise DataError(f"{root}: option categories names missing file(s) for {missing}; present: {names}")
        chosen = sorted(chosen)
    return [(c, found[c]) for c in chosen]


def parse_review(obj: dict[str, Any], category: str, scope: Scope) -> Review:
    """One JSON object -> :class:`Review`, or :class:`Drop` naming the field."""
    for name in ("user_id", "asin", "timestamp", "rating"):
        if obj.get(name) is None:
            raise Drop(MISSING, name)
    for name in ("user_id", "asin"):  # parts of the record id: a JSON string (or a plain integer)
        if type(obj[name]) is not str and (type(obj[name]) is not int or obj[name].bit_length() > 64):
            raise Drop(BAD_TYPE, name, f"{preview(obj[name])} is not a string")
    ts = obj["timestamp"]
    if type(ts) is not int:
        if isinstance(ts, bool) or not isinstance(ts, float) or ts != ts or abs(ts) > 1e15:
            raise Drop(BAD_TIME, "timestamp", f"{preview(ts)} is not epoch milliseconds")
        ts = int(ts)
    period = scope.clock.label(ts, "timestamp")
    rating = obj["rating"]
    if isinstance(rating, bool) or not isinstance(rating, (int, float)) or rating not in RATINGS:
        raise Drop(BAD_LABEL, "rating", f"{preview(rating, 20)} not in 1-5")
    text = obj.get("text")
    if scope.input_fields == ("text",) and type(text) is str:  # fast path for the default input
        text = text.strip()
        if not text:
            raise Drop(EMPTY, "text")
    else:
        text = join_inputs(obj, scope.input_fields, normalise=False)
    return Review(f"{category}/{obj['user_id']}/{obj['asin']}/{ts}", ts, period, int(rating), text)


def _reviews(files: list[tuple[str, Path]], root: Path, scope: Scope, report: IngestReport,
             progress: bool) -> Iterator[tuple[str, Review]]:
    for category, path in files:
        label = path.name if root.is_file() else f"{root.name}/{path.name}"
        objects = stream_jsonl(path, report, label, progress)
        yield from parse_records(objects, lambda o, c=category: parse_review(o, c, scope), report)


def _sample(files, root, scope, report, progress, sampler: StratifiedSampler) -> StratifiedSampler:
    for loc, r in _reviews(files, root, scope, report, progress):
        if not sampler.offer((r.period, r.rating), r.id, (loc, r), tag=loc):
            report.drop(DUPLICATE, loc, f"field 'id': {r.id!r} seen before")
    for rid, loc in sampler.flush():  # duplicates of records already pruned from the pool
        report.drop(DUPLICATE, loc, f"field 'id': {rid!r} seen before")
    return sampler


def read_amazon(path: str | Path, name: str = "amazon-reviews-2023", strict: bool = False,
                **options: Any) -> IngestResult:
    """Stream the category files into the normalised (sampled) regression table."""
    opts = take_options("amazon", options, DEFAULTS)
    root = Path(path)
    files = find_files(root, opts["categories"])
    scope = Scope(PeriodClock(parse_date(opts["start"], "start"), end_of_scope(opts["end"], "end"),
                              opts["period"]), tuple(as_list(opts["input_fields"])))
    size = int(opts["sample_size"] or 0)
    seed = int(opts["seed"])
    progress = bool(opts["progress"])
    report = IngestReport(strict=strict)
    report.notes.append(f"categories: {', '.join(c for c, _ in files)}")

    if size <= 0:  # no sampling: keep every valid review
        builder = TableBuilder(("label",), report)
        for loc, r in _reviews(files, root, scope, report, progress):
            builder.add(loc, r.id, _utc(r.ms), r.period, {"label": float(r.rating)}, r.text)
        return _result(builder, name, scope, report, files)

    try:
        sampler = StratifiedSampler(size, seed, opts["allocation"])
    except ValueError as exc:
        raise DataError(f"amazon reader: option {exc}") from None
    sampler = _sample(files, root, scope, report, progress, sampler)
    if not sampler.complete():  # rare: a stratum's quota was not all in the candidate pool
        log.info("amazon: second pass with exact per-stratum quotas")
        report.notes.append("sample needed a second pass (a stratum's quota exceeded its candidates)")
        quotas = sampler.quotas()
        sampler = _sample(files, root, scope, IngestReport(strict=strict), progress,
                          StratifiedSampler(size, seed, opts["allocation"], quotas=quotas))
    picked = sampler.result()
    report.not_sampled = sampler.offered - len(picked)
    report.notes.append(f"sample: {len(picked)} of {sampler.offered} valid reviews, "
                        f"{opts['allocation']} allocation over {len(sampler.counts)} (period x rating) "
                        f"strata, seed {seed}")
    del sampler  # free the candidates that were not picked before the table is built
    builder = TableBuilder(("label",), report)
    for _, (loc, r) in sorted(picked, key=lambda sp: (sp[1][1].ms, sp[1][1].id)):
        builder.add(loc, r.id, _utc(r.ms), r.period, {"label": float(r.rating)}, r.text)
    return _result(builder, name, scope, report, files)


def _utc(t_ms: int) -> datetime:
    return _EPOCH + timedelta(milliseconds=t_ms)


def _result(builder: TableBuilder, name: str, scope: Scope, report: IngestReport,
            files: list[tuple[str, Path]]) -> IngestResult:
    if not len(builder):
        read = ", ".join(str(p) for _, p in files)
        raise DataError(f"amazon reader: no review kept from {read} ({report.summary()})")
    table = builder.frame(label_dtype="float64").sort_values(["timestamp", "id"], kind="stable")
    table = table.reset_index(drop=True)
    meta = DatasetMeta(name=name, task="regression", input_kind="text", label_columns=("label",),
                       class_names=tuple(str(r) for r in RATINGS), period=scope.clock.period)
    return IngestResult(table=table, meta=meta, report=report)
