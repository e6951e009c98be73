"""`source: table` with `features:`: declared and inferred schemas, missing values, bad input."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from driftmatrix.data.sources.tabular import read_table
from driftmatrix.data.table import DataError, feature_column

CSV = """\
id,year,age,city,score,y
a,2001,31,paris,0.5,yes
b,2001,,rome,1.5,no
c,2002,44,,2.5,yes
d,2002,n/a,paris,3.5,no
e,2003,52,oslo,inf,yes
f,2003,29,7,1.0,no
"""


def _csv(tmp_path, text=CSV, name="t.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_declared_features_keep_missing_values_and_drop_wrong_types(tmp_path):
    res = read_table(_csv(tmp_path), timestamp="year", label="y", id="id", task="binary", progress=False,
                     features={"numeric": ["age", "score"], "categorical": ["city"]})
    t = res.table
    assert list(t["id"]) == ["a", "b", "c", "f"]
    assert math.isnan(t[feature_column("age")].iloc[1]) and t[feature_column("age")].iloc[0] == 31.0
    assert pd.isna(t[feature_column("city")].iloc[2]) and t[feature_column("city")].iloc[3] == "7"
    assert dict(res.report.dropped) == {"wrong type": 2}
    assert res.report.examples["wrong type"] == ["t.csv:5: field 'age': 'n/a' is not a number",
                                                 "t.csv:6: field 'score': 'inf' is not a finite number"]
    assert res.meta.input_kind == "table" and res.meta.numeric == ("age", "score")
    assert res.meta.categorical == ("city",) and "text" not in t
    assert "features (declared): numeric [age, score]; categorical [city]" in res.report.summary()


def test_auto_infers_and_prints_the_schema(tmp_path):
    rows = ["id,year,n,cat,flag,uid,y"] + [f"r{i},{2000 + i % 3},{i * 0.5},{'abc'[i % 3]},{i % 2 == 0},u{i},{i % 2}"
                                          for i in range(120)]
    res = read_table(_csv(tmp_path, "\n".join(rows) + "\n"), timestamp="year", label="y", id="id", task="binary",
                     features="auto", progress=False)
    assert res.meta.numeric == ("n",) and res.meta.categorical == ("cat", "flag")
    note = res.report.notes[0]
    assert note.startswith("features (auto): numeric [n]; categorical [cat, flag]; left out uid (every value")


def test_auto_on_parquet_keeps_a_rare_bad_value_as_a_counted_drop(tmp_path):
    n = 400
    frame = pd.DataFrame({"year": [2000 + i % 4 for i in range(n)], "y": [i % 3 for i in range(n)],
                          "x": [str(i) if i != 7 else "oops" for i in range(n)],
                          "c": [None if i % 10 == 0 else "uv"[i % 2] for i in range(n)]})
    path = tmp_path / "t.parquet"
    frame.to_parquet(path)
    res = read_table(path, timestamp="year", label="y", task="multiclass", features="auto", progress=False)
    assert res.meta.numeric == ("x",) and res.meta.categorical == ("c",)
    assert dict(res.report.dropped) == {"wrong type": 1} and len(res.table) == n - 1
    assert res.table[feature_column("c")].isna().sum() == 40
    assert res.meta.class_names == ("0", "1", "2")


def test_regression_with_features(tmp_path):
    res = read_table(_csv(tmp_path, "year,r,x\n2001,3,1.5\n2002,4,\n"), timestamp="year", label="r",
                     task="regression", features={"numeric": ["x"]}, progress=False)
    assert list(res.table["label"]) == [3.0, 4.0] and res.meta.task == "regression"


@pytest.mark.parametrize("fmt", ["csv", "parquet", "jsonl"])
def test_a_declared_column_absent_from_the_file_is_a_one_line_error(tmp_path, fmt):
    frame = pd.DataFrame({"year": [2001, 2002], "y": [0, 1], "age": [1.0, 2.0]})
    path = tmp_path / f"t.{fmt}"
    if fmt == "csv":
        frame.to_csv(path, index=False)
    elif fmt == "parquet":
        frame.to_parquet(path)
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in frame.to_dict("records")))
    with pytest.raises(DataError) as err:
        read_table(path, timestamp="year", label="y", task="binary", progress=False,
                   features={"numeric": ["age", "height"]})
    message = str(err.value)
    assert "\n" not in message and "'height'" in message and "t." in message


def test_wrong_types_in_jsonl_are_dropped_per_column(tmp_path):
    lines = [{"year": 2001, "y": 0, "n": 1, "c": "a"}, {"year": 2001, "y": 1, "n": [1], "c": "a"},
             {"year": 2002, "y": 1, "n": 2, "c": {"x": 1}}, {"year": 2002, "y": 1, "n": True, "c": None}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    res = read_table(path, timestamp="year", label="y", task="binary", progress=False,
                     features={"numeric": ["n"], "categorical": ["c"]})
    assert dict(res.report.dropped) == {"wrong type": 2} and len(res.table) == 2
    assert sorted(e.split(": ")[1] for e in res.report.examples["wrong type"]) == ["field 'c'", "field 'n'"]


@pytest.mark.parametrize("features, match", [
    ({"numeric": ["age"], "categorical": ["age"]}, "both numeric and categorical"),
    ({"numeric": ["y"]}, "cannot be a feature"),
    ({"colour": ["age"]}, "must be auto or"),
    ("everything", "must be auto or"),
])
def test_bad_feature_options_are_one_line_errors(tmp_path, features, match):
    with pytest.raises(DataError, match=match):
        read_table(_csv(tmp_path), timestamp="year", label="y", task="binary", features=features, progress=False)


def test_input_is_optional_only_with_features(tmp_path):
    with pytest.raises(DataError, match="option 'input' is required"):
        read_table(_csv(tmp_path), timestamp="year", label="y", task="binary", progress=False)


def test_categories_are_canonical_however_the_file_typed_them(tmp_path):
    """The text a CSV holds and the values pandas or JSON give are one category each (what serving
    reads raw rows with): whole numbers as numbers, booleans as 0 / 1, spaces stripped."""
    text = "year,y,c\n2001,0,02134\n2001,1,2134.0\n2002,0, True\n2002,1,false\n2003,0,3.10\n2003,1,3.1\n"
    res = read_table(_csv(tmp_path, text), timestamp="year", label="y", task="binary", progress=False,
                     features={"categorical": ["c"]})
    assert res.table[feature_column("c")].tolist() == ["2134", "2134", "1", "0", "3.10", "3.1"]
    from driftmatrix.data.sources.tabular import parse_category

    assert [parse_category(v, "c") for v in (2134.0, 2134, True, False, " x ", float("nan"))] == \
        ["2134", "2134", "1", "0", "x", None]


def test_read_inputs_reads_a_new_period_without_labels_as_ingestion_reads_it(tmp_path):
    from driftmatrix.data.sources.tabular import read_inputs

    path = _csv(tmp_path, "id,year,age,city\na,2007,31, paris\nb,2007,abc,rome\nc,2007,,02\n")
    frame, report = read_inputs(path, ["age"], ["city"], timestamp="year", label="y", id="id", progress=False)
    assert frame["age"].tolist()[0] == 31.0 and math.isnan(frame["age"].tolist()[1])
    assert frame["city"].tolist() == ["paris", "2"] and dict(report.dropped) == {"wrong type": 1}
    texts, _ = read_inputs(_csv(tmp_path, "year,body\n2007,  a review \n", "t2.csv"), input="body")
    assert texts["text"].tolist() == ["a review"]
    with pytest.raises(DataError, match="'city'"):
        read_inputs(_csv(tmp_path, "year,age\n2007,1\n", "t3.csv"), ["age"], ["city"])
