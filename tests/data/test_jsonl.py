"""Shared JSON-lines streaming: line numbers, gzip, drops, progress log lines."""

import gzip
import logging

import pytest

from driftmatrix.data import jsonl
from driftmatrix.data.jsonl import Drop, parse_records, stream_jsonl
from driftmatrix.data.table import DataError, IngestReport


def test_stream_counts_and_drops_with_locations(tmp_path):
    p = tmp_path / "x.jsonl.gz"
    with gzip.open(p, "wt") as fh:
        fh.write('{"a": 1}\n\n{"a": \n"str"\n{"a": 2}\n')
    report = IngestReport()
    rows = list(stream_jsonl(p, report, progress=False))
    assert rows == [("x.jsonl.gz:1", {"a": 1}), ("x.jsonl.gz:5", {"a": 2})]
    assert report.read == 4 and dict(report.dropped) == {"unparseable line": 2}
    assert report.examples["unparseable line"][1] == "x.jsonl.gz:4: expected a JSON object, got str"


def test_parse_records_turns_drop_into_report_or_error():
    def parse(v):
        if v < 0:
            raise Drop("label outside the set", "y", f"{v} < 0")
        return v * 2

    report = IngestReport()
    assert list(parse_records([("f:1", 1), ("f:2", -1)], parse, report)) == [("f:1", 2)]
    assert report.examples == {"label outside the set": ["f:2: field 'y': -1 < 0"]}
    with pytest.raises(DataError, match=r"^f:2: field 'y': -1 < 0 \(dropped: label outside the set"):
        list(parse_records([("f:2", -1)], parse, IngestReport(strict=True)))


def test_progress_log_lines_when_not_a_terminal(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(jsonl, "LOG_EVERY", 4)
    monkeypatch.setattr(jsonl, "_PROGRESS_CHUNK", 2)
    p = tmp_path / "y.jsonl"
    p.write_text("{}\n" * 10)
    with caplog.at_level(logging.INFO, logger="driftmatrix.data.jsonl"):
        assert len(list(stream_jsonl(p, IngestReport(), progress=True))) == 10
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["y.jsonl: 4 records", "y.jsonl: 8 records"]
