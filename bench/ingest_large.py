"""Benchmark: ingest a multi-GB Amazon-style JSON-lines file with the Amazon reader.

    python bench/ingest_large.py                 # 2 GB, paper defaults (300,000 sample, proportional)
    python bench/ingest_large.py --size-gb 1 --allocation equal

Writes the file into a temporary folder (removed afterwards unless --keep), ingests it, and prints
the file size, records read, wall time, records/s and peak RSS (resource.getrusage). Peak RSS must
stay flat as --size-gb grows: it is bounded by the kept sample, not by the input.
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("good great bad poor fine excellent cheap sturdy broke returned love hate works quality size "
         "colour fits small large battery charger screen fabric smell price shipping arrived late "
         "recommend would again never always product seller package box instructions easy hard").split()
START_MS = 1_325_376_000_000   # 2012-01-01: about a sixth of the records fall before the 2014 scope
SPAN_MS = 12 * 365 * 86_400_000
RATINGS = [1, 2, 3, 4, 5, 5, 5, 5, 4, 5]  # skewed towards five stars, like the real data


def texts(n: int, rng: random.Random) -> list[str]:
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 160))) for _ in range(n)]


def generate(path: Path, size_bytes: int, seed: int = 0) -> int:
    """Write Amazon Reviews 2023-style lines until ``size_bytes``; returns the number of lines."""
    rng = random.Random(seed)
    pool = texts(4096, rng)
    titles = texts(256, rng)
    lines = 0
    written = 0
    with open(path, "w", buffering=1 << 22) as fh:
        while written < size_bytes:
            chunk = []
            for _ in range(10_000):
                i = lines
                lines += 1
                if i % 200_003 == 17:
                    chunk.append('{"rating": 5, "text": "truncated\n')  # an unparseable line now and then
                    continue
                ts = START_MS + (i * 7_919_993_171) % SPAN_MS
                chunk.append(
                    f'{{"rating": {RATINGS[(i * 31) % 10]}.0, "title": "{titles[i % 256][:60]}", '
                    f'"text": "{pool[(i * 2654435761) % 4096]}", "images": [], "asin": "B{i % 900_001:09d}", '
                    f'"parent_asin": "B{i % 900_001:09d}", "user_id": "U{i:012X}", "timestamp": {ts}, '
                    f'"helpful_vote": {i % 7}, "verified_purchase": true}}\n')
            block = "".join(chunk)
            fh.write(block)
            written += len(block)
    return lines


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-gb", type=float, default=2.0)
    ap.add_argument("--sample-size", type=int, default=300_000)
    ap.add_argument("--allocation", default="proportional", choices=("proportional", "equal"))
    ap.add_argument("--dir", type=Path, default=None, help="Where to write the file (default: a temp dir).")
    ap.add_argument("--keep", action="store_true", help="Keep the generated file.")
    args = ap.parse_args(argv)

    from driftmatrix.data.sources.amazon import read_amazon

    work = Path(tempfile.mkdtemp(prefix="driftmatrix-bench-", dir=args.dir))
    try:
        path = work / "Bench_Category.jsonl"
        t0 = time.perf_counter()
        lines = generate(path, int(args.size_gb * 1e9))
        gen_s = time.perf_counter() - t0
        size = path.stat().st_size
        print(f"generated {path.name}: {size / 1e9:.2f} GB, {lines:,} lines in {gen_s:.1f} s", flush=True)
        rss_before = peak_rss_mb()
        t0 = time.perf_counter()
        res = read_amazon(work, sample_size=args.sample_size, allocation=args.allocation, progress=False)
        secs = time.perf_counter() - t0
        r = res.report
        passes = 2 if any("second pass" in n for n in r.notes) else 1
        print(r.summary())
        print(f"ingest: {r.read:,} records read ({passes} pass(es)), {r.kept:,} kept, {secs:.1f} s, "
              f"{r.read / secs:,.0f} records/s, {size / 1e6 / secs:.0f} MB/s of input")
        print(f"peak RSS: {peak_rss_mb():.0f} MB (before ingest {rss_before:.0f} MB)")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print(f"kept {work}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
