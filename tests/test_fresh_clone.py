"""A fresh clone's `make repro` leaves a clean tree: the README's promise, run for real.

The clone gets the committed code and the built-in data exactly as `make repro` makes it (so the
committed data.dvc must match); only training is shortened (1 epoch, 1 seed) and committed in the
clone, so that the run takes minutes. Afterwards `dvc status` must be up to date, `git status`
must show nothing but `dvc.lock` and `metrics/`, and nothing may print a traceback.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 1500) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def repro(tmp_path_factory):
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("needs git and a git checkout of the project")
    venv = Path(sys.prefix)
    clone = tmp_path_factory.mktemp("fresh") / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    os.symlink(venv, clone / ".venv")  # a link, which .gitignore's `.venv/` (a folder) does not match:
    with open(clone / ".git" / "info" / "exclude", "a") as f:  # a real install is a folder
        f.write(".venv\n")
    params = yaml.safe_load((clone / "params.yaml").read_text())
    params["train"].update(seeds=[0], epochs=1)
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["commit", "-qam", "shorter training for the test"], cwd=clone, check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "DVC_"))}
    env["PYTHONPATH"] = str(clone / "src")  # the clone's code, not the checkout the venv points at
    # -o: the venv is installed already (its stamp is older than the clone's fresh files)
    done = _run(["make", "-o", ".venv/.installed", "repro"], clone, env)
    return clone, env, done


def test_make_repro_succeeds_without_a_traceback(repro):
    _, _, done = repro
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "Results: outputs/report/report.html" in out
    for bad in ("Traceback", "Exception ignored"):
        assert bad not in out, out[max(0, out.find(bad) - 2000):out.find(bad) + 2000]


def test_dvc_status_is_up_to_date_after_it(repro):
    clone, env, done = repro
    assert done.returncode == 0
    # what a user does next: import the package (bytecode lands beside the stage dependencies)
    subprocess.run([sys.executable, "-c", "import driftmatrix.features.inputs, driftmatrix.analysis.summary"],
                   cwd=clone, env=env, check=True)
    status = _run(["dvc", "status"], clone, {**env, "PATH": f"{clone / '.venv' / 'bin'}:{env['PATH']}"}, 300)
    assert status.returncode == 0, status.stderr
    assert "Data and pipelines are up to date." in status.stdout, status.stdout


def test_git_status_shows_only_the_lock_and_metrics(repro):
    clone, _, done = repro
    assert done.returncode == 0
    lines = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=clone,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    paths = [line[3:] for line in lines]
    assert "dvc.lock" in paths and any(p.startswith("metrics/") for p in paths)  # the run left its record
    assert [p for p in paths if p != "dvc.lock" and not p.startswith("metrics/")] == []
