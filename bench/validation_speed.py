"""How long does the validation gate take on a 100,000-row dataset cut into 20 slices?

    python bench/validation_speed.py [--rows 100000] [--slices 20]

Builds a synthetic multiclass text table (slices folder per docs/CONTRACTS.md) in a temporary
folder, then times ``driftmatrix.stages.validate.run`` (GX import excluded and reported separately:
it is paid once per process).
"""

from __future__ import annotations

import sys

import argparse
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--slices", type=int, default=20)
    args = ap.parse_args()

    from driftmatrix.audit import gate

    from driftmatrix.stages import validate as validate_stage
    from testkit.slices import make_slices, write_slices
    from driftmatrix.config import parse_params

    t0 = time.perf_counter()
    import great_expectations  # noqa: F401

    t_import = time.perf_counter() - t0
    rows, manifest, _ = make_slices(k=args.slices, per_slice=args.rows // args.slices, task="multiclass",
                                    n_classes=4, label_shift=0.1, words_per_doc=12)
    params = parse_params({"models": {"MLP-S": {}}})
    with tempfile.TemporaryDirectory() as tmp:
        slices = write_slices(Path(tmp) / "slices", rows, manifest)
        t0 = time.perf_counter()
        summary = validate_stage.run(params, slices, Path(tmp) / "validation", echo=lambda _: None)
        seconds = time.perf_counter() - t0
    print(f"validated {len(rows):,} rows in {args.slices} slices: {seconds:.2f} s "
          f"({seconds / args.slices:.3f} s per slice; GX import {t_import:.2f} s once per process); "
          f"passed={summary['passed']}")


if __name__ == "__main__":
    main()
