"""Amazon Reviews 2023 reader: exact kept table and report counts on hand-written files."""

import gzip
import json
import random
from datetime import datetime, timezone

import pytest

from driftmatrix.data.sources.amazon import read_amazon
from driftmatrix.data.sources.sampling import proportional_quotas
from driftmatrix.data.table import DataError


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


def review(user, asin, when, rating=5, text="fine", title="t", **extra):
    r = {"rating": rating, "title": title, "text": text, "timestamp": when, "asin": asin,
         "parent_asin": asin, "user_id": user, "helpful_vote": 0, "verified_purchase": True, "images": []}
    r.update(extra)
    return json.dumps(r)


BOOKS = [
    review("u1", "a1", ms(2014, 3, 1), 5, "great book"),           # 1 kept
    '{"rating": 5, "title": "cut',                                   # 2 unparseable line
    json.dumps({"rating": 4, "text": "x", "timestamp": ms(2015, 1, 1), "asin": "a3"}),  # 3 missing user_id
    review("u4", "a4", "yesterday"),                                 # 4 bad timestamp
    review("u5", "a5", ms(2013, 12, 31, 23, 59, 59)),                # 5 out-of-scope date
    review("u6", "a6", ms(2016, 5, 5), 6),                           # 6 label outside the set
    review("u7", "a7", ms(2016, 5, 5), 3, "   "),                    # 7 empty input
    review("u1", "a1", ms(2014, 3, 1), 4, "again"),                  # 8 duplicate id
    review("u9", "a9", ms(2023, 12, 31, 23), 1.0, "awful"),          # 9 kept (2023-H2)
    "",                                                              # 10 blank: not a record
    "[1, 2]",                                                        # 11 unparseable (not an object)
    review("u12", "a12", ms(2024, 1, 1)),                            # 12 out-of-scope date
]
ALPHA = [review("v1", "b1", ms(2019, 7, 1), 2, "meh"), review("v2", "b2", ms(2019, 6, 30, 23, 59), 3, "ok")]


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "amazon"
    d.mkdir()
    (d / "Books.jsonl").write_text("\n".join(BOOKS) + "\n")
    with gzip.open(d / "Alpha.jsonl.gz", "wt") as fh:
        fh.write("\n".join(ALPHA) + "\n")
    (d / "Zeta.jsonl").write_text(review("z", "z", ms(2020, 1, 1)) + "\n")  # third: outside 2 categories
    return d


def test_keeps_exact_rows_and_counts_every_drop(folder):
    res = read_amazon(folder, categories=2, sample_size=0, progress=False)
    t = res.table
    assert list(t["id"]) == [f"Books/u1/a1/{ms(2014, 3, 1)}", f"Alpha/v2/b2/{ms(2019, 6, 30, 23, 59)}",
                             f"Alpha/v1/b1/{ms(2019, 7, 1)}", f"Books/u9/a9/{ms(2023, 12, 31, 23)}"]
    assert list(t["period"]) == ["2014-H1", "2019-H1", "2019-H2", "2023-H2"]
    assert list(t["label"]) == [5.0, 3.0, 2.0, 1.0] and str(t["label"].dtype) == "float64"
    assert list(t["text"]) == ["great book", "ok", "meh", "awful"]
    assert list(t["source"]) == ["amazon/Books.jsonl:1", "amazon/Alpha.jsonl.gz:2", "amazon/Alpha.jsonl.gz:1",
                                 "amazon/Books.jsonl:9"]
    assert str(t["timestamp"].dtype) == "datetime64[ns, UTC]"
    r = res.report
    assert (r.read, r.kept, r.total_dropped) == (13, 4, 9)
    assert dict(r.dropped) == {"unparseable line": 2, "missing field": 1, "bad timestamp": 1,
                               "out-of-scope date": 2, "label outside the set": 1, "empty input": 1,
                               "duplicate id": 1}
    assert r.examples["missing field"] == ["amazon/Books.jsonl:3: field 'user_id'"]
    assert r.examples["duplicate id"][0].startswith("amazon/Books.jsonl:8: field 'id'")
    assert res.meta.task == "regression" and res.meta.period == "half-year"
    res.validate()


