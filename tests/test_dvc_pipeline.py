"""`dvc repro` on a copy of the real pipeline with tiny parameters: idempotent, and per-model reruns."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def sh(cmd: list[str], cwd: Path, env: dict) -> str:
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


def ran(output: str) -> set[str]:
    return set(re.findall(r"Running stage '([^']+)'", output))


@pytest.mark.slow
def test_dvc_repro_is_idempotent_and_reruns_only_the_changed_model(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dvc.yaml", work / "dvc.yaml")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synthetic"].update(years=3, per_year=40)
    params["slicing"]["min_samples"] = 10
    params["train"].update(seeds=[0], epochs=1)
    params["models"] = {"MLP-S": {}, "CNN-S": {}}
    params["tracking"].update(log_models=False)
    params["audit"].update(permutations=20, mmd_samples=50)
    params["saliency"].update(pairs=[{"model": "CNN-S", "cutoff": 1950}], eval_years=[1952], n_images=20)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["driftmatrix", "data", "generate"],
                ["dvc", "add", "-q", "data"]):
        sh(cmd, work, env)

    first = sh(["dvc", "repro"], work, env)
    assert {"ingest", "slice", "validate", "audit", "embed", "train@MLP-S", "train@CNN-S", "evaluate@MLP-S",
            "evaluate@CNN-S", "matrices", "saliency"} <= ran(first)
    assert (work / "metrics" / "metrics.json").exists()  # git-tracked, for dvc exp show

    assert ran(sh(["dvc", "repro"], work, env)) == set()  # nothing changed: nothing runs

    params["models"]["MLP-S"] = {"epochs": 2}
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    third = ran(sh(["dvc", "repro"], work, env))
    assert {"train@MLP-S", "evaluate@MLP-S"} <= third
    assert not {"train@CNN-S", "evaluate@CNN-S", "ingest", "slice"} & third
