"""DVC-native variants on a tiny copy of the real pipeline: `dvc exp run -S` and a preset run as
experiments, `dvc exp show` / `dvc exp diff` compare their metrics (not `!`), and
`dvc plots diff` puts two revisions' drift matrices side by side."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from test_dvc_pipeline import BIN, REPO, sh

STATS = ("in_distribution", "future", "decay")


def tiny_repo(root: Path) -> tuple[Path, dict]:
    """A git + DVC repo holding src/, dvc.yaml, the plot template and a tiny params.yaml."""
    work = root / "repo"
    work.mkdir()
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(REPO / name, work / name)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synthetic"].update(years=3, per_year=30)
    params["slicing"]["min_samples"] = 10
    params["train"].update(seeds=[0], epochs=1)
    params["models"] = {"MLP-S": {}}
    params["tracking"].update(log_models=False, register=False)
    params["audit"].update(permutations=10, mmd_samples=30)
    params["saliency"].update(pairs=[], eval_years=[])
    # units in the stage process: worker pools are tested elsewhere (tests/runtime, test_fresh_clone.py);
    # for units of seconds their start-up costs more CPU than it saves, and the suite is CPU-bound
    params["runtime"].update(workers=1)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(work / "src"), "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q", "-b", "main"], ["dvc", "init", "-q"]):
        sh(cmd, work, env)
    shutil.copytree(REPO / ".dvc" / "plots", work / ".dvc" / "plots")
    for cmd in (["driftmatrix", "data", "generate"], ["dvc", "add", "-q", "data"], ["dvc", "repro", "-q"],
                ["git", "add", "-A"], ["git", "commit", "-q", "-m", "baseline"]):
        sh(cmd, work, env)
    return work, env


def stdout(cmd: list[str], cwd: Path, env: dict) -> str:
    """Only the standard output (JSON) of a command that must succeed."""
    out = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    assert out.returncode == 0, f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}"
    return out.stdout


def metrics_of(entry: dict) -> dict:
    """The MLP-S metrics of one `dvc exp show --json` row; fails on a DVC error (shown as `!`)."""
    assert not entry.get("error"), entry["error"]
    data = entry["data"]["metrics"]["metrics/metrics.json"]
    assert not data.get("error"), data["error"]
    return data["data"]["MLP-S"]


@pytest.mark.slow
def test_experiments_compare_metrics_and_matrices(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    work, env = tiny_repo(tmp_path)
    assert "metrics/metrics.json" in sh(["git", "ls-files", "metrics"], work, env)  # git-tracked
    sh(["dvc", "exp", "run", "-q", "-S", "train.epochs=2", "-n", "epochs2"], work, env)
    preset = tmp_path / "preset.yaml"
    wanted = yaml.safe_load((work / "params.yaml").read_text())
    wanted["models"]["MLP-S"] = {"lr": 0.002}
    preset.write_text(yaml.safe_dump(wanted, sort_keys=False))
    sh([sys.executable, "-m", "driftmatrix.runtime.dvc", str(preset), "--", "-q", "-n", "preset"], work, env)

    rows = json.loads(stdout(["dvc", "exp", "show", "--json"], work, env))
    assert [r["rev"] for r in rows][0] == "workspace" and len(rows) == 2, [r["rev"] for r in rows]
    workspace, baseline = rows
    assert baseline["name"] == "main"
    exps = {e["name"]: e["revs"][0] for e in baseline.get("experiments") or []}
    assert set(exps) == {"epochs2", "preset"}
    for entry in (workspace, baseline, *exps.values()):
        m = metrics_of(entry)
        assert all(isinstance(m[k], (int, float)) for k in STATS), m
    assert exps["epochs2"]["data"]["params"]["params.yaml"]["data"]["train"]["epochs"] == 2
    assert exps["preset"]["data"]["params"]["params.yaml"]["data"]["models"] == {"MLP-S": {"lr": 0.002}}
    assert metrics_of(workspace) == metrics_of(exps["preset"])  # the last run is applied

    diff = json.loads(stdout(["dvc", "exp", "diff", "main", "epochs2", "--all", "--json"], work, env))
    changes = diff["metrics"]["metrics/metrics.json"]
    for k in STATS:
        assert all(isinstance(changes[f"MLP-S.{k}"][v], (int, float)) for v in ("old", "new")), changes

    plots = json.loads(stdout(["dvc", "plots", "diff", "main", "epochs2", "--json"], work, env))
    (entry,) = plots["data"]["metrics/matrices/MLP-S.csv"]
    assert entry["type"] == "vega" and entry["revisions"] == ["main", "epochs2"]
    cells = entry["content"]["data"]["values"]
    assert {c["rev"] for c in cells} == {"main", "epochs2"} and len(cells) == 2 * 3 * 3
    assert all(float(c["value"]) >= 0 for c in cells)
    assert entry["content"]["facet"]["column"]["field"] == "rev"  # the two matrices side by side
    sh(["dvc", "plots", "diff", "main", "epochs2", "-o", str(tmp_path / "plots")], work, env)
    page = (tmp_path / "plots" / "index.html").read_text()
    assert '"rev": "main"' in page and '"rev": "epochs2"' in page
