"""Ingest stage: raw source (chosen in ``params.yaml: dataset``) -> normalised table on disk."""

from __future__ import annotations

import importlib
import logging
from collections import Counter
from pathlib import Path

from driftmatrix.config import Params
from driftmatrix.data.table import DataError, IngestResult, save_ingested
from driftmatrix.data.periods import month_label

log = logging.getLogger(__name__)

INGESTED_DIR = Path("outputs/ingested")

# source name -> "module:function"; each reader takes (path, name=..., strict=..., **options)
READERS = {
    "yearbook": "driftmatrix.data.sources.yearbook:read_yearbook",
    "amazon": "driftmatrix.data.sources.amazon:read_amazon",
    "arxiv": "driftmatrix.data.sources.arxiv:read_arxiv",
    "table": "driftmatrix.data.sources.tabular:read_table",
}


def reader_for(source: str):
    try:
        target = READERS[source]
    except KeyError:
        raise DataError(f"params.yaml: dataset.source {source!r} is not one of {sorted(READERS)}") from None
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def ingest(params: Params, strict: bool = False) -> IngestResult:
    """Read the configured dataset into the normalised table (pure apart from reading files)."""
    ds = params.dataset
    read = reader_for(ds.source)
    options = dict(ds.options)
    if ds.source == "table":  # the generic table reader takes its task from params
        options.setdefault("task", ds.task)
    result = read(ds.path, name=ds.name, strict=strict, **options)
    if result.meta.task != ds.task:
        raise DataError(f"params.yaml: dataset.task is {ds.task!r} but the {ds.source!r} reader "
                        f"produces a {result.meta.task!r} task; set dataset.task: {result.meta.task}")
    result.validate()
    result.report.per_period = per_period(result.table["timestamp"], params.slicing.period)
    return result


def per_period(timestamps, period: str) -> Counter:
    """Rows per slicing period (``slicing.period``), as the report and the log count them."""
    ts = timestamps.dt.tz_convert("UTC")
    months = (ts.dt.year * 12 + ts.dt.month - 1).value_counts()
    out: Counter = Counter()
    for m, n in months.items():
        out[month_label(int(m), period)] += int(n)
    return out


def run(params: Params, out: str | Path = INGESTED_DIR, strict: bool = False) -> IngestResult:
    result = ingest(params, strict=strict)
    save_ingested(result, out)
    log.info("ingest %s: %s", params.dataset.name, result.report.summary())
    return result
