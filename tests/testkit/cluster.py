"""Helpers of the cluster and tracking-server tests: tiny projects in folders of their own, run
as separate processes (each one a stage driver, as under ``dvc repro``), and what they left."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tests" / "pipeline_proc.py"


def tiny_raw(folder: Path, *, name: str = "tiny", models=None, years: int = 4, per_year: int = 40,
             seeds=(0, 1), epochs: int = 1, runtime=None, experiment: str = "tiny", register: bool = True,
             scenario: str = "fading-cue", data_seed: int = 0, **train) -> dict:
    """A tiny project's params (conftest.make_tiny_params, as a file other processes read)."""
    raw = {
        "dataset": {"name": name, "source": "yearbook", "path": str(folder / "raw"), "task": "binary"},
        "synthetic": {"scenario": scenario, "seed": data_seed, "first_year": 1950, "years": years,
                      "per_year": per_year},
        "slicing": {"min_samples": 10},
        "train": {"seeds": list(seeds), "epochs": epochs, "batch_size": 32, **train},
        "models": models or {"MLP-S": {}},
        "tracking": {"uri": f"sqlite:///{folder / 'mlflow.db'}", "experiment": experiment,
                     "artifact_root": str(folder / "mlruns"), "log_models": register, "register": register},
    }
    if runtime:
        raw["runtime"] = runtime
    return raw


def project(folder: Path, raw: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return folder


def env_with(extra: dict | None = None, tracking_uri: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "RAY_ADDRESS")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)
    if tracking_uri:
        env["MLFLOW_TRACKING_URI"] = tracking_uri
    env.update(extra or {})
    return env


def start(folder: Path, *, upto: str = "all", env: dict | None = None) -> subprocess.Popen:
    log = open(folder / f"pipeline-{upto}.log", "ab")
    return subprocess.Popen([sys.executable, str(SCRIPT), "params.yaml", "--upto", upto], cwd=folder,
                            stdout=log, stderr=subprocess.STDOUT, env=env or env_with())


def finish(proc: subprocess.Popen, folder: Path, upto: str = "all", timeout: float = 600) -> str:
    rc = proc.wait(timeout=timeout)
    text = (folder / f"pipeline-{upto}.log").read_text(errors="replace")
    assert rc == 0, f"pipeline in {folder} failed ({rc}):\n{text[-4000:]}"
    return text


def run(folder: Path, **kw) -> str:
    upto = kw.get("upto", "all")
    return finish(start(folder, **kw), folder, upto)


def matrices(folder: Path) -> dict:
    out = {}
    for path in sorted((folder / "outputs" / "matrices").glob("*.json")):
        doc = json.loads(path.read_text())
        if "seed_values" in doc:
            out[path.stem] = np.array(doc["seed_values"], dtype=float)
    return out


def records(folder: Path, model: str = "MLP-S") -> list[dict]:
    return [json.loads(p.read_text()) for p in (folder / "outputs" / "checkpoints" / model).glob("*/unit.json")]
