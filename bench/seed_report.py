"""Seed statistics from saved runs: ID/future mean +- std per side, and bf16 vs fp32 per cell.

    python bench/seed_report.py --ours OURS.json [OURS.json ...] [--authors A0.json A1.json ...]

``--ours``: files written by ``bench/anchor.py --json``; ``--authors``: files written by
``bench/authors.py --json`` (one seed each). For long seed studies run apart from the timed
comparison (e.g. single-threaded in the background), whose wall times do not count.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from anchor import cell_agreement, mean_std, per_seed, welch_t  # noqa: E402


def as_array(nested) -> np.ndarray:
    return np.array([[np.nan if v is None else v for v in row] for row in nested], dtype=float) \
        if np.ndim(nested) == 2 else np.stack([as_array(m) for m in nested])


def our_stacks(paths: list[Path]) -> dict[tuple[str, str], np.ndarray]:
    """(model, precision) -> S x K x K: the first repeat of each file, files' seeds stacked (one
    file per seed lane, or one file holding all seeds)."""
    parts: dict[tuple[str, str], list[np.ndarray]] = {}
    for p in paths:
        for r in json.loads(p.read_text())["ours"]:
            if r.get("repeat", 0) == 0 and r.get("seed_values") is not None:
                parts.setdefault((r["model"], r["precision"]), []).append(as_array(r["seed_values"]))
    return {k: np.concatenate(v) for k, v in parts.items()}


def their_stacks(paths: list[Path]) -> dict[str, np.ndarray]:
    by_model: dict[str, dict[int, np.ndarray]] = {}
    for p in paths:
        d = json.loads(p.read_text())
        by_model.setdefault(d["model"], {})[d["seed"]] = as_array(d["matrix"])
    return {m: np.stack([seeds[s] for s in sorted(seeds)]) for m, seeds in by_model.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", type=Path, nargs="+", required=True)
    ap.add_argument("--authors", type=Path, nargs="*", default=[])
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
    from driftmatrix.analysis.summary import future, in_distribution

    ours, theirs = our_stacks(args.ours), their_stacks(args.authors)
    for model in sorted({m for m, _ in ours} | set(theirs)):
        if model in theirs:
            st = theirs[model]
            print(f"{model:<6} authors      ID {mean_std(per_seed(st, in_distribution))}  "
                  f"future {mean_std(per_seed(st, future))}")
        for (m, prec), st in sorted(ours.items()):
            if m != model:
                continue
            ids = per_seed(st, in_distribution)
            print(f"{model:<6} ours {prec:<7} ID {mean_std(ids)}  future {mean_std(per_seed(st, future))}")
            if model in theirs:
                th_ids = per_seed(theirs[model], in_distribution)
                t = welch_t(th_ids, ids)
                diff = np.mean(th_ids) - np.mean(ids)
                print(f"{'':<6}   ID authors - ours ({prec}): {diff:+.1f} points"
                      + (f", Welch t = {t:.2f}" if t is not None else "")
                      + f"; per seed authors {', '.join(f'{x:.1f}' for x in th_ids)}"
                      + f" | ours {', '.join(f'{x:.1f}' for x in ids)}")
        f32, b16 = ours.get((model, "fp32")), ours.get((model, "bf16"))
        if f32 is not None and b16 is not None and f32.shape[0] > 1:
            a = cell_agreement(f32, b16)
            print(f"{'':<6}   bf16 vs fp32 ({a['cells']} cells): {100 * a['within_std']:.0f}% within fp32's seed std "
                  f"of the cell, {100 * a['within_2std']:.0f}% within 2 std (expected if equal: "
                  f"{100 * a['expected_within_std_if_same']:.0f}% within 1 std); |diff| mean {a['mean_abs_diff']:.2f}, "
                  f"max {a['max_abs_diff']:.2f}; median cell std {a['median_std']:.2f}")


if __name__ == "__main__":
    main()
