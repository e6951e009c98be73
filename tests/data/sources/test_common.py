"""Pure helpers shared by the readers."""

from datetime import datetime, timezone

import pytest

from driftmatrix.data.jsonl import Drop
from driftmatrix.data.sources.common import PeriodClock, end_of_scope, parse_date, parse_time, period_label


def utc(*a):
    return datetime(*a, tzinfo=timezone.utc)


@pytest.mark.parametrize("value, fmt, expected", [
    (1420070400, "auto", utc(2015, 1, 1)),
    (1420070400000, "auto", utc(2015, 1, 1)),
    ("1420070400", "s", utc(2015, 1, 1)),
    (1987, "auto", utc(1987, 1, 1)),
    ("2015-03-01T12:00:00+02:00", "auto", utc(2015, 3, 1, 10)),
    ("2015-03-01", "iso", utc(2015, 3, 1)),
])
def test_parse_time(value, fmt, expected):
    assert parse_time(value, fmt) == expected


@pytest.mark.parametrize("value, fmt, reason", [
    ("tomorrow", "auto", "bad timestamp"), (None, "auto", "missing field"), ("", "auto", "missing field"),
    ("2015-01-01", "ms", "bad timestamp"), (float("nan"), "auto", "bad timestamp"), (True, "auto", "bad timestamp"),
])
def test_parse_time_drops(value, fmt, reason):
    with pytest.raises(Drop) as info:
        parse_time(value, fmt, "when")
    assert info.value.reason == reason and info.value.field == "when"


def test_scope_bounds_and_periods():
    assert end_of_scope("2023-12-31", "end") == utc(2024, 1, 1)
    assert end_of_scope(2025, "end") == utc(2026, 1, 1)
    assert parse_date("2014", "start") == utc(2014, 1, 1)
    assert [period_label(utc(2014, m, 1), "half-year") for m in (6, 7)] == ["2014-H1", "2014-H2"]
    assert period_label(utc(2014, 11, 1), "quarter") == "2014-Q4"
    clock = PeriodClock(utc(2014, 1, 1), utc(2024, 1, 1), "half-year")
    ms = lambda *a: int(utc(*a).timestamp() * 1000)  # noqa: E731
    assert clock.label(ms(2014, 6, 30, 23, 59), "t") == "2014-H1"
    assert clock.label(ms(2023, 7, 1), "t") == "2023-H2" and len(clock.labels) == 20
    with pytest.raises(Drop, match="out-of-scope date"):
        clock.label(ms(2024, 1, 1), "t")
