"""The default experiment through a two-node Ray cluster and a PostgreSQL tracking server, against
the local executor and a local sqlite store (``make bench-cluster``).

    python bench/cluster.py [--models MLP-S Prior] [--epochs 10] [--years 20] [--seeds 0 1]

Both sides run the same pipeline in this process on the same data (``params.yaml``'s dataset and
settings; the options narrow it on a small machine) from a temporary folder:

- ``local + sqlite``: ``runtime.executor: local`` (workers: auto), ``sqlite:///`` store;
- ``cluster + server``: a head and a second node on loopback (``driftmatrix.runtime.cluster``, one CPU
  each here, token authentication on), ``runtime: {executor: ray, address: auto}``, and
  ``MLFLOW_TRACKING_URI`` at ``mlflow server`` over a throw-away PostgreSQL (``trackserver``).

Reported per side: training units per second (the train stages' wall time), the MLflow sync time
(every ``tracking.sync_units`` call of the evaluate stages: runs, models, versions, aliases) per
100 runs, the whole time to the matrices, and whether the matrices are bit-identical.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)


def side(raw: dict, folder: Path) -> dict:
    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import matrices
    from driftmatrix.tracking import runs as tracking
    from driftmatrix.stages import train as train_stage
    from driftmatrix.config import parse_params
    from testkit.pipeline import Paths, prepare

    folder.mkdir(parents=True)
    os.chdir(folder)
    params = parse_params(raw)
    paths = Paths(folder / "outputs")
    prepare(params, paths, generate=True)
    timing = {"train_s": 0.0, "sync_s": 0.0, "runs": 0, "units": 0}
    original = tracking.sync_units

    def timed(*args, **kw):
        t = time.perf_counter()
        out = original(*args, **kw)
        timing["sync_s"] += time.perf_counter() - t
        timing["runs"] += len(out)
        return out

    tracking.sync_units = timed
    started = time.perf_counter()
    try:
        for model in params.models:
            t = time.perf_counter()
            done = train_stage.run(params, model, paths.slices, paths.checkpoints, validation_dir=paths.validation,
                                features_dir=paths.features)
            timing["train_s"] += time.perf_counter() - t
            timing["units"] += len(done) if isinstance(done, list) else 0
            evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores, features_dir=paths.features)
        matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    finally:
        tracking.sync_units = original
        os.chdir(REPO)
    timing["total_s"] = time.perf_counter() - started
    timing["matrices"] = {p.stem: json.loads(p.read_text()).get("seed_values") for p in paths.matrices.glob("*.json")
                          if "seed_values" in json.loads(p.read_text())}
    return timing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="*", help="default: params.yaml's")
    ap.add_argument("--epochs", type=int)
    ap.add_argument("--years", type=int)
    ap.add_argument("--seeds", type=int, nargs="*")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from driftmatrix.runtime.cluster import LocalRayCluster
    from testkit.servers import MlflowServer, Postgres

    base = yaml.safe_load((REPO / "params.yaml").read_text())
    if args.models:
        base["models"] = {m: (base.get("models") or {}).get(m) or {} for m in args.models}
    if args.epochs:
        base["train"]["epochs"] = args.epochs
    if args.seeds:
        base["train"]["seeds"] = args.seeds
    if args.years:
        base.setdefault("synthetic", {})["years"] = args.years
    tmp = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    results = {}

    def raw_for(name: str, runtime: dict) -> dict:
        raw = json.loads(json.dumps(base))
        raw["dataset"]["path"] = str(tmp / "raw")  # one dataset for both sides
        raw["tracking"] = {**raw.get("tracking", {}), "uri": f"sqlite:///{tmp / name / 'mlflow.db'}",
                           "artifact_root": str(tmp / name / "mlruns"), "experiment": f"bench-{name}"}
        raw["runtime"] = {**raw.get("runtime", {}), **runtime}
        return raw

    os.environ.pop("MLFLOW_TRACKING_URI", None)
    results["local + sqlite"] = side(raw_for("local", {"executor": "local", "workers": "auto"}), tmp / "local")

    pg, cluster, server = Postgres(), LocalRayCluster(cpus=1), None
    try:
        t = time.perf_counter()
        pg.start()
        server = MlflowServer(pg.create_database("mlflow"), tmp / "artifacts", workers=2, log=tmp / "server.log").start()
        cluster.start_head()
        cluster.add_node("second")
        setup = time.perf_counter() - t
        os.environ["MLFLOW_TRACKING_URI"] = server.url
        with cluster.joined():
            results["cluster + server"] = side(raw_for("cluster", {"executor": "ray", "address": "auto"}),
                                               tmp / "cluster")
        results["cluster + server"]["setup_s"] = setup
    finally:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        import ray

        if ray.is_initialized():
            ray.shutdown()
        if server is not None:
            server.stop()
        cluster.stop()
        pg.stop()

    a, b = (results[k].pop("matrices") for k in ("local + sqlite", "cluster + server"))
    identical = a.keys() == b.keys() and all(np.array_equal(np.array(a[m], float), np.array(b[m], float)) for m in a)
    print(f"models {list(base['models'])}, seeds {base['train']['seeds']}, epochs {base['train']['epochs']}, "
          f"years {base.get('synthetic', {}).get('years')}; matrices bit-identical: {identical}")
    print(f"{'side':18} {'units':>6} {'train s':>8} {'units/s':>8} {'runs':>5} {'sync s':>7} {'s/100 runs':>10} "
          f"{'total s':>8}")
    for name, r in results.items():
        ups = r["units"] / r["train_s"] if r["train_s"] else float("nan")
        per100 = 100 * r["sync_s"] / r["runs"] if r["runs"] else float("nan")
        print(f"{name:18} {r['units']:6d} {r['train_s']:8.1f} {ups:8.2f} {r['runs']:5d} {r['sync_s']:7.1f} "
              f"{per100:10.1f} {r['total_s']:8.1f}")
    if "setup_s" in results["cluster + server"]:
        print(f"cluster + server set-up (PostgreSQL, mlflow server, two Ray nodes): "
              f"{results['cluster + server']['setup_s']:.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"identical": identical, **results}, indent=2))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
