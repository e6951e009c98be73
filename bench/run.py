"""`make bench`: time-to-matrix and throughput of the drift-matrix pipeline, plus the side benchmarks.

    python bench/run.py [--only NAME ...] [--ingest-gb 1]

Sections (all in temporary folders with a temporary MLflow store, never the repo's):

- ``startup``: wall time of ``driftmatrix --help`` (lazy imports keep it short).
- ``anchor``: bench/anchor.py, 1 seed: ours (five CLI processes per model, from the raw PNGs of
  ../shared/anchor) against the authors' own CLI when their checkout and venv are available
  (bench/authors.py), run alternately; prints per-stage times, medians, ratios and ID/future
  accuracy of both. Figures are measured in the run, never quoted.
- ``anchor5``: the same on 5 seeds, fp32 and bf16 on our side (ID mean +- std per side, bf16 vs
  fp32 per cell). Long (CNN-S: about 5x the 1-seed time per side).
- ``default``: the built-in default experiment of ``params.yaml`` (models x seeds x cutoffs) in one
  process: time-to-matrix, training and evaluation throughput (samples/s) per model.
- ``incremental``: appending one period to the default through plain ``dvc repro`` (full run
  at K, then K+1): units trained, cells scored, train + evaluate seconds as a ratio of the full
  run's, per-stage seconds (``bench/incremental.py``; ``--incremental-args`` narrows it, e.g.
  ``"--models MLP-S Prior"`` on a small or shared machine).
- ``validation``, ``ingest``, ``text``: the scripts beside this one, when present.
- ``tabular``: bench/tabular.py, 300,000 rows x 30 columns x 20 periods, LogReg, HistGBT, LightGBM
  and MLP-Tab x 2 seeds: time to the matrices and peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def sh(args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(args, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def temp_params(tmp: Path, base: dict, **sections) -> Path:
    raw = {**base, **sections}
    raw["dataset"] = {**base["dataset"], "path": str(tmp / "raw")}
    raw["tracking"] = {**base["tracking"], "uri": f"sqlite:///{tmp / 'mlflow.db'}",
                       "artifact_root": str(tmp / "mlruns")}
    path = tmp / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def bench_startup(env: dict[str, str]) -> None:
    secs = min(sh([sys.executable, "-m", "driftmatrix", "--help"], env) for _ in range(3))
    print(f"startup: `driftmatrix --help` {secs:.2f} s")


def bench_default(base: dict) -> None:
    from driftmatrix.config import parse_params
    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import matrices
    from driftmatrix import config
    from driftmatrix.stages import train as train_stage
    from testkit.pipeline import Paths, prepare

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        params = parse_params(yaml.safe_load(temp_params(tmp, base).read_text()))
        os.environ["MLFLOW_TRACKING_URI"] = params.tracking.uri
        paths = Paths(tmp / "out")
        t0 = time.perf_counter()
        prepare(params, paths, generate=True)
        t_prep = time.perf_counter() - t0
        rows = []
        for model in params.models:
            t1 = time.perf_counter()
            done = train_stage.run(params, model, paths.slices, paths.checkpoints, paths.root / "validation",
                                paths.features)
            t2 = time.perf_counter()
            scored = evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores, paths.features)
            t3 = time.perf_counter()
            cfg = config.effective_config(params, model)
            samples = sum(r["train_rows"] for r in done) * cfg.epochs
            pure = sum(r["seconds"] for r in done)
            evaluated = sum(sum(r["n_eval"]) for r in scored)
            rows.append((model, t2 - t1, samples / max(pure, 1e-9), t3 - t2, evaluated / max(t3 - t2, 1e-9), len(done)))
        t4 = time.perf_counter()
        matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
        t_mat = time.perf_counter() - t4
        total = time.perf_counter() - t0
        print(f"default experiment ({len(params.models)} models x {len(params.train.seeds)} seeds x "
              f"{params.synthetic.years} cutoffs): {total:.1f} s to matrix "
              f"(prepare {t_prep:.1f} s, matrices+report {t_mat:.1f} s)")
        for model, t_train, tput, t_eval, eval_tput, units in rows:
            print(f"  {model:<8} train {t_train:6.1f} s for {units} runs ({tput:,.0f} samples/s incl. tracking), "
                  f"evaluate {t_eval:5.1f} s ({eval_tput:,.0f} scored samples/s)")
        metrics = json.loads((paths.root / "metrics.json").read_text())
        for model, m in metrics.items():
            print(f"  {model:<8} ID {m['in_distribution']:.1f}  future {m['future']:.1f}  decay {m['decay']:.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="*", default=None,
                    help="startup default incremental anchor anchor5 validation ingest text tabular")
    ap.add_argument("--ingest-gb", type=float, default=1.0)
    ap.add_argument("--incremental-args", default="", help="extra arguments of bench/incremental.py")
    args = ap.parse_args()
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    want = set(args.only or ["startup", "default", "incremental", "anchor", "anchor5", "validation", "ingest", "text",
                             "tabular"])
    if "startup" in want:
        bench_startup(env)
    if "default" in want:
        bench_default(base)
    extra = {"incremental": ["incremental.py", *shlex.split(args.incremental_args)],
             "anchor": ["anchor.py", "--seeds", "1"],
             "anchor5": ["anchor.py", "--seeds", "5", "--precision", "fp32", "bf16"],
             "validation": ["validation_speed.py"], "ingest": ["ingest_large.py", "--size-gb", str(args.ingest_gb)],
             "text": ["text.py"], "tabular": ["tabular.py"]}
    for name, cmd in extra.items():
        if name in want and (HERE / cmd[0]).exists():
            print(f"--- {name} ({cmd[0]})", flush=True)
            subprocess.run([sys.executable, str(HERE / cmd[0]), *cmd[1:]], check=True, cwd=REPO)


if __name__ == "__main__":
    main()
