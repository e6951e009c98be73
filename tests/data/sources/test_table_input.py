"""The table reader's input rules: how a time column reads (decided per column), missing-value
markers, and the ingest report counted per slicing period."""

from __future__ import annotations

import json
from datetime import datetime, timezone

import numpy as np
import pandas as pd
import pytest

from driftmatrix.data.sources.tabular import read_table
from driftmatrix.data.table import DataError, feature_column


def _write(path, rows):
    if path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif path.suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    else:
        pd.DataFrame(rows).to_csv(path, index=False)
    return path


def _read(path, **options):
    return read_table(path, **{"task": "binary", "timestamp": "when", "label": "y", "features": "auto",
                               "progress": False, **options})


@pytest.mark.parametrize("suffix, value", [(".csv", 20150601), (".parquet", 20150601), (".jsonl", "20150601"),
                                           (".jsonl", 20150601)])
def test_yyyymmdd_integers_and_date_strings_are_dates(tmp_path, suffix, value):
    rows = [{"when": value if i == 0 else int(value) + i, "x": i, "y": i % 2} for i in range(20)]
    res = _read(_write(tmp_path / f"t{suffix}", rows))
    assert res.table["timestamp"].iloc[0] == pd.Timestamp("2015-06-01", tz="UTC")
    assert set(res.table["period"]) == {"2015"} and len(res.table) == 20
    assert "time_format auto: numbers in 'when' read as a yyyymmdd date" in res.report.notes


def test_date_strings_of_another_year_and_the_explicit_format(tmp_path):
    rows = [{"when": f"199605{d:02d}", "x": d, "y": d % 2} for d in range(1, 21)]
    path = _write(tmp_path / "t.csv", rows)
    assert set(_read(path).table["timestamp"].dt.year) == {1996}
    for fmt in ("yyyymmdd", "date"):
        res = _read(path, time_format=fmt)
        assert res.table["timestamp"].iloc[0] == pd.Timestamp(datetime(1996, 5, 1, tzinfo=timezone.utc))
    bad = _write(tmp_path / "b.csv", [{"when": "2015-06-01", "x": 1, "y": 0}, {"when": 20151340, "x": 1, "y": 1},
                                      {"when": 20150601, "x": 2, "y": 1}, {"when": 20150602, "x": 3, "y": 0}])
    res = _read(bad, time_format="yyyymmdd")
    assert dict(res.report.dropped) == {"bad timestamp": 2} and len(res.table) == 2


@pytest.mark.parametrize("values, first, second", [
    ([1420070400, 1420070401, 2016], "1420070400", "2016"),    # a year beside epochs (or epoch seconds 2016?)
    ([86400, 1800], "86400", "1800"),                          # 1000-9999 meant as epoch seconds
    ([20150601, 2015], "20150601", "2015"),                    # a year beside dates
])
def test_numbers_that_read_two_ways_are_a_one_line_error(tmp_path, values, first, second):
    rows = [{"when": v, "x": k, "y": k % 2} for k, v in enumerate(values)]
    with pytest.raises(DataError) as err:
        _read(_write(tmp_path / "t.csv", rows))
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"t.csv:{len(values) + 1}: column 'when': '{second}'")
    assert f"'{first}' (t.csv:2)" in message and "time_format" in message


def test_four_digit_numbers_that_cannot_be_years_are_a_one_line_error(tmp_path):
    rows = [{"when": v, "x": k, "y": k % 2} for k, v in enumerate([3600, 7200, 9000])]  # epoch seconds
    with pytest.raises(DataError) as err:
        _read(_write(tmp_path / "t.csv", rows))
    assert str(err.value) == ("t.csv:2: column 'when': '3600' reads as a year outside 1678-2261 or as epoch "
                              "seconds; set dataset.options.time_format to one of s, ms, year, yyyymmdd")
    res = _read(tmp_path / "t.csv", time_format="s")
    assert [str(t) for t in res.table["timestamp"]] == ["1970-01-01 01:00:00+00:00", "1970-01-01 02:00:00+00:00",
                                                        "1970-01-01 02:30:00+00:00"]


