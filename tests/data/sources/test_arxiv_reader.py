"""arXiv snapshot reader: exact kept table and report counts on a hand-written snapshot."""

import json

import pytest

from driftmatrix.data.sources.arxiv import CATEGORIES, parse_created, read_arxiv
from driftmatrix.data.table import DataError


def paper(pid, cats, created="Mon, 2 Apr 2007 19:18:42 GMT", title="A title", abstract="An abstract.", **kw):
    d = {"id": pid, "submitter": "x", "title": title, "abstract": abstract, "categories": cats,
         "versions": [{"version": "v1", "created": created}], "update_date": "2020-01-01"}
    d.update(kw)
    return json.dumps(d)


LINES = [
    paper("0704.0001", "cs.LG cs.AI", "Mon, 2 Apr 2007 19:18:42 GMT", "Learning\n   things", " We  learn.\n"),  # 1
    paper("0704.0002", "math.PR"),                                   # 2 label outside the set
    paper("0704.0003", "cs.LG math.ST", "Tue, 3 Apr 2007 10:00:00 GMT"),  # 3 outside under all, kept under any
    json.dumps({"id": "0704.0004", "title": "t", "abstract": "a", "categories": "cs.LG"}),  # 4 missing versions
    paper("0704.0005", "hep-th", "someday"),                         # 5 bad timestamp
    paper("0704.0006", "gr-qc", "Fri, 31 Dec 1999 23:59:59 GMT"),   # 6 out-of-scope date
    paper("0704.0007", "quant-ph", title=" ", abstract="\n"),       # 7 empty input
    paper("0704.0001", "hep-ph"),                                    # 8 duplicate id
    '{"id": "0704.0009", "title": ',                                 # 9 unparseable line
    json.dumps({"id": "2501.00010", "title": "New", "abstract": "Fresh.", "categories": "hep-ph gr-qc",
                "versions": [{"version": "v2", "created": "Sat, 1 Feb 2025 00:00:00 GMT"},
                             {"version": "v1", "created": "Wed, 1 Jan 2025 08:00:00 GMT"}]}),  # 10 kept (v1 date)
]


@pytest.fixture
def snapshot(tmp_path):
    p = tmp_path / "arxiv-metadata-oai-snapshot.json"
    p.write_text("\n".join(LINES) + "\n")
    return p


def test_exact_table_and_report(snapshot):
    res = read_arxiv(snapshot, progress=False)
    t = res.table
    assert list(t["id"]) == ["0704.0001", "2501.00010"]
    assert list(t["period"]) == ["2007", "2025"]
    assert list(t["text"]) == ["Learning things\n\nWe learn.", "New\n\nFresh."]
    assert str(t["timestamp"].iloc[1]) == "2025-01-01 08:00:00+00:00"
    assert res.meta.label_columns == tuple(f"label_{c}" for c in CATEGORIES)
    assert t[list(res.meta.label_columns)].values.tolist() == [[1, 0, 0, 1, 0, 0, 0], [0, 1, 0, 0, 0, 0, 1]]
    assert list(t["source"]) == ["arxiv-metadata-oai-snapshot.json:1", "arxiv-metadata-oai-snapshot.json:10"]
    r = res.report
    assert (r.read, r.kept) == (10, 2)
    assert dict(r.dropped) == {"label outside the set": 2, "missing field": 1, "bad timestamp": 1,
                               "out-of-scope date": 1, "empty input": 1, "duplicate id": 1, "unparseable line": 1}
    assert r.examples["missing field"] == ["arxiv-metadata-oai-snapshot.json:4: field 'versions'"]
    assert res.meta.task == "multilabel"
    res.validate()


def test_any_rule_custom_categories_and_folder_path(snapshot):
    res = read_arxiv(snapshot.parent, categories=["math.ST", "cs.LG"], rule="any", start=2007, end=2007,
                     progress=False)
    assert list(res.table["id"]) == ["0704.0001", "0704.0003"]
    assert res.table[["label_math.ST", "label_cs.LG"]].values.tolist() == [[0, 1], [1, 1]]


def test_strict_raises_with_location_and_field(snapshot):
    with pytest.raises(DataError, match=r"snapshot\.json:2: field 'categories': 'math\.PR'"):
        read_arxiv(snapshot, strict=True, progress=False)


def test_parse_created():
    assert parse_created("Mon, 2 Apr 2007 19:18:42 GMT").isoformat() == "2007-04-02T19:18:42+00:00"
    with pytest.raises(Exception, match="bad timestamp"):
        parse_created("2 Foo 2007 19:18:42 GMT")
