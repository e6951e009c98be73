"""Fuzz every input format with 1,000 mutated records each and check that nothing crashes.

    python bench/fuzz.py [--records 1000] [--files 10] [--seed 0] [--formats amazon,csv] [--out FILE]

For each format (Amazon and arXiv JSON lines, CSV, Parquet, Yearbook folder, zip and tar.gz) it
writes seeded mutated files into a temporary folder, reads each file with its reader and checks: no
crash (a DataError naming the file is a clean refusal), read = kept + dropped (+ not sampled) for
every file, every drop with a known reason and a location, no record silently lost (see
testkit.fuzz). Prints one line per format and writes the figures as JSON (default
outputs/bench/fuzz.json); exits 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers


def main() -> int:
    from testkit.fuzz import FORMATS, fuzz_format, summarise

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1000, help="mutated records per format")
    ap.add_argument("--files", type=int, default=10, help="files per format")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/fuzz.json"))
    args = ap.parse_args()
    warnings.simplefilter("ignore")  # PIL's DecompressionBombWarning is part of the input here

    figures, failed = {}, False
    head = (f"{'format':<16}{'files':>6}{'mutated':>8}{'read':>7}{'kept':>7}{'dropped':>8}{'unsampled':>10}"
            f"{'refused':>8}{'crashes':>8}{'s':>6}")
    print(head)
    with tempfile.TemporaryDirectory(prefix="driftmatrix-fuzz-") as tmp:
        for fmt in args.formats.split(","):
            t0 = time.perf_counter()
            s = summarise(fuzz_format(fmt, tmp, args.records, args.files, args.seed))
            s["seconds"] = round(time.perf_counter() - t0, 1)
            figures[fmt] = s
            print(f"{fmt:<16}{s['files']:>6}{s['mutated']:>8}{s['read']:>7}{s['kept']:>7}{s['dropped']:>8}"
                  f"{s['not_sampled']:>10}{s['rejected_files']:>8}{s['crashes']:>8}{s['seconds']:>6}")
            for problem in s["problems"]:
                print(f"  PROBLEM {problem}")
            failed |= bool(s["crashes"] or s["problems"])
    print("drops by reason:")
    for fmt, s in figures.items():
        print(f"  {fmt}: " + ", ".join(f"{k} {v}" for k, v in s["dropped_by_reason"].items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"records": args.records, "files": args.files, "seed": args.seed,
                                    "formats": figures}, indent=2))
    print(f"{'FAILED' if failed else 'OK'}: 0 crashes expected, got {sum(s['crashes'] for s in figures.values())}; "
          f"figures in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