def test_iso_strings_beside_epochs_and_years_in_a_column_of_years(tmp_path):
    rows = [{"when": "2014-03-01", "x": 0, "y": 0}, {"when": 1420070400, "x": 1, "y": 1},
            {"when": 1420070400000, "x": 2, "y": 0}]
    assert [t.year for t in _read(_write(tmp_path / "e.csv", rows)).table["timestamp"]] == [2014, 2015, 2015]
    rows = [{"when": 2001, "x": 0, "y": 0}, {"when": "2002-06-01", "x": 1, "y": 1}, {"when": 2003, "x": 2, "y": 0}]
    assert [t.year for t in _read(_write(tmp_path / "y.csv", rows)).table["timestamp"]] == [2001, 2002, 2003]


MARKED = """\
when,age,city,y
2001,31,paris,0
2001,NA,rome,1
2002,?,None,0
2002,-,oslo,1
2003,null,N/A,0
2003,NaN,,1
2003,27,paris,0
"""


def test_missing_value_markers_are_missing_and_never_drop_a_row(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(MARKED)
    res = _read(path)
    assert res.meta.numeric == ("age",) and res.meta.categorical == ("city",)  # markers keep `age` numeric
    assert len(res.table) == 7 and res.report.total_dropped == 0
    age = res.table[feature_column("age")].to_numpy()
    assert np.isnan(age[1:6]).all() and list(age[[0, 6]]) == [31.0, 27.0]
    assert list(res.table[feature_column("city")].isna()) == [False, False, True, False, True, True, False]
    assert dict(res.report.missing) == {"age": 5, "city": 3}
    assert "missing values: age 5, city 3" in res.report.summary()
    custom = _read(path, na_values=["NA"], features={"numeric": ["age"], "categorical": ["city"]})
    assert len(custom.table) == 3 and dict(custom.report.dropped) == {"wrong type": 4}  # '?', '-', 'null', 'NaN'
    assert list(custom.table[feature_column("city")]) == ["paris", "rome", "paris"]


def test_markers_in_later_periods_keep_an_auto_column_numeric(tmp_path):
    rows = [{"when": 2000 + i // 60, "v": str(i) if i < 100 or i % 2 else "NA", "y": i % 2} for i in range(240)]
    res = _read(_write(tmp_path / "t.csv", rows))
    assert res.meta.numeric == ("v",) and res.report.missing["v"] == 70 and len(res.table) == 240


def test_the_ingest_report_counts_per_slicing_period(tmp_path, caplog):
    from driftmatrix.config import parse_params
    from driftmatrix.stages import ingest

    rows = [{"when": f"2015-{m:02d}-10", "x": m, "y": m % 2} for m in range(1, 13) for _ in range(m)]
    path = _write(tmp_path / "t.csv", rows)
    raw = {"dataset": {"name": "q", "source": "table", "path": str(path), "task": "binary",
                       "options": {"timestamp": "when", "label": "y", "features": "auto"}},
           "slicing": {"period": "quarter"}, "models": {"Prior": {}}}
    caplog.set_level("INFO")
    result = ingest.run(parse_params(raw), tmp_path / "out")
    assert dict(result.report.per_period) == {"2015-Q1": 6, "2015-Q2": 15, "2015-Q3": 24, "2015-Q4": 33}
    assert "kept per period (4 periods): 2015-Q1: 6, 2015-Q2: 15, 2015-Q3: 24, ... 2015-Q4: 33" in caplog.text
    saved = json.loads((tmp_path / "out" / "report.json").read_text())["per_period"]
    assert saved == {"2015-Q1": 6, "2015-Q2": 15, "2015-Q3": 24, "2015-Q4": 33}
