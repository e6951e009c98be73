"""Generic timestamped-table reader: CSV, Parquet, JSON lines; every task kind."""

import json

import pandas as pd
import pytest

from driftmatrix.data.sources.tabular import read_table
from driftmatrix.data.table import DataError

CSV = """\
id,when,body,extra,y
r1,2015-03-01T12:00:00Z,hello,a,cat
r2,1420070400,world,b,dog
r3,1420070400000,third,c,bird
r4,2016-01-01,fourth,d,cat
r5,2015-01-01,"a,b",e
r6,,no time,f,cat
r7,not a date,x,g,cat
r8,1999-05-05,old,h,cat
r9,2015-06-01,,i,cat
r1,2015-06-01,dup,j,cat
r11,2015-07-01,fish,k,fish
r12,2015-08-01,nolabel,l,
"""


@pytest.fixture
def csv_file(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(CSV)
    return p


def test_csv_multiclass_with_given_classes(csv_file):
    res = read_table(csv_file, task="multiclass", timestamp="when", input="body", label="y", id="id",
                     classes=["bird", "cat", "dog"], start="2000-01-01", period="half-year", progress=False)
    t = res.table
    assert list(t["id"]) == ["r1", "r2", "r3", "r4"]
    assert [str(x) for x in t["timestamp"]] == ["2015-03-01 12:00:00+00:00", "2015-01-01 00:00:00+00:00",
                                                "2015-01-01 00:00:00+00:00", "2016-01-01 00:00:00+00:00"]
    assert list(t["label"]) == [1, 2, 0, 1] and list(t["period"]) == ["2015-H1"] * 3 + ["2016-H1"]
    assert list(t["source"]) == ["t.csv:2", "t.csv:3", "t.csv:4", "t.csv:5"]
    r = res.report
    assert (r.read, r.kept) == (12, 4)
    assert dict(r.dropped) == {"unparseable line": 1, "missing field": 2, "bad timestamp": 1,
                               "out-of-scope date": 1, "empty input": 1, "duplicate id": 1,
                               "label outside the set": 1}
    assert r.examples["unparseable line"] == ["t.csv:6: 4 fields, header has 5"]
    assert sorted(r.examples["missing field"]) == ["t.csv:13: field 'y'", "t.csv:7: field 'when'"]
    assert res.meta.class_names == ("bird", "cat", "dog")


def test_csv_classes_from_data_sorted_and_strict(csv_file):
    res = read_table(csv_file, task="multiclass", timestamp="when", input=["body", "extra"], label="y",
                     id="id", start=2000, progress=False)
    assert res.meta.class_names == ("bird", "cat", "dog", "fish")
    assert list(res.table["text"])[:2] == ["hello\n\na", "world\n\nb"]
    with pytest.raises(DataError, match=r"t\.csv:6: 4 fields"):
        read_table(csv_file, task="multiclass", timestamp="when", input="body", label="y", strict=True)
    with pytest.raises(DataError, match="binary task needs exactly 2 classes"):
        read_table(csv_file, task="binary", timestamp="when", input="body", label="y", id="id")


def test_parquet_regression(tmp_path):
    df = pd.DataFrame({"ts": [2001, 2002, 2003, 2004], "txt": ["a", "b", "c", "d"],
                       "score": [1.5, None, 3.0, float("nan")]})
    p = tmp_path / "r.parquet"
    df.to_parquet(p)
    res = read_table(p, task="regression", timestamp="ts", time_format="year", input="txt", label="score")
    assert list(res.table["label"]) == [1.5, 3.0] and list(res.table["id"]) == ["r.parquet:1", "r.parquet:3"]
    assert dict(res.report.dropped) == {"missing field": 2} and res.report.read == 4


def test_jsonl_multilabel_single_and_several_columns(tmp_path):
    p = tmp_path / "m.jsonl"
    rows = [{"t": 1262304000, "x": "one", "tags": "b a"}, {"t": 1293840000, "x": "two", "tags": ["c"]},
            {"t": 1293840000, "x": "three", "tags": ""}, {"t": 1293840000, "x": "four", "tags": "z"}]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    res = read_table(p, task="multilabel", timestamp="t", input="x", label="tags", progress=False)
    assert res.meta.label_columns == ("label_a", "label_b", "label_c", "label_z")
    assert res.table[list(res.meta.label_columns)].values.tolist() == [[1, 1, 0, 0], [0, 0, 1, 0],
                                                                       [0, 0, 0, 0], [0, 0, 0, 1]]
    res = read_table(p, task="multilabel", timestamp="t", input="x", label="tags", classes="a,b,c", progress=False)
    assert res.report.dropped == {"label outside the set": 1}
    q = tmp_path / "k.csv"
    q.write_text("t,x,p,q\n2010,a,1,0\n2011,b,true,yes\n2012,c,2,0\n")
    res = read_table(q, task="multilabel", timestamp="t", input="x", label=["p", "q"])
    assert res.table[["label_p", "label_q"]].values.tolist() == [[1, 0], [1, 1]]
    assert res.report.examples["label outside the set"] == ["k.csv:4: field 'p': '2' is not 0/1"]


def test_required_options_are_named(csv_file):
    with pytest.raises(DataError, match="option 'timestamp' is required"):
        read_table(csv_file, task="binary", input="body", label="y")
