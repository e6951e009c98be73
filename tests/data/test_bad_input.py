"""Issue 14, "Bad input is counted, never a crash": each case once failed with an exception."""

import io
import json
import struct
import zipfile
import zlib
from datetime import datetime, timezone

import numpy as np
import pytest
from PIL import Image

from driftmatrix.data.jsonl import Drop
from driftmatrix.data.sources.amazon import read_amazon
from driftmatrix.data.sources.common import PeriodClock, parse_time
from driftmatrix.data.sources.sampling import StratifiedSampler, priority
from driftmatrix.data.sources.tabular import read_table
from driftmatrix.data.sources.yearbook import read_yearbook
from driftmatrix.data.table import DataError


def ms(*args) -> int:
    return int(datetime(*args, tzinfo=timezone.utc).timestamp() * 1000)


def review(user, when, rating=5, text="fine"):
    return json.dumps({"rating": rating, "text": text, "timestamp": when, "asin": "a", "user_id": user})


def balanced(report):
    return report.read == report.kept + report.total_dropped + report.not_sampled


# --- Amazon: timestamps far outside the datetime range ------------------------------------------
def test_amazon_microsecond_and_negative_timestamps_are_bad_timestamps(tmp_path):
    (tmp_path / "Cat.jsonl").write_text("\n".join([
        review("ok", ms(2015, 5, 5)),
        review("micro", ms(2015, 5, 5) * 1000),      # microseconds: year ~47000
        review("neg", -1_600_000_000_000_000),       # before year 1
        review("old", ms(1500, 1, 1)),               # a real date, out of the paper's scope
    ]) + "\n")
    for size in (0, 10):  # no sampling and the sampling path
        res = read_amazon(tmp_path, sample_size=size, progress=False)
        r = res.report
        assert list(res.table["id"]) == [f"Cat/ok/a/{ms(2015, 5, 5)}"]
        assert dict(r.dropped) == {"bad timestamp": 2, "out-of-scope date": 1} and balanced(r)
        assert "Cat.jsonl:2: field 'timestamp'" in r.examples["bad timestamp"][0]


def test_period_clock_describes_huge_instants_without_overflow():
    clock = PeriodClock(datetime(2014, 1, 1, tzinfo=timezone.utc), datetime(2024, 1, 1, tzinfo=timezone.utc),
                        "half-year")
    for t in (10**18, -(10**18), 2**62):
        with pytest.raises(Drop) as info:
            clock.label(t, "timestamp")
        assert info.value.reason == "bad timestamp" and str(t) in info.value.detail


def test_period_clock_with_a_scope_wider_than_pandas_keeps_only_representable_times():
    clock = PeriodClock(datetime(1000, 1, 1, tzinfo=timezone.utc), datetime(3000, 1, 1, tzinfo=timezone.utc),
                        "year")
    with pytest.raises(Drop, match="bad timestamp"):
        clock.label(ms(1600, 1, 1), "timestamp")
    assert clock.label(ms(1700, 1, 1), "timestamp") == "1700"


# --- tables: huge numbers and years pandas cannot hold ------------------------------------------
@pytest.mark.parametrize("value", [10**400, -(10**400), 10**5000], ids=["1e400", "-1e400", "1e5000"])
def test_parse_time_huge_integer_is_a_drop(value):
    with pytest.raises(Drop) as info:
        parse_time(value, "auto", "when")
    assert info.value.reason == "bad timestamp" and info.value.field == "when"


