"""Tabular scale benchmark: time to the matrices and peak memory on a large feature table.

    python bench/tabular.py [--rows 300000] [--periods 20] [--numeric 20] [--categorical 10]
                            [--models LogReg HistGBT LightGBM MLP-Tab] [--seeds 0 1] [--out DIR]

Generates a Parquet table (numeric features with drifting means and missing values, categorical
features with drifting shares and late categories, a binary label whose dependence on one feature
flips halfway), then runs ingest, slice, train and evaluate of every model (local executor,
``runtime.workers: auto``, one thread per unit) and the matrices stage in this process, in a
temporary folder with a temporary MLflow store (models not logged: the benchmark measures compute).
Prints one JSON record: rows, columns, periods, units, seconds per stage and per model, and the
peak resident memory of this process and of its worker processes (``ru_maxrss``, the largest single
process of each kind). Target (issue 23): 300,000 rows x 30 columns x 20 periods, 4 models x 2
seeds, under 15 minutes and 4 GB on 2 cores.
"""

from __future__ import annotations

import sys

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers


def make_table(path: Path, rows: int, periods: int, numeric: int, categorical: int, seed: int = 0) -> None:
    import pandas as pd

    rng = np.random.default_rng(seed)
    year = np.sort(rng.integers(0, periods, rows)) + 2000
    t = (year - 2000) / max(periods - 1, 1)
    data = {"id": [f"r{k}" for k in range(rows)], "year": year}
    logit = np.zeros(rows)
    for f in range(numeric):
        x = rng.normal(t * (f % 3) * 0.5, 1.0, rows)
        logit += x * (0.6 if f % 4 == 0 else 0.1) * (np.where(t > 0.5, -1.0, 1.0) if f == 0 else 1.0)
        x[rng.random(rows) < 0.03] = np.nan
        data[f"n{f:02d}"] = x
    for c in range(categorical):
        levels = 5 + 3 * c
        shares = rng.dirichlet(np.ones(levels))
        code = rng.choice(levels, rows, p=shares)
        late = (t > 0.7) & (rng.random(rows) < 0.2)
        effect = rng.normal(0, 0.5, levels + 1)
        logit += np.where(late, effect[-1], effect[code])
        values = np.array([f"c{c}_{k}" for k in range(levels)], dtype=object)[code]
        values[late] = f"c{c}_late"
        data[f"c{c:02d}"] = values
    data["y"] = (rng.random(rows) < 1 / (1 + np.exp(-logit))).astype(int)
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(data).to_parquet(path, index=False)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--periods", type=int, default=20)
    ap.add_argument("--numeric", type=int, default=20)
    ap.add_argument("--categorical", type=int, default=10)
    ap.add_argument("--models", nargs="+", default=["LogReg", "HistGBT", "LightGBM", "MLP-Tab"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    ap.add_argument("--out", type=Path, default=None, help="Keep the outputs here (default: a temporary folder).")
    args = ap.parse_args()

    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import matrices
    from driftmatrix.stages import train as train_stage
    from driftmatrix.config import parse_params
    from testkit.pipeline import Paths, prepare

    root = args.out or Path(tempfile.mkdtemp(prefix="tabular-bench-"))
    table = root / "raw" / "table.parquet"
    started = time.perf_counter()
    make_table(table, args.rows, args.periods, args.numeric, args.categorical)
    generated = time.perf_counter()
    params = parse_params({
        "dataset": {"name": "bench-table", "source": "table", "path": str(table), "task": "binary",
                    "options": {"timestamp": "year", "label": "y", "id": "id", "features": "auto",
                                "progress": False}},
        "slicing": {"min_samples": 20},
        "train": {"seeds": args.seeds, "device": "cpu"},
        "models": {m: {} for m in args.models},
        "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "bench-table",
                     "artifact_root": str(root / "mlruns"), "log_models": False},
        "runtime": {"executor": "local", "workers": "auto", "num_cpus": 1},
    })
    paths = Paths(root / "out")
    prepare(params, paths)
    prepared = time.perf_counter()
    per_model = {}
    for model in params.models:
        t0 = time.perf_counter()
        train_stage.run(params, model, paths.slices, paths.checkpoints, validation_dir=paths.validation,
                     features_dir=paths.features)
        t1 = time.perf_counter()
        evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores, features_dir=paths.features)
        per_model[model] = {"train_s": round(t1 - t0, 1), "evaluate_s": round(time.perf_counter() - t1, 1)}
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    done = time.perf_counter()
    summary = {m: json.loads((paths.matrices / f"{m}.json").read_text()) for m in params.models}
    record = {
        "rows": args.rows, "columns": args.numeric + args.categorical, "periods": args.periods,
        "models": args.models, "seeds": args.seeds, "units": len(args.models) * len(args.seeds) * args.periods,
        "seconds": {"generate": round(generated - started, 1), "ingest_and_slice": round(prepared - generated, 1),
                    "train_and_evaluate": round(done - prepared, 1), "time_to_matrices": round(done - generated, 1)},
        "per_model": per_model,
        "peak_rss_mb": {"stage_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
                        "largest_worker": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024)},
        "in_distribution": {m: round(float(np.nanmean(np.diag(np.array(d["values"], dtype=float)))), 2)
                            for m, d in summary.items()},
        "outputs": str(root),
    }
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
