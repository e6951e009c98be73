"""The default experiment's train + evaluate with the local executor, then the Ray one, on this machine.

    python bench/ray_vs_local.py [--epochs N] [--years N] [--per-year N] [--seeds 0 1] [--models ...]
                                 [--cpus 2] [--num-cpus 1]

Defaults are params.yaml's (20 years x 60 portraits, its models, 2 seeds, 10 epochs). Both executors
run the same units from the same slices (prepared once) in fresh output folders, each with its own
temporary MLflow store. Printed per executor and stage: units, wall seconds, units/s; for training
also the seconds the units themselves took (inside the worker) and the overhead per unit:

    overhead per unit = (wall x slots - sum of unit seconds) / units

i.e. the slot time not spent training (scheduling, moving weights, the driver writing checkpoints,
worker start and context building, the idle tail). Slots: 1 for local (one unit at a time), the Ray
CPUs / num_cpus for Ray; a unit computes with floor(runtime.num_cpus) torch threads on
both. Ray is started and its workers warmed (torch imported) before timing; both are printed apart
(``dvc repro`` pays them once per stage process; building each model's context in a worker is in
the figures). The MLflow sync after training is timed apart from the units. Finally the matrices of
both runs are compared for bit-identity. The figures move with the machine's load (printed).
"""

from __future__ import annotations

import sys

import argparse
import json
import logging
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers

REPO = Path(__file__).resolve().parents[1]


def load_average() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return "uptime unavailable"


def params_for(base: dict, tmp: Path, args, executor: str):
    from driftmatrix.config import parse_params

    raw = json.loads(json.dumps(base))
    raw["dataset"]["path"] = str(tmp / "raw")
    raw["synthetic"].update({k: v for k, v in (("years", args.years), ("per_year", args.per_year)) if v})
    raw["train"].update({k: v for k, v in (("epochs", args.epochs), ("seeds", args.seeds)) if v})
    if args.models:
        raw["models"] = {m: {} for m in args.models}
    raw["tracking"].update(uri=f"sqlite:///{tmp / executor / 'mlflow.db'}",
                           artifact_root=str(tmp / executor / "mlruns"))
    raw["runtime"] = {**(raw.get("runtime") or {}), "executor": executor, "address": None}
    if args.num_cpus is not None:
        raw["runtime"]["num_cpus"] = args.num_cpus
    return parse_params(raw)


def warm(_ctx, item: int) -> int:
    """Start a Ray worker and import what units import (held a moment so each CPU gets one)."""
    import driftmatrix.stages.train  # noqa: F401
    import torch  # noqa: F401

    time.sleep(1.0)
    return item


class Nothing:
    def build(self):
        return None


def run_one(params, slices: Path, out: Path, executor) -> dict:
    """Train and evaluate every model through ``executor``; timings per stage."""
    from driftmatrix.units import store as checkpoints
    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.tracking import runs as tracking
    from driftmatrix.stages import train as train_stage
    from driftmatrix.units import experiment
    tracking.configure(params.tracking)  # the store is created before timing
    t = {"train_units": 0, "train_wall": 0.0, "unit_seconds": 0.0, "sync": 0.0, "eval_units": 0, "eval_wall": 0.0}
    for model in params.models:
        exp = experiment.Experiment(params, model, slices, out / "features")
        store = checkpoints.CheckpointStore(out / "checkpoints", model)
        todo = [u for u in exp.plan.units if not store.done(u.key)]
        recipe = experiment.ExperimentRecipe.of(params, model, slices, out / "features")
        t0 = time.perf_counter()
        done = train_stage.train_units(exp, store, todo, executor, recipe)
        t1 = time.perf_counter()
        evaluation.sync(params, exp, store)
        t2 = time.perf_counter()
        t["train_units"] += len(done)
        t["train_wall"] += t1 - t0
        t["unit_seconds"] += sum(r["seconds"] for r in done)
        t["sync"] += t2 - t1
        t["eval_units"] += len(exp.plan.units)
        t3 = time.perf_counter()
        evaluation.run(params, model, slices, out / "checkpoints", out / "scores", features_dir=out / "features")
        t["eval_wall"] += time.perf_counter() - t3  # scoring + MLflow row logging
    return t


