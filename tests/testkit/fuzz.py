"""Seeded mutation fuzzing of every input format the readers take (issue 14, "Fuzz suite").

For each format, :func:`fuzz_format` writes ``files`` files of valid records (the "clean" ones)
mixed with ``records`` mutated ones, reads each file with its reader (strict off) and checks:

- **no crash**: the reader returns, or raises :class:`~driftmatrix.data.table.DataError` whose
  message names the file (a clean refusal, e.g. a zip without its central directory);
- **read = kept + dropped (+ not sampled)** for every file, and ``len(table) == kept``;
- **every drop has a reason** from :data:`~driftmatrix.data.jsonl.REASONS`, with an example whose
  location names the file;
- **nothing silently lost**: where the record count is known from the bytes written (JSON lines,
  Parquet, image members), ``read`` equals it, and every clean record is in the table.

Mutations (chosen round-robin from a seeded shuffle, so a short run still uses each kind):
truncation, type swaps, huge / negative / microsecond / nanosecond timestamps, NaN and Infinity,
invalid UTF-8, a byte-order mark, deep nesting, empty lines, duplicate ids, missing fields, non-object
lines; for images: truncated files, corrupted PNG chunks and CRCs, zero-byte files, decompression
bombs, impossible years, wrong suffixes; for archives: bad CRCs, corrupt deflate data, oversized
members, truncated archives. Everything is deterministic given the seed.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
import re
import struct
import tarfile
import traceback
import zipfile
import zlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

FORMATS = ("amazon", "arxiv", "csv", "parquet", "yearbook-folder", "yearbook-zip", "yearbook-tar")
BOM = b"\xef\xbb\xbf"
_MS_2014, _MS_2024 = 1_388_534_400_000, 1_704_067_200_000
_SUMMARY = re.compile(r"records read (\d+), kept (\d+), dropped (\d+)")
_SUMMARY_REASON = re.compile(r"^\s+dropped\s+(\d+) (.+?)\s+e\.g\. ", re.MULTILINE)
YEARBOOK_OPTIONS = {"max_bytes": 200_000, "max_pixels": 1 << 20, "workers": 2, "window": 16}


@dataclass
class FileResult:
    """One reader call on one fuzzed file."""

    fmt: str
    file: str
    status: str = "ok"          # ok | rejected (DataError naming the file) | crash
    written: int = 0            # records written (clean + mutated)
    mutated: int = 0
    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    not_sampled: int = 0
    error: str = ""
    problems: list[str] = field(default_factory=list)  # invariant violations


@dataclass
class Plan:
    """What was written into one file: the facts the checks compare against."""

    path: Path
    written: int = 0
    mutated: int = 0
    expect_read: int | None = None      # records the reader must count (None: not known exactly)
    clean_ids: list[str] = field(default_factory=list)  # ids that must all be kept
    options: dict[str, Any] = field(default_factory=dict)


def _pick(rng: random.Random, kinds: list[str], i: int, order: list[int]) -> str:
    return kinds[order[i % len(kinds)]]


# --- JSON lines (Amazon, arXiv) ------------------------------------------------------------------
SWAPS: list[Any] = [None, True, False, 0, -1, 1.5, "", "x", [], {}, [1, 2], {"a": 1}, 10**19, "9" * 30]
TIMESTAMPS: list[Any] = ["micro", "nano", "seconds", -1_600_000_000_000_000, 1_600_000_000_000_000, 0, -1,
                         2**63 - 1, 2**64, 1e300, -1e300, "2015-01-01", "ms-float"]
RAW_NUMBERS = [b"NaN", b"Infinity", b"-Infinity", b"1e400", b"1" + b"0" * 400, b"-0", b"1.0e-400", b"0x10",
               b"01", b"+1"]
BAD_BYTES = [b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\x80", b"\xc0\xaf"]
JSON_KINDS = ["truncate", "swap", "time", "raw_time", "raw_label", "utf8", "bom", "deep", "blank", "duplicate",
              "missing", "not_object", "nul", "crlf", "lone_surrogate", "huge_text", "label", "id_type",
              "extra_comma"]


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode("utf-8")


def _replace_value(line: bytes, key: str, raw: bytes) -> bytes:
    """Put the raw JSON token ``raw`` as the value of ``key`` (first occurrence)."""
    obj = json.loads(line)
    obj[key] = "\x00PLACEHOLDER\x00"
    return _dumps(obj).replace(b'"\\u0000PLACEHOLDER\\u0000"', raw)


def _insert_bytes(line: bytes, rng: random.Random, bad: bytes) -> bytes:
    """Put ``bad`` inside a string value (after an opening quote of a value)."""
    quotes = [i for i in range(1, len(line)) if line[i - 1:i + 1] == b' "']
    at = rng.choice(quotes) + 1 if quotes else len(line) // 2
    return line[:at] + bad + line[at:]


def mutate_json(rng: random.Random, kind: str, obj: dict[str, Any], time_key: str, label_key: str,
                id_key: str, earlier: list[bytes]) -> list[bytes]:
    """One mutated record as the lines to write (blank lines and duplicates give several)."""
    line = _dumps(obj)
    keys = list(obj)
    if kind == "truncate":
        return [line[: rng.randrange(1, len(line))]]
    if kind == "swap":
        obj = dict(obj)
        obj[rng.choice(keys)] = rng.choice(SWAPS)
        return [_dumps(obj)]
    if kind == "time":
        obj = dict(obj)
        t = rng.choice(TIMESTAMPS)
        base = obj[time_key] if isinstance(obj[time_key], int) else _MS_2014 + 10**10
        obj[time_key] = {"micro": base * 1000, "nano": base * 1_000_000, "seconds": base // 1000,
                         "ms-float": base + 0.25}.get(t, t) if isinstance(t, str) else t
        return [_dumps(obj)]
    if kind == "raw_time":
        return [_replace_value(line, time_key, rng.choice(RAW_NUMBERS))]
    if kind == "raw_label":
        return [_replace_value(line, label_key, rng.choice(RAW_NUMBERS))]
    if kind == "utf8":
        return [_insert_bytes(line, rng, rng.choice(BAD_BYTES))]
    if kind == "bom":
        return [BOM + line]
    if kind == "deep":
        depth = rng.choice([100, 1100, 5000])
        return [line[:-1] + b', "nested": ' + b"[" * depth + b"]" * depth + b"}"]
    if kind == "blank":
        return [rng.choice([b"", b"   ", b"\t", b"\r", b" \r"]), line, b""]
    if kind == "duplicate":
        return [rng.choice(earlier) if earlier else line, line] if earlier else [line, line]
    if kind == "missing":
        obj = dict(obj)
        del obj[rng.choice([time_key, label_key, id_key])]
        return [_dumps(obj)]
    if kind == "not_object":
        return [rng.choice([b"[1, 2]", b"42", b'"text"', b"null", b"true", b"{", b"}", b"{}"])]
    if kind == "nul":
        return [_insert_bytes(line, rng, b"\x00")]
    if kind == "crlf":
        return [line + b"\r"]
    if kind == "lone_surrogate":
        obj = dict(obj)
        key = rng.choice([k for k in keys if isinstance(obj[k], str)] or keys)
        return [_dumps(obj).replace(f'"{key}": "'.encode(), f'"{key}": "\\ud800'.encode(), 1)]
    if kind == "huge_text":
        obj = dict(obj)
        obj[rng.choice(keys)] = "word " * rng.choice([10_000, 60_000])
        return [_dumps(obj)]
    if kind == "label":
        obj = dict(obj)
        obj[label_key] = rng.choice([0, 6, -1, 5.5, "5", True, 1e308, float("nan"), float("inf"), "cs.LG cs.XX"])
        return [json.dumps(obj, ensure_ascii=False, allow_nan=True).encode()]
    if kind == "id_type":
        obj = dict(obj)
        obj[id_key] = rng.choice([10**30, [1], {"a": 1}, "", " ", "../x", "a/b", None, 1.5])
        return [_dumps(obj)]
    if kind == "extra_comma":
        return [line[:-1] + b",}"]
    raise ValueError(kind)


def amazon_record(rng: random.Random, k: int) -> tuple[dict[str, Any], str]:
    ts = rng.randrange(_MS_2014, _MS_2024)
    obj = {"rating": rng.choice([1, 2, 3, 4, 5, 5, 5]), "title": f"title {k}", "text": f"review text {k} ok",
           "images": [], "asin": f"B{k:07d}", "parent_asin": f"B{k:07d}", "user_id": f"U{k:06d}",
           "timestamp": ts, "helpful_vote": rng.randrange(5), "verified_purchase": bool(k % 2)}
    return obj, f"{obj['user_id']}/{obj['asin']}/{ts}"


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def arxiv_record(rng: random.Random, k: int) -> tuple[dict[str, Any], str]:
    year = rng.randrange(2001, 2025)
    created = f"Mon, {rng.randrange(1, 29)} {rng.choice(_MONTHS)} {year} 12:00:00 GMT"
    obj = {"id": f"{year % 100:02d}{k:06d}", "submitter": "A", "authors": "A. B.", "title": f"Paper {k}",
           "comments": None, "categories": rng.choice(["cs.LG", "hep-ph", "cs.CV cs.AI", "gr-qc"]),
           "abstract": f"We study {k}.", "versions": [{"version": "v1", "created": created}],
           "update_date": f"{year}-01-01"}
    return obj, obj["id"]


def _write_json_file(plan: Plan, lines: list[bytes], rng: random.Random, file_kind: str) -> None:
    data = b"\n".join(lines) + b"\n"
    if file_kind == "bom":
        data = BOM + data
    elif file_kind == "no_newline":
        data = data.rstrip(b"\n")
    plan.expect_read = _count_json_lines(data)
    if file_kind.startswith("gzip"):
        data = gzip.compress(data, mtime=0)
        if file_kind == "gzip_truncated":  # the lines before the cut, then one unreadable rest
            data = data[: rng.randrange(10, len(data) - 1)]
            plan.expect_read, plan.clean_ids = None, []
        elif file_kind == "gzip_garbage":  # every line, then one unreadable rest
            data += b"garbage after the gzip stream"
            plan.expect_read = plan.expect_read + 1
    elif file_kind == "zero_bytes":
        data, plan.expect_read, plan.clean_ids = b"", 0, []
    plan.path.write_bytes(data)


def _count_json_lines(data: bytes) -> int:
    """Records a JSON-lines reader must count: non-blank b"\\n"-separated lines (BOM of line 1 aside)."""
    lines = data.split(b"\n")
    if lines and lines[0].startswith(BOM):
        lines[0] = lines[0][len(BOM):]
    return sum(1 for line in lines if line.strip())


FILE_KINDS_JSON = ["plain", "plain", "bom", "gzip", "gzip_truncated", "no_newline", "gzip_garbage", "plain",
                   "zero_bytes", "plain"]


def json_files(fmt: str, root: Path, records: int, files: int, seed: int, clean_share: float = 0.2) -> list[Plan]:
    """Mutated JSON-lines files for the ``amazon`` or ``arxiv`` reader."""
    make = amazon_record if fmt == "amazon" else arxiv_record
    time_key, label_key, id_key = (("timestamp", "rating", "user_id") if fmt == "amazon"
                                   else ("versions", "categories", "id"))
    rng = random.Random(seed)
    order = list(range(len(JSON_KINDS)))
    rng.shuffle(order)
    plans, k, m = [], 0, 0
    kinds = [FILE_KINDS_JSON[f % len(FILE_KINDS_JSON)] if files > 1 else "plain" for f in range(files)]
    for f, n in enumerate(_budget(records, kinds, ("zero_bytes",))):
        file_kind = kinds[f]
        name = f"Cat{f:02d}.jsonl" + (".gz" if file_kind.startswith("gzip") else "")
        if fmt == "arxiv":
            name = f"arxiv-metadata-oai-snapshot-{f:02d}.json" + (".gz" if file_kind.startswith("gzip") else "")
        plan = Plan(root / name, options={"progress": False})
        if fmt == "amazon":
            plan.options.update(categories=[name.split(".")[0]], sample_size=0 if f % 3 else 25)
        lines: list[bytes] = []
        i = 0
        while plan.mutated < n:
            obj, rid = make(rng, k)
            k += 1
            plan.written += 1
            i += 1
            if i % 5 == 1:  # every fifth record is clean: it must come out in the table
                lines.append(_dumps(obj))
                plan.clean_ids.append(f"{name.split('.')[0]}/{rid}" if fmt == "amazon" else rid)
                continue
            kind = _pick(rng, JSON_KINDS, m, order)
            m += 1
            if fmt == "arxiv" and kind in ("time", "raw_time"):  # versions[0].created is a string
                obj["versions"] = [{"version": "v1", "created": rng.choice(
                    ["Mon, 2 Apr 0000 19:18:42 GMT", "Mon, 2 Apr 1500 19:18:42 GMT", "2 Apr 2007",
                     "Mon, 31 Feb 2007 10:00:00 GMT", "", "Mon, 2 Apr 99999 19:18:42 GMT", 12345, None,
                     "Mon, 2 Apr 2007 25:61:61 GMT"])}]
                lines.append(_dumps(obj))
            else:
                lines.extend(mutate_json(rng, kind, obj, time_key, label_key, id_key, lines[-50:]))
            plan.mutated += 1
        _write_json_file(plan, lines, rng, file_kind)
        plans.append(plan)
    return plans


def _split(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _budget(total: int, kinds: list[str], empty: tuple[str, ...]) -> list[int]:
    """Mutated records per file: files of an ``empty`` kind (zero bytes, header only) get none."""
    full = [i for i, k in enumerate(kinds) if k not in empty] or list(range(len(kinds)))
    shares = dict(zip(full, _split(total, len(full))))
    return [shares.get(i, 0) for i in range(len(kinds))]


# --- tables: CSV and Parquet ----------------------------------------------------------------------
CSV_KINDS = ["quote", "fields", "nul", "utf8", "bom", "newline_in_field", "huge_field", "time", "label",
             "missing", "duplicate", "blank", "crlf", "id"]
CSV_TIMES = ["1e400", "1" + "0" * 400, "-1600000000000000", "1600000000000000", "0000-01-01", "1500-06-01",
             "2400-01-01", "NaN", "inf", "-inf", "", " ", "2015-13-45", "yesterday", "2015", "1420070400",
             "1420070400000", "1420070400000000", "2015-01-01T00:00:00+25:00", "9" * 5000]
TABLE_LABELS = ["", "x", "1e400", "nan", "-3", "6", "5.5", "1" + "0" * 400, "True", "0x1", " 3 "]


def table_row(rng: random.Random, k: int) -> dict[str, Any]:
    ms = rng.randrange(_MS_2014, _MS_2024)
    return {"id": f"r{k}", "when": datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(),
            "body": f"text of row {k}", "y": str(rng.randrange(1, 6))}


def _csv_line(values: list[str]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerow(values)
    return out.getvalue().encode("utf-8")


def csv_files(root: Path, records: int, files: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    order = list(range(len(CSV_KINDS)))
    rng.shuffle(order)
    plans, k, m = [], 0, 0
    header = ["id", "when", "body", "y"]
    kinds = [["plain", "bom", "gzip", "gzip_truncated", "crlf", "zero_bytes", "header_only", "plain",
              "latin1", "plain"][f % 10] if files > 1 else "plain" for f in range(files)]
    for f, n in enumerate(_budget(records, kinds, ("zero_bytes", "header_only"))):
        file_kind = kinds[f]
        plan = Plan(root / (f"t{f:02d}.csv" + (".gz" if file_kind.startswith("gzip") else "")),
                    options={"task": "regression", "timestamp": "when", "input": "body", "label": "y",
                             "id": "id", "progress": False})
        lines = [_csv_line(header)]
        open_quote = False  # after an unbalanced quote, CSV reads the next lines as one field
        i = 0
        while plan.mutated < n:
            row = table_row(rng, k)
            k += 1
            plan.written += 1
            i += 1
            if i % 5 == 1:
                lines.append(_csv_line(list(row.values())))
                if not open_quote:
                    plan.clean_ids.append(row["id"])
                continue
            kind = _pick(rng, CSV_KINDS, m, order)
            m += 1
            plan.mutated += 1
            values = list(row.values())
            if kind == "quote":
                values[2] = '"unbalanced ' + values[2]
                lines.append(",".join(values).encode())
                open_quote = True
            elif kind == "fields":
                lines.append(_csv_line(values + ["extra"] if rng.random() < 0.5 else values[:2]))
            elif kind == "nul":
                lines.append(_csv_line(values).replace(b"text", b"te\x00xt"))
            elif kind == "utf8":
                lines.append(_csv_line(values).replace(b"text", b"te" + rng.choice(BAD_BYTES) + b"xt"))
            elif kind == "bom":
                lines.append(BOM + _csv_line(values))
            elif kind == "newline_in_field":
                values[2] = "line one\nline two"
                lines.append(_csv_line(values))
            elif kind == "huge_field":
                values[2] = "w" * rng.choice([1000, 200_000])
                lines.append(_csv_line(values))
            elif kind == "time":
                values[1] = rng.choice(CSV_TIMES)
                lines.append(_csv_line(values))
            elif kind == "label":
                values[3] = rng.choice(TABLE_LABELS)
                lines.append(_csv_line(values))
            elif kind == "missing":
                values[rng.randrange(4)] = ""
                lines.append(_csv_line(values))
            elif kind == "duplicate":
                values[0] = f"r{rng.randrange(k)}"
                lines.append(_csv_line(values))
            elif kind == "blank":
                lines.extend([b"\n", _csv_line(values), b"   \n"])
            elif kind == "crlf":
                lines.append(_csv_line(values).replace(b"\n", b"\r\n"))
            elif kind == "id":
                values[0] = rng.choice(["", "9" * 5000, "r0", " r1 "])
                lines.append(_csv_line(values))
        data = b"".join(x if x.endswith(b"\n") else x + b"\n" for x in lines)
        if file_kind == "bom":
            data = BOM + data
        elif file_kind == "crlf":
            data = data.replace(b"\n", b"\r\n")
        elif file_kind == "header_only":
            data = lines[0]
        elif file_kind == "latin1":
            data = data.replace(b"text", "t\xe9xt".encode("latin-1"))
            plan.clean_ids = []
        elif file_kind == "zero_bytes":
            data = b""
        if file_kind.startswith("gzip"):
            data = gzip.compress(data, mtime=0)
            if file_kind == "gzip_truncated":
                data = data[: rng.randrange(10, len(data) - 1)]
                plan.clean_ids = []
        plan.path.write_bytes(data)
        plans.append(plan)
    return plans


PARQUET_VARIANTS = ["typed", "strings", "floats", "timestamps", "nested", "truncated", "zero_bytes", "flipped",
                    "typed", "binary"]


def parquet_files(root: Path, records: int, files: int, seed: int) -> list[Plan]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(seed)
    plans, k = [], 0
    kinds = [PARQUET_VARIANTS[f % len(PARQUET_VARIANTS)] if files > 1 else "typed" for f in range(files)]
    for f, n in enumerate(_budget(records, kinds, ("zero_bytes",))):
        variant = kinds[f]
        plan = Plan(root / f"p{f:02d}.parquet", options={"task": "regression", "timestamp": "when",
                                                         "input": "body", "label": "y", "id": "id",
                                                         "progress": False})
        rows: list[dict[str, Any]] = []
        while len(rows) - len(plan.clean_ids) < n:
            ms = rng.randrange(_MS_2014, _MS_2024)
            clean = len(rows) % 5 == 0
            rows.append({"id": f"q{k}", "when": ms, "body": f"row {k}", "y": float(rng.randrange(1, 6)),
                         "clean": clean})
            if clean:
                plan.clean_ids.append(f"q{k}")
            k += 1
        plan.written = len(rows)
        plan.mutated = plan.written - len(plan.clean_ids)
        mut = [r for r in rows if not r["clean"]]
        if variant in ("typed", "truncated", "flipped", "zero_bytes"):
            for r in mut:
                what = rng.randrange(6)
                if what == 0:
                    r["when"] = rng.choice([2**63 - 1, -(2**63), r["when"] * 1000, r["when"] * 10**6, -1, 0])
                elif what == 1:
                    r["y"] = rng.choice([float("nan"), float("inf"), -float("inf"), -3.0, 1e300, 5.4999, None])
                elif what == 2:
                    r["body"] = rng.choice([None, "", "   "])
                elif what == 3:
                    r["id"] = rng.choice([None, "", f"q{rng.randrange(k)}"])
                elif what == 4:
                    r["when"] = None
                else:
                    r["body"] = "\u0000\ud7ff\ufffe" + r["body"]
            table = pa.table({"id": pa.array([r["id"] for r in rows], pa.string()),
                              "when": pa.array([r["when"] for r in rows], pa.int64()),
                              "body": pa.array([r["body"] for r in rows], pa.string()),
                              "y": pa.array([r["y"] for r in rows], pa.float64())})
        elif variant == "strings":  # time and label as text: garbage, far years, huge numbers
            for r in mut:
                r["when"] = rng.choice(CSV_TIMES)
                r["y"] = rng.choice(TABLE_LABELS)
            for r in rows:
                if r["clean"]:
                    r["when"] = datetime.fromtimestamp(r["when"] / 1000, tz=timezone.utc).isoformat()
                    r["y"] = str(int(r["y"]))
            table = pa.table({"id": pa.array([r["id"] for r in rows], pa.string()),
                              "when": pa.array([r["when"] for r in rows], pa.string()),
                              "body": pa.array([r["body"] for r in rows], pa.string()),
                              "y": pa.array([r["y"] for r in rows], pa.string())})
        elif variant == "binary":  # text as bytes (some not UTF-8): a wrong type for every row
            table = pa.table({"id": pa.array([r["id"] for r in rows], pa.string()),
                              "when": pa.array([r["when"] for r in rows], pa.int64()),
                              "body": pa.array([rng.choice([b"\xff\xfe bad", b"ok bytes", b""]) for _ in rows],
                                               pa.binary()),
                              "y": pa.array([r["y"] for r in rows], pa.float64())})
            plan.clean_ids = []
        elif variant == "floats":
            for r in mut:
                r["when"] = rng.choice([float("nan"), float("inf"), 1e300, -0.0, 1.6e15, 1.4e12 + 0.5])
                r["y"] = rng.choice([2**62, -5, 0, 10**6])
            table = pa.table({"id": pa.array([r["id"] for r in rows], pa.string()),
                              "when": pa.array([float(r["when"]) for r in rows], pa.float64()),
                              "body": pa.array([r["body"] for r in rows], pa.large_string()),
                              "y": pa.array([int(r["y"]) for r in rows], pa.int64())})
        elif variant == "timestamps":  # id as int64, time as timestamp[ms] (some beyond datetime), y as bool
            for r in mut:
                r["when"] = rng.choice([-(2**62), 2**62, r["when"], 253_402_300_800_000])
            table = pa.table({"id": pa.array([int(r["id"][1:]) for r in rows], pa.int64()),
                              "when": pa.array([r["when"] for r in rows], pa.timestamp("ms")),
                              "body": pa.array([r["body"] for r in rows], pa.string()),
                              "y": pa.array([r["y"] > 2 for r in rows], pa.bool_())})
            plan.clean_ids = []  # a bool is not a rating: every row is dropped as a wrong type
        else:  # nested
            for r in mut:
                r["body"] = [r["body"], "x"]
                r["y"] = {"v": r["y"]}
            table = pa.table({"id": pa.array([r["id"] for r in rows], pa.string()),
                              "when": pa.array([r["when"] for r in rows], pa.int64()),
                              "body": pa.array([r["body"] if isinstance(r["body"], list) else [r["body"]]
                                                for r in rows], pa.list_(pa.string())),
                              "y": pa.array([r["y"] if isinstance(r["y"], dict) else {"v": r["y"]}
                                             for r in rows], pa.struct([("v", pa.float64())]))})
            plan.clean_ids = []
        buf = io.BytesIO()
        pq.write_table(table, buf, row_group_size=max(1, len(rows) // 3))
        data = buf.getvalue()
        plan.expect_read = len(rows)
        if variant == "truncated":
            data = data[: rng.randrange(4, len(data) - 1)]
            plan.expect_read, plan.clean_ids = None, []
        elif variant == "zero_bytes":
            data, plan.expect_read, plan.clean_ids = b"", None, []
        elif variant == "flipped":
            blob = bytearray(data)
            for _ in range(8):
                at = rng.randrange(4, max(5, len(blob) // 2))
                blob[at] ^= 0xFF
            data, plan.expect_read, plan.clean_ids = bytes(blob), None, []
        plan.path.write_bytes(data)
        plans.append(plan)
    return plans


# --- Yearbook images: folder, zip, tar.gz ---------------------------------------------------------
IMAGE_KINDS = ["truncate", "flip_idat", "idat_type", "bad_crc", "zero_bytes", "bomb", "bomb_pil", "year_zero",
               "year_old", "year_future", "no_year", "suffix", "mode", "duplicate_stem", "oversized",
               "garbage", "jpeg_truncated", "other_format"]


def _chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload))


def png_bytes(rng: random.Random, w: int = 20, h: int = 24, mode: str = "RGB", idat_split: int = 64) -> bytes:
    """A small random PNG written by hand, its data split over several IDAT chunks."""
    if mode != "RGB":
        from PIL import Image

        buf = io.BytesIO()
        Image.new(mode, (w, h), rng.randrange(256) if mode in ("L", "P", "1") else 70).save(buf, format="PNG")
        return buf.getvalue()
    raw = b"".join(b"\0" + bytes(rng.randrange(256) for _ in range(w * 3)) for _ in range(h))
    z = zlib.compress(raw)
    parts = [z[i:i + idat_split] for i in range(0, len(z), idat_split)]
    head = _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + head + b"".join(_chunk(b"IDAT", p) for p in parts) + _chunk(b"IEND", b"")


def png_bomb(side: int) -> bytes:
    head = _chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0))
    return b"\x89PNG\r\n\x1a\n" + head + _chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + _chunk(b"IEND", b"")


def mutate_image(rng: random.Random, kind: str, name: str) -> tuple[str, bytes]:
    """``(file name, bytes)`` of one mutated image member."""
    good = png_bytes(rng)
    second_idat = 8 + 25 + 12 + 64  # offset of the second IDAT chunk in png_bytes' layout
    if kind == "truncate":
        return name, good[: rng.randrange(1, len(good) - 1)]
    if kind == "flip_idat":
        blob = bytearray(good)
        for _ in range(rng.randrange(1, 5)):
            blob[rng.randrange(second_idat + 8, len(blob) - 12)] ^= 1 << rng.randrange(8)
        return name, bytes(blob)
    if kind == "idat_type":  # the corrupted second IDAT's type: PIL raises SyntaxError
        blob = bytearray(good)
        blob[second_idat + 4 + rng.randrange(4)] ^= 0x5A
        return name, bytes(blob)
    if kind == "bad_crc":
        blob = bytearray(good)
        blob[second_idat + 8 + 64 + rng.randrange(4)] ^= 0xFF
        return name, bytes(blob)
    if kind == "zero_bytes":
        return name, b""
    if kind == "bomb":
        return name, png_bomb(rng.choice([60_000, 30_000]))
    if kind == "bomb_pil":  # over our max_pixels, under PIL's own limit
        return name, png_bomb(rng.choice([2_000, 5_000]))
    if kind == "year_zero":
        return "0000" + name[4:], good
    if kind == "year_old":
        return rng.choice(["1500", "1677", "0999"]) + name[4:], good
    if kind == "year_future":
        return rng.choice(["2262", "9999", "2400"]) + name[4:], good
    if kind == "no_year":
        k = name.rsplit("_", 1)[-1]
        return rng.choice(["portrait_", "_1950_", "19a0_", "1950-", "195_"]) + k, good
    if kind == "suffix":
        return name[:-4] + rng.choice([".txt", "", ".png.bak", ".gif", ".PNG"]), good
    if kind == "mode":
        return name, png_bytes(rng, mode=rng.choice(["L", "P", "RGBA", "1", "I;16", "LA"]))
    if kind == "duplicate_stem":
        return name[:-4] + ".jpg", good
    if kind == "oversized":
        return name, good + b"\0" * (YEARBOOK_OPTIONS["max_bytes"] + 1)
    if kind == "garbage":
        return name, bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    if kind == "jpeg_truncated":
        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (40, 40), (9, 99, 199)).save(buf, format="JPEG")
        return name, buf.getvalue()[: rng.randrange(20, len(buf.getvalue()) - 10)]
    if kind == "other_format":
        from PIL import Image

        buf = io.BytesIO()
        Image.new("RGB", (12, 12), (1, 2, 3)).save(buf, format=rng.choice(["GIF", "BMP", "TIFF"]))
        return name, buf.getvalue()
    raise ValueError(kind)


def image_members(rng: random.Random, n: int, start: int, order: list[int], m0: int
                  ) -> tuple[list[tuple[str, bytes]], list[str], int, int, int]:
    """``(relative path, bytes)`` members, clean ids, mutated count, next mutation index, next k."""
    out, clean, mutated, m = [], [], 0, m0
    i = 0
    while mutated < n:
        k = start + i
        i += 1
        cls = "FM"[k % 2]
        name = f"{1950 + k % 40}_State_City_School_{k:05d}.png"
        if i % 5 == 1:
            out.append((f"{cls}/{name}", png_bytes(rng)))
            clean.append(f"{cls}/{name[:-4]}")
            continue
        kind = _pick(rng, IMAGE_KINDS, m, order)
        m += 1
        mutated += 1
        new_name, data = mutate_image(rng, kind, name)
        if kind == "duplicate_stem":
            out.append((f"{cls}/{name}", png_bytes(rng)))  # the .png first, then the same stem as .jpg
        out.append((f"{cls}/{new_name}", data))
    return out, clean, mutated, m, start + i


def _counted(members: list[tuple[str, bytes]]) -> int:
    """Members the reader sees: files directly in F/ or M/ (no hidden names)."""
    return sum(1 for rel, _ in members if rel.split("/")[0] in "FM" and not rel.split("/")[-1].startswith("."))


def yearbook_files(fmt: str, root: Path, records: int, files: int, seed: int) -> list[Plan]:
    rng = random.Random(seed)
    order = list(range(len(IMAGE_KINDS)))
    rng.shuffle(order)
    plans, k, m = [], 0, 0
    for f, n in enumerate(_split(records, files)):
        members, clean, mutated, m, k = image_members(rng, n, k, order, m)
        name = f"yb{f:02d}" + {"yearbook-folder": "", "yearbook-zip": ".zip", "yearbook-tar": ".tar.gz"}[fmt]
        plan = Plan(root / name, written=len(members), mutated=mutated, expect_read=_counted(members),
                    clean_ids=clean, options=dict(YEARBOOK_OPTIONS))
        if fmt == "yearbook-folder":
            for rel, data in members:
                p = plan.path / rel
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
            (plan.path / "F" / "1950_a_directory.png").mkdir(exist_ok=True)  # not a file: not counted
        elif fmt == "yearbook-zip":
            _write_zip(plan, members, rng, f)
        else:
            _write_tar(plan, members, rng, f)
        plans.append(plan)
    return plans


def _write_zip(plan: Plan, members: list[tuple[str, bytes]], rng: random.Random, f: int) -> None:
    buf = io.BytesIO()
    offsets: dict[str, tuple[int, int]] = {}
    with zipfile.ZipFile(buf, "w") as zf:
        for rel, data in members:
            method = zipfile.ZIP_DEFLATED if rng.random() < 0.5 else zipfile.ZIP_STORED
            zf.writestr(zipfile.ZipInfo(rel, (1980, 1, 1, 0, 0, 0)), data, compress_type=method)
        bomb = zipfile.ZipInfo(f"M/1960_zip_bomb_{f}.png", (1980, 1, 1, 0, 0, 0))
        zf.writestr(bomb, b"\0" * (YEARBOOK_OPTIONS["max_bytes"] * 4), compress_type=zipfile.ZIP_DEFLATED)
        for info in zf.infolist():
            offsets[info.filename] = (info.header_offset, info.compress_size)
    plan.expect_read = (plan.expect_read or 0) + 1
    plan.written += 1
    plan.mutated += 1
    blob = bytearray(buf.getvalue())
    # bad CRCs / corrupt data: flip a byte inside a few members' stored data (local header is 30
    # bytes + name); those members must come out as drops, not exceptions
    victims = rng.sample(sorted(offsets), k=min(len(offsets), max(1, len(offsets) // 10)))
    for rel in victims:
        off, size = offsets[rel]
        if size > 2:
            start = off + 30 + len(rel.encode())
            blob[start + rng.randrange(size)] ^= 0xFF
            plan.clean_ids = [c for c in plan.clean_ids if not rel.startswith(c + ".")]
    if f % 5 == 4:  # no central directory: the archive is refused with a DataError naming it
        blob = blob[: len(blob) // 2]
        plan.expect_read, plan.clean_ids = None, []
    plan.path.write_bytes(bytes(blob))


def _write_tar(plan: Plan, members: list[tuple[str, bytes]], rng: random.Random, f: int) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for rel, data in members:
            info = tarfile.TarInfo(f"faces/{rel}")
            info.size, info.mtime = len(data), 0
            tf.addfile(info, io.BytesIO(data))
        bomb = b"\0" * (YEARBOOK_OPTIONS["max_bytes"] * 4)
        info = tarfile.TarInfo(f"faces/M/1960_tar_bomb_{f}.png")
        info.size = len(bomb)
        tf.addfile(info, io.BytesIO(bomb))
    plan.expect_read = (plan.expect_read or 0) + 1
    plan.written += 1
    plan.mutated += 1
    data = buf.getvalue()
    if f % 3 == 2:  # truncated download: members before the cut are read, the rest is one drop
        data = data[: rng.randrange(len(data) // 3, len(data) - 1)]
        plan.expect_read, plan.clean_ids = None, []
    elif f % 3 == 1:
        data += b"trailing garbage"
    plan.path.write_bytes(data)


# --- running and checking --------------------------------------------------------------------------
def _reader(fmt: str) -> Callable[..., Any]:
    if fmt == "amazon":
        from driftmatrix.data.sources.amazon import read_amazon

        return lambda plan: read_amazon(plan.path.parent, **plan.options)
    if fmt == "arxiv":
        from driftmatrix.data.sources.arxiv import read_arxiv

        return lambda plan: read_arxiv(plan.path, **plan.options)
    if fmt in ("csv", "parquet"):
        from driftmatrix.data.sources.tabular import read_table

        return lambda plan: read_table(plan.path, **plan.options)
    from driftmatrix.data.sources.yearbook import read_yearbook

    return lambda plan: read_yearbook(plan.path, size=8, **plan.options)


def build(fmt: str, root: Path, records: int, files: int, seed: int) -> list[Plan]:
    root.mkdir(parents=True, exist_ok=True)
    if fmt in ("amazon", "arxiv"):
        return json_files(fmt, root, records, files, seed)
    if fmt == "csv":
        return csv_files(root, records, files, seed)
    if fmt == "parquet":
        return parquet_files(root, records, files, seed)
    return yearbook_files(fmt, root, records, files, seed)


def check(fmt: str, plan: Plan, read: Callable[[Plan], Any]) -> FileResult:
    """Read one fuzzed file and check the invariants of the module docstring."""
    from driftmatrix.data.jsonl import REASONS
    from driftmatrix.data.table import DataError

    res = FileResult(fmt, plan.path.name, written=plan.written, mutated=plan.mutated)
    try:
        out = read(plan)
    except DataError as exc:
        res.status, res.error = "rejected", str(exc).splitlines()[0][:200]
        if plan.path.name not in str(exc) and plan.path.parent.name not in str(exc):
            res.problems.append(f"refusal does not name the file: {res.error}")
        if plan.clean_ids:
            res.problems.append(f"refused a file with {len(plan.clean_ids)} clean records: {res.error}")
        figures = _SUMMARY.search(str(exc))  # "no record kept (records read 12, kept 0, dropped 12 ..."
        if figures:  # the refusal carries the report's summary: check its figures the same way
            res.read, res.kept, dropped = (int(x) for x in figures.groups())
            res.dropped = {m.group(2): int(m.group(1)) for m in _SUMMARY_REASON.finditer(str(exc))}
            unknown = sorted(set(res.dropped) - set(REASONS))
            if unknown:
                res.problems.append(f"unknown drop reasons {unknown}")
            if res.read != res.kept + dropped or sum(res.dropped.values()) != dropped:
                res.problems.append(f"refusal says read {res.read} != kept {res.kept} + dropped {dropped}")
            if plan.expect_read is not None and res.read != plan.expect_read:
                res.problems.append(f"read {res.read} records, the file holds {plan.expect_read}")
        return res
    except Exception as exc:  # noqa: BLE001 - this is what the fuzz suite looks for
        res.status = "crash"
        res.error = "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300]
        res.problems.append(f"crash: {res.error}")
        return res
    r = out.report
    res.read, res.kept, res.dropped, res.not_sampled = r.read, r.kept, dict(r.dropped), r.not_sampled
    if r.read != r.kept + r.total_dropped + r.not_sampled:
        res.problems.append(f"read {r.read} != kept {r.kept} + dropped {r.total_dropped} + not sampled {r.not_sampled}")
    if len(out.table) != r.kept:
        res.problems.append(f"table has {len(out.table)} rows, report says kept {r.kept}")
    for reason, n in r.dropped.items():
        if reason not in REASONS:
            res.problems.append(f"unknown drop reason {reason!r}")
        examples = r.examples.get(reason, [])
        if n and not examples:
            res.problems.append(f"{n} drops for {reason!r} without an example location")
        if any(plan.path.name not in e for e in examples):
            res.problems.append(f"a {reason!r} example does not name the file: {examples[:1]}")
    if plan.expect_read is not None and r.read != plan.expect_read:
        res.problems.append(f"read {r.read} records, the file holds {plan.expect_read}")
    ids = set(out.table["id"])
    if fmt == "amazon" and plan.options.get("sample_size"):
        pass  # a sample keeps a subset of the clean records by design
    else:
        lost = [c for c in plan.clean_ids if c not in ids]
        if lost:
            res.problems.append(f"{len(lost)} clean records not kept, e.g. {lost[:3]}")
    try:
        out.validate()
    except DataError as exc:
        res.problems.append(f"result fails validation: {exc}")
    return res


def fuzz_format(fmt: str, root: str | Path, records: int = 1000, files: int = 10, seed: int = 0) -> list[FileResult]:
    """Write, read and check ``records`` mutated records of ``fmt`` in ``files`` files under ``root``."""
    if fmt not in FORMATS:
        raise ValueError(f"format {fmt!r} not in {FORMATS}")
    plans = build(fmt, Path(root) / fmt, records, files, seed)
    read = _reader(fmt)
    return [check(fmt, p, read) for p in plans]


def summarise(results: list[FileResult]) -> dict[str, Any]:
    """Totals of one format's results (the figures of the report)."""
    dropped: dict[str, int] = {}
    for r in results:
        for reason, n in r.dropped.items():
            dropped[reason] = dropped.get(reason, 0) + n
    return {
        "files": len(results), "written": sum(r.written for r in results),
        "mutated": sum(r.mutated for r in results), "read": sum(r.read for r in results),
        "kept": sum(r.kept for r in results), "dropped": sum(dropped.values()),
        "not_sampled": sum(r.not_sampled for r in results), "dropped_by_reason": dict(sorted(dropped.items())),
        "rejected_files": sum(r.status == "rejected" for r in results),
        "crashes": sum(r.status == "crash" for r in results),
        "problems": [f"{r.file}: {p}" for r in results for p in r.problems],
    }
