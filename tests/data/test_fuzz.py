"""Short fuzz suite: about 100 mutated records per input format, every reader, every invariant.

The full run (1,000 per format) is ``python bench/fuzz.py``; both use testkit.fuzz.
"""

import pytest

from testkit.fuzz import FORMATS, build, fuzz_format, summarise

# reasons each format's mutations must produce: proof that the fuzzing reaches the readers' checks
EXPECTED_REASONS = {
    "amazon": {"unparseable line", "bad timestamp", "duplicate id", "missing field", "unreadable rest of file"},
    "arxiv": {"unparseable line", "bad timestamp", "duplicate id", "label outside the set"},
    "csv": {"unparseable line", "bad timestamp", "label outside the set", "missing field"},
    "parquet": {"bad timestamp", "wrong type", "unreadable rest of file", "unparseable line"},
    "yearbook-folder": {"undecodable image", "oversized input", "bad timestamp", "duplicate id",
                        "not an image file"},
    "yearbook-zip": {"undecodable image", "oversized input", "bad timestamp", "unreadable archive member"},
    "yearbook-tar": {"undecodable image", "oversized input", "bad timestamp", "unreadable rest of file"},
}


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
@pytest.mark.parametrize("fmt", FORMATS)
def test_fuzz_no_crash_and_every_record_accounted(fmt, tmp_path):
    results = fuzz_format(fmt, tmp_path, records=100, files=10, seed=1)
    s = summarise(results)
    assert s["crashes"] == 0 and s["problems"] == [], s["problems"][:5]
    assert s["mutated"] >= 100 and s["read"] >= s["mutated"] // 2
    assert s["read"] == s["kept"] + s["dropped"] + s["not_sampled"]
    assert EXPECTED_REASONS[fmt] <= set(s["dropped_by_reason"]), s["dropped_by_reason"]
    assert s["kept"] > 0  # clean records get through alongside the mutated ones


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("fmt", ["amazon", "csv", "parquet", "yearbook-zip"])
def test_fuzz_inputs_are_deterministic(fmt, tmp_path):
    build(fmt, tmp_path / "a", 40, 4, seed=3)
    build(fmt, tmp_path / "b", 40, 4, seed=3)
    build(fmt, tmp_path / "c", 40, 4, seed=4)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b") != _tree(tmp_path / "c")