def matrices_of(params, slices: Path, out: Path) -> dict[str, np.ndarray]:
    from driftmatrix.stages import matrices

    matrices.run(params, out / "scores", out / "matrices", slices_dir=slices, metrics_path=out / "metrics.json",
                 plots_dir=out / "plots")
    return {m: np.array(json.loads((out / "matrices" / f"{m}.json").read_text())["seed_values"], dtype=float)
            for m in params.models}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--years", type=int)
    ap.add_argument("--per-year", type=int)
    ap.add_argument("--seeds", type=int, nargs="*")
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray (default 2)")
    ap.add_argument("--num-cpus", type=float, help="runtime.num_cpus for both executors (default: params.yaml's); "
                    "1 on 2 CPUs runs two Ray units at once")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    from driftmatrix.runtime.executor import LocalExecutor, RayExecutor, start_ray
    from driftmatrix.config import runtime_config, unit_threads
    from testkit.pipeline import Paths, prepare

    base = yaml.safe_load((REPO / "params.yaml").read_text())
    print(f"load before: {load_average()}")
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        params = params_for(base, tmp, args, "local")
        units = len(params.train.seeds) * params.synthetic.years
        print(f"experiment: {params.synthetic.years} years x {params.synthetic.per_year} portraits, "
              f"models {list(params.models)}, seeds {list(params.train.seeds)}, {params.train.epochs} epochs: "
              f"up to {units} units per model and stage; runtime.num_cpus {runtime_config(params).num_cpus}")
        paths = Paths(tmp / "prepared")
        prepare(params, paths, generate=True)
        results, mats = {}, {}
        for name in ("local", "ray"):
            p = params_for(base, tmp, args, name)
            cfg = runtime_config(p)
            if name == "ray":
                t0 = time.perf_counter()
                start_ray(cfg, num_cpus=args.cpus)
                t1 = time.perf_counter()
                executor = RayExecutor(cfg, progress=False)
                slots = executor.slots(cfg.resources_for(None))
                list(executor.map(warm, Nothing(), range(args.cpus), label="warm-up"))
                print(f"ray start ({args.cpus} CPUs) {t1 - t0:.1f} s, worker start + imports "
                      f"{time.perf_counter() - t1 - 1:.1f} s (neither in the figures below)")
            else:
                executor, slots = LocalExecutor(cfg, progress=False), 1
            out = tmp / name
            t = run_one(p, paths.slices, out, executor)
            mats[name] = matrices_of(p, paths.slices, out)
            t["slots"] = slots
            results[name] = t
            threads = unit_threads(cfg.resources_for(None))
            print(f"\n{name} ({slots} unit{'s' if slots > 1 else ''} at a time, {threads} torch thread"
                  f"{'s' if threads > 1 else ''} each):")
            over = (t["train_wall"] * slots - t["unit_seconds"]) / max(t["train_units"], 1)
            print(f"  train     {t['train_units']:4d} units  {t['train_wall']:7.1f} s  "
                  f"{t['train_units'] / t['train_wall']:6.2f} units/s  (units' own time {t['unit_seconds']:.1f} s, "
                  f"overhead {1000 * over:.0f} ms per unit)  + MLflow sync {t['sync']:.1f} s")
            print(f"  evaluate  {t['eval_units']:4d} units  {t['eval_wall']:7.1f} s  "
                  f"{t['eval_units'] / t['eval_wall']:6.2f} units/s  (incl. MLflow row logging)")
            total = t["train_wall"] + t["sync"] + t["eval_wall"]
            print(f"  train + evaluate: {total:.1f} s wall")
        lo, ra = results["local"], results["ray"]
        tot = {k: r["train_wall"] + r["sync"] + r["eval_wall"] for k, r in results.items()}
        print(f"\nray vs local: train {lo['train_wall'] / ra['train_wall']:.2f}x, evaluate "
              f"{lo['eval_wall'] / ra['eval_wall']:.2f}x, train + evaluate {tot['local'] / tot['ray']:.2f}x")
        same = {m: np.array_equal(mats["local"][m], mats["ray"][m], equal_nan=True) for m in params.models}
        print("matrices bit-identical: " + ", ".join(f"{m} {'yes' if ok else 'NO'}" for m, ok in same.items()))
    print(f"load after: {load_average()}")
    if not all(same.values()):
        raise SystemExit("matrices differ between executors")


if __name__ == "__main__":
    main()
