"""Fixed costs every stage process pays before doing any work: interpreter, imports, MLflow store.

    python bench/fixed_costs.py [--repeats 3] [--top 15]

Each figure is the best of ``--repeats`` fresh processes (the floor; a loaded machine only adds).
Then ``python -X importtime`` of the heaviest stage import, with the top cumulative entries.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PROBES = {
    "python (bare interpreter)": "pass",
    "import driftmatrix.cli": "import driftmatrix.cli",
    "import numpy": "import numpy",
    "import pandas": "import pandas",
    "import torch": "import torch",
    "import mlflow": "import mlflow",
    "import torch + mlflow": "import torch, mlflow",
    "stage ingest imports": "import driftmatrix.stages.ingest",
    "stage slice imports": "import driftmatrix.data.slicing",
    "stage train imports (+torch, mlflow)": "import driftmatrix.stages.train, torch, mlflow",
    "stage evaluate imports (+torch, mlflow)": "import driftmatrix.learn.score, torch, mlflow",
    "stage matrices imports (+mlflow)": "import driftmatrix.stages.matrices, driftmatrix.reporting.html, mlflow",
}

STORE = """
import time, sys
t0 = time.perf_counter()
import mlflow
from driftmatrix.config import TrackingConfig
from driftmatrix.tracking import runs as tracking
t1 = time.perf_counter()
tracking.configure(TrackingConfig(uri=sys.argv[1], artifact_root=sys.argv[2], experiment="fixed-costs"))
t2 = time.perf_counter()
print(f"{t1 - t0:.3f} {t2 - t1:.3f}")
"""


def best_of(code: str, repeats: int, env: dict[str, str]) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=REPO)
        best = min(best, time.perf_counter() - t0)
    return best


def store_setup(repeats: int, env: dict[str, str]) -> tuple[float, float]:
    """Seconds of ``tracking.configure`` on a new sqlite store and on an existing one (best of)."""
    fresh, again = float("inf"), float("inf")
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            uri = f"sqlite:///{d}/mlflow.db"
            run_env = {**env, "MLFLOW_TRACKING_URI": uri}
            for first in (True, False):
                out = subprocess.run([sys.executable, "-c", STORE, uri, f"{d}/mlruns"], env=run_env,
                                     capture_output=True, text=True, check=True, cwd=REPO)
                secs = float(out.stdout.split()[-1])
                fresh, again = (min(fresh, secs), again) if first else (fresh, min(again, secs))
    return fresh, again


def importtime(code: str, env: dict[str, str], top: int) -> list[tuple[float, str]]:
    """Import time of ``code`` under ``-X importtime``, self time summed per root package
    (``sqlalchemy.orm.x`` counts to sqlalchemy), largest first: which libraries the time goes to."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], env=env, cwd=REPO,
                         capture_output=True, text=True, check=True)
    per_root: dict[str, float] = {}
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        self_us, _cum, name = line.removeprefix("import time:").split("|")
        root = name.strip().split(".")[0]
        per_root[root] = per_root.get(root, 0.0) + int(self_us) / 1e6
    return sorted(((v, k) for k, v in per_root.items()), reverse=True)[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    print(f"fixed costs, best of {args.repeats} fresh processes (load {'%.1f %.1f %.1f' % os.getloadavg()})")
    for label, code in PROBES.items():
        print(f"  {label:<42} {best_of(code, args.repeats, env):6.2f} s", flush=True)
    fresh, again = store_setup(args.repeats, env)
    print(f"  {'MLflow store set-up, new sqlite store':<42} {fresh:6.2f} s")
    print(f"  {'MLflow store set-up, existing store':<42} {again:6.2f} s")
    code = PROBES["stage train imports (+torch, mlflow)"]
    print(f"-X importtime of `{code}`, self time per package:")
    for secs, name in importtime(code, env, args.top):
        print(f"  {name:<42} {secs:6.2f} s")


if __name__ == "__main__":
    main()