def test_title_and_text_input_and_named_categories(folder):
    res = read_amazon(folder, categories=["Zeta", "Alpha"], sample_size=0, input_fields="title+text",
                      start="2019-06-30", end="2020-12-31", progress=False)
    assert list(res.table["text"]) == ["t\n\nok", "t\n\nmeh", "t\n\nfine"]
    assert res.report.read == 3


def test_strict_names_file_line_and_field(folder):
    with pytest.raises(DataError, match=r"^amazon/Alpha\.jsonl\.gz:1: field 'timestamp': 2019-07-01T00:00:00\+00:00 "
                                         r"outside \[2020-01-01, 2024-01-01\) \(dropped: out-of-scope date"):
        read_amazon(folder, categories=2, start="2020-01-01", strict=True, progress=False)  # sampling path
    with pytest.raises(DataError, match=r"Books\.jsonl:2: .*unparseable line"):
        read_amazon(folder, categories=["Books"], sample_size=0, strict=True, progress=False)
    (folder / "Books.jsonl").write_text(BOOKS[0] + "\n" + BOOKS[5] + "\n")
    with pytest.raises(DataError, match=r"Books\.jsonl:2: field 'rating': '6' not in 1-5"):
        read_amazon(folder, categories=["Books"], sample_size=0, strict=True, progress=False)


def test_unknown_option_and_missing_category_are_errors(folder):
    with pytest.raises(DataError, match="unknown option"):
        read_amazon(folder, sample=3)
    with pytest.raises(DataError, match="Nope"):
        read_amazon(folder, categories=["Nope"])


def _big(tmp_path, name, order_seed):
    rng = random.Random(0)
    lines = []
    for i in range(3000):
        year = 2014 + i % 10
        rating = rng.choice([1, 2, 3, 4, 4, 5, 5, 5, 5, 5])
        lines.append(review(f"u{i}", f"a{i % 97}", ms(year, 1 + (i * 7) % 12, 1 + i % 28), rating, f"r{i}"))
    random.Random(order_seed).shuffle(lines)
    d = tmp_path / name
    d.mkdir()
    half = len(lines) // 2
    (d / "Cat.jsonl").write_text("\n".join(lines[:half]) + "\n")
    with gzip.open(d / "Dog.jsonl.gz", "wt") as fh:
        fh.write("\n".join(lines[half:]) + "\n")
    return d


def test_sample_is_stratified_proportional_and_seeded(tmp_path):
    a = read_amazon(_big(tmp_path, "a", 1), sample_size=400, progress=False)
    ids = lambda res: sorted(i.split("/", 1)[1] for i in res.table["id"])  # noqa: E731  (category differs)
    assert len(a.table) == 400 and a.report.not_sampled == 2600
    full = read_amazon(_big(tmp_path, "c", 3), sample_size=0, progress=False).table
    counts = full.groupby(["period", "label"]).size()
    expected = proportional_quotas({(p, int(r)): n for (p, r), n in counts.items()}, 400)
    got = a.table.groupby(["period", "label"]).size()
    assert {(p, int(r)): n for (p, r), n in got.items()} == {k: v for k, v in expected.items() if v}
    assert list(read_amazon(_big(tmp_path, "b", 1), sample_size=400, progress=False).table["id"]) == list(a.table["id"])
    c = read_amazon(_big(tmp_path, "d", 1), sample_size=400, seed=7, progress=False)
    assert set(ids(c)) != set(ids(a))  # the seed matters


def test_sample_same_records_different_order(tmp_path):
    lines = [review(f"u{i}", "a", ms(2014 + i % 10, 2, 1), 1 + (i // 10) % 5, f"r{i}") for i in range(600)]
    for name, seed in (("x", 1), ("y", 2)):
        shuffled = lines[:]
        random.Random(seed).shuffle(shuffled)
        (tmp_path / name).mkdir()
        (tmp_path / name / "Cat.jsonl").write_text("\n".join(shuffled) + "\n")
    x = read_amazon(tmp_path / "x", sample_size=100, progress=False)
    y = read_amazon(tmp_path / "y", sample_size=100, progress=False)
    assert list(x.table["id"]) == list(y.table["id"]) and len(x.table) == 100
    e = read_amazon(tmp_path / "x", sample_size=100, allocation="equal", progress=False)
    assert e.table.groupby(["period", "label"]).size().tolist() == [2] * 50  # 10 years x 5 ratings