def _table(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_table_years_outside_pandas_range_are_dropped_not_a_crash(tmp_path):
    p = _table(tmp_path, [{"when": "2015-01-01", "x": "a", "y": 1}, {"when": "1500-06-01", "x": "b", "y": 2},
                          {"when": "0001-01-01", "x": "c", "y": 3}, {"when": "2400-01-01", "x": "d", "y": 4}])
    res = read_table(p, task="regression", timestamp="when", input="x", label="y", progress=False)
    r = res.report
    assert len(res.table) == 1 and dict(r.dropped) == {"bad timestamp": 3} and balanced(r)
    assert r.examples["bad timestamp"][0].startswith("t.jsonl:2: field 'when'")


def test_table_huge_json_integers_are_drops(tmp_path, monkeypatch):
    # orjson refuses 10**400 itself; the standard json fallback (and Parquet readers) hand it over
    from driftmatrix.data import jsonl

    monkeypatch.setattr(jsonl, "_loads", json.loads)
    monkeypatch.setattr(jsonl, "_JSONError", (ValueError, RecursionError))
    p = tmp_path / "t.jsonl"
    p.write_text('{"when": 2015, "x": "a", "y": 1}\n'
                 '{"when": 1' + "0" * 400 + ', "x": "a", "y": 1}\n'
                 '{"when": 2015, "x": "a", "y": 1' + "0" * 400 + '}\n'
                 '{"when": 2015, "x": "a", "y": 1, "id": 1' + "0" * 5000 + '}\n')
    res = read_table(p, task="regression", timestamp="when", input="x", label="y", progress=False)
    r = res.report
    assert len(res.table) == 1 and balanced(r)
    assert r.dropped["bad timestamp"] == 1 and r.dropped["label outside the set"] == 1
    assert r.dropped["unparseable line"] == 1  # 5000 digits exceed Python's int parsing limit
    with pytest.raises(DataError, match="t.jsonl:2: field 'when': <integer of about 401 digits>"):
        read_table(p, task="regression", timestamp="when", input="x", label="y", progress=False, strict=True)


def test_table_regression_targets_outside_the_level_range_are_dropped(tmp_path):
    rows = [{"when": 2015, "x": "a", "y": y} for y in (1, 4, -3, 1e12, 2.5, 1000.4)]
    p = _table(tmp_path, rows)
    res = read_table(p, task="regression", timestamp="when", input="x", label="y", progress=False)
    r = res.report
    assert list(res.table["label"]) == [1.0, 4.0, 2.5, 1000.4] and balanced(r)
    assert dict(r.dropped) == {"label outside the set": 2}
    assert r.examples["label outside the set"][0] == (
        "t.jsonl:3: field 'y': -3 outside target_range [0, 1000] (rating levels index the loss weights)")
    wide = read_table(p, task="regression", timestamp="when", input="x", label="y", progress=False,
                      target_range=[-5, 10])
    assert list(wide.table["label"]) == [1.0, 4.0, -3.0, 2.5]
    with pytest.raises(DataError, match="target_range"):
        read_table(p, task="regression", timestamp="when", input="x", label="y", target_range=[3, 1])


# --- Yearbook: broken PNGs, bombs, bad CRCs, impossible years ---------------------------------
def png(value: int = 50, size=(8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (value, value, value)).save(buf, format="PNG")
    return buf.getvalue()


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_with_broken_second_idat() -> bytes:
    """A valid 16x16 PNG split into two IDAT chunks, the second one's type corrupted (PIL: SyntaxError)."""
    raw = b"".join(b"\0" + bytes([r * 8] * 48) for r in range(16))
    z = zlib.compress(raw)
    head = _chunk(b"IHDR", struct.pack(">IIBBBBB", 16, 16, 8, 2, 0, 0, 0))
    return (b"\x89PNG\r\n\x1a\n" + head + _chunk(b"IDAT", z[:20]) + _chunk(b"IxAT", z[20:])
            + _chunk(b"IEND", b""))


def png_bomb(side: int = 60000) -> bytes:
    """Header claims side x side RGB pixels; the data is a few bytes."""
    head = _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + head + _chunk(b"IDAT", zlib.compress(b"\0" * 100)) + _chunk(b"IEND", b"")


BAD = {
    "F/1950_a_1.png": png(10),
    "F/1951_broken_idat.png": png_with_broken_second_idat(),
    "F/1952_bomb.png": png_bomb(),
    "M/1953_bomb_warned.png": png_bomb(10000),   # under PIL's own limit, over ours
    "M/0000_zero_year.png": png(20),
    "M/1500_before_pandas.png": png(30),
    "M/2400_after_pandas.png": png(40),
    "M/1960_ok_2.png": png(60),
}


def _check_bad(res, prefix):
    r = res.report
    assert list(res.table["id"]) == ["F/1950_a_1", "M/1960_ok_2"] and balanced(r)
    assert dict(r.dropped) == {"undecodable image": 1, "oversized input": 2, "bad timestamp": 3}
    assert r.examples["undecodable image"][0].startswith(f"{prefix}F/1951_broken_idat.png: field 'pixels'")
    assert any("1500" in e for e in r.examples["bad timestamp"])


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_yearbook_broken_images_and_years_are_counted(tmp_path):
    root = tmp_path / "yb"
    for rel, data in BAD.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    _check_bad(read_yearbook(root, size=4), "yb/")


def _zip_with_bad_crc(path):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for rel, data in BAD.items():
            zf.writestr(rel, data)
        zf.writestr("M/1961_bad_crc.png", png(70))
    blob = bytearray(path.read_bytes())
    target = png(70)
    at = blob.rfind(target)  # the stored bytes of the last member: flip one pixel byte
    blob[at + len(target) - 20] ^= 0xFF
    path.write_bytes(bytes(blob))


def test_yearbook_zip_member_with_bad_crc_is_counted(tmp_path):
    path = tmp_path / "yb.zip"
    _zip_with_bad_crc(path)
    res = read_yearbook(path, size=4)
    r = res.report
    assert r.dropped["unreadable archive member"] == 1 and balanced(r)
    assert r.examples["unreadable archive member"][0].startswith("yb.zip:M/1961_bad_crc.png")
    assert "CRC" in r.examples["unreadable archive member"][0]


def test_yearbook_archive_that_is_not_one_is_a_clear_error(tmp_path):
    (tmp_path / "cut.zip").write_bytes(b"PK\x03\x04 not really")
    with pytest.raises(DataError, match=r"cut\.zip: not a readable zip archive"):
        read_yearbook(tmp_path / "cut.zip")
    (tmp_path / "cut.tar.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(DataError, match=r"cut\.tar\.gz: not a readable tar archive"):
        read_yearbook(tmp_path / "cut.tar.gz")


# --- Amazon sampling: a duplicate of a record already pruned from the pool ---------------------
def test_sampler_reports_duplicate_of_a_pruned_candidate():
    ids = [f"r{i}" for i in range(200)]
    worst = max(ids, key=lambda r: priority(3, r))  # the first record to leave the pool
    s = StratifiedSampler(10, seed=3, headroom=0.0)  # pool of 64: most records are pruned
    for rid in ids:
        assert s.offer("a", rid, rid, tag=rid)
    assert worst not in s.members
    assert s.offer("a", worst, "again", tag="second copy")  # accepted now, found as a duplicate later
    late = s.flush()
    assert late == [(worst, "second copy")]
    assert s.offered == 200 and s.counts["a"] == 200


def test_amazon_sample_counts_duplicate_of_pruned_record(tmp_path):
    lines = [review(f"u{i}", ms(2015, 1 + i % 12, 1), 1 + i % 5) for i in range(300)]
    rid = lambda i: f"Cat/u{i}/a/{ms(2015, 1 + i % 12, 1)}"  # noqa: E731
    worst = max(range(300), key=lambda i: priority(42, rid(i)))
    lines.append(lines[worst])
    (tmp_path / "Cat.jsonl").write_text("\n".join(lines) + "\n")
    res = read_amazon(tmp_path, sample_size=20, progress=False)
    r = res.report
    assert dict(r.dropped) == {"duplicate id": 1} and balanced(r) and r.not_sampled == 280
    assert r.examples["duplicate id"][0].startswith(f"{tmp_path.name}/Cat.jsonl:301: field 'id'")


def test_sampler_fingerprints_stay_exact_across_flushes():
    s = StratifiedSampler(5, seed=1, quotas={0: 1, 1: 1, 2: 1}, flush_every=7)  # 1 kept per stratum
    for i in range(100):
        assert s.offer(i % 3, f"r{i}", i, tag=i)
    dups = [f"dup{i}" for i in (3, 50, 99, 3) if not s.offer(i % 3, f"r{i}", i, tag=f"dup{i}")]
    dups += [t for _, t in s.flush()]
    assert sorted(dups) == ["dup3", "dup3", "dup50", "dup99"]
    assert sum(s.counts.values()) == 100 and len(s.seen) == 100
    assert np.all(np.diff(s.seen.astype(np.float64)) > 0)  # sorted, unique fingerprints


# --- found by the fuzz suite: CSV encodings, truncated gzip, corrupt Parquet ------------------
CSV_OPTS = dict(task="regression", timestamp="when", input="body", label="y", id="id", progress=False)


def test_csv_byte_order_mark_bad_utf8_and_truncated_gzip(tmp_path):
    import gzip

    body = "id,when,body,y\nr1,2015,one,1\nr2,2015,tw\udcffo,2\nr3,2015,three,3\n"
    data = b"\xef\xbb\xbf" + body.encode("utf-8", "surrogateescape")
    (tmp_path / "t.csv").write_bytes(data)
    res = read_table(tmp_path / "t.csv", **CSV_OPTS)
    assert list(res.table["id"]) == ["r1", "r3"] and balanced(res.report)  # BOM is not part of "id"
    assert res.report.examples["unparseable line"] == ["t.csv:3: column 'body': bytes that are not UTF-8"]
    (tmp_path / "t.csv.gz").write_bytes(gzip.compress(data * 50)[:-30])
    res = read_table(tmp_path / "t.csv.gz", **CSV_OPTS, start=2000)
    assert res.report.dropped["unreadable rest of file"] == 1 and balanced(res.report)


def test_parquet_corrupt_file_and_unconvertible_rows_are_counted(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = pa.table({"id": ["a", "b", "c"], "when": pa.array([0, 2**62, 1_420_070_400_000], pa.timestamp("ms")),
                     "body": ["x", "y", "z"], "y": [1.0, 2.0, 3.0]})
    pq.write_table(good, tmp_path / "p.parquet")
    res = read_table(tmp_path / "p.parquet", **CSV_OPTS)
    assert list(res.table["id"]) == ["a", "c"] and res.report.dropped == {"unparseable line": 1}
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "empty.parquet").write_bytes(b"")
    (tmp_path / "bad" / "cut.parquet").write_bytes((tmp_path / "p.parquet").read_bytes()[:-40])
    pq.write_table(good, tmp_path / "bad" / "ok.parquet")
    res = read_table(tmp_path / "bad", **CSV_OPTS)
    assert res.report.dropped == {"unreadable rest of file": 2, "unparseable line": 1} and balanced(res.report)
    assert sorted(e.split(":")[0] for e in res.report.examples["unreadable rest of file"]) == [
        "cut.parquet", "empty.parquet"]


def test_yearbook_truncated_tar_counts_the_lost_rest(tmp_path):
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for k in range(40):
            data = np.random.default_rng(k).integers(0, 256, (16, 16, 3), dtype=np.uint8)
            out = io.BytesIO()
            Image.fromarray(data).save(out, format="PNG")
            info = tarfile.TarInfo(f"F/{1950 + k}_x_{k}.png")
            info.size = len(out.getvalue())
            tf.addfile(info, io.BytesIO(out.getvalue()))
    path = tmp_path / "cut.tar.gz"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) * 2 // 3])
    res = read_yearbook(path, size=4)
    r = res.report
    assert 0 < r.kept < 40 and r.dropped == {"unreadable rest of file": 1} and balanced(r)
    assert r.examples["unreadable rest of file"][0].startswith("cut.tar.gz:")
