"""`dvc repro` on a copy of the real pipeline with tiny parameters: idempotent, per-model reruns,
and keeping matrices current (a new period and a new seed) the way `make repro` does it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
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


def stale(status: str) -> set[str]:
    """The stages `dvc status` lists as changed."""
    return set(re.findall(r"^(\S+):\s*$", status, re.M))


def planned(output: str) -> dict[str, tuple[int, ...]]:
    """model -> (units in the plan, done, to train, cells in the plan, to score), from the stage logs."""
    units = {m: tuple(map(int, n)) for m, *n in re.findall(
        r"driftmatrix\.[\w.]+: (\S+): (\d+) units in the plan \(cumulative window\), (\d+) done, (\d+) to train",
        output)}
    cells = {m: tuple(map(int, n)) for m, *n in re.findall(
        r"driftmatrix\.[\w.]+: (\S+): (\d+) cells in the plan, (\d+) to score", output)}
    return {m: units.get(m, ()) + cells.get(m, ()) for m in units.keys() | cells.keys()}


def unit_runs(uri: str) -> dict[str, tuple[str, str, str]]:
    """run id -> (model, status, lifecycle stage) of every unit run (tag kind=cutoff), deleted ones too."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name("driftmatrix")
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL,
                              max_results=1000)
    return {r.info.run_id: (r.data.tags["model"], r.info.status, r.info.lifecycle_stage) for r in runs}


def seed_values(work: Path, model: str) -> np.ndarray:
    doc = json.loads((work / "outputs" / "matrices" / f"{model}.json").read_text())
    return np.array(doc["seed_values"], dtype=float)  # (seeds, K, K); JSON floats round-trip exactly


def make_repro(work: Path, env: dict) -> str:
    """What `make repro` runs after install: regenerate the built-in data, track it, reproduce."""
    return "".join(sh(cmd, work, env) for cmd in (["driftmatrix", "data", "generate"], ["dvc", "add", "-q", "data"],
                                                  ["dvc", "repro"]))


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
    params["tracking"].update(log_models=False, register=False)
    params["audit"].update(permutations=20, mmd_samples=50)
    params["saliency"].update(pairs=[{"model": "CNN-S", "cutoff": 1950}], eval_years=[1952], n_images=20)
    # units in the stage process: worker pools are tested elsewhere (tests/runtime, test_fresh_clone.py);
    # for units of seconds their start-up costs more CPU than it saves, and the suite is CPU-bound
    params["runtime"].update(workers=1)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "MLFLOW_TRACKING_URI": uri, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["driftmatrix", "data", "generate"],
                ["dvc", "add", "-q", "data"]):
        sh(cmd, work, env)

    first = sh(["dvc", "repro"], work, env)
    assert {"ingest", "slice", "validate", "audit", "embed", "train@MLP-S", "train@CNN-S", "evaluate@MLP-S",
            "evaluate@CNN-S", "matrices", "estimates", "report", "saliency"} <= ran(first)
    assert (work / "metrics" / "estimates.json").exists() and (work / "outputs" / "estimates" / "backtest.json").exists()
    assert (work / "metrics" / "metrics.json").exists()  # git-tracked, for dvc exp show
    assert (work / "outputs" / "report" / "plots" / "CNN-S.png").exists()
    assert "Drift matrices" in (work / "outputs" / "report" / "report.html").read_text()

    assert ran(sh(["dvc", "repro"], work, env)) == set()  # nothing changed: nothing runs

    params["models"]["MLP-S"] = {"epochs": 2}
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    third = ran(sh(["dvc", "repro"], work, env))
    assert {"train@MLP-S", "evaluate@MLP-S"} <= third
    assert not {"train@CNN-S", "evaluate@CNN-S", "ingest", "slice"} & third

    # a new seed alone touches no data stage: `dvc status` lists only the stages that read train.seeds
    models, K = list(params["models"]), params["synthetic"]["years"]
    params["train"]["seeds"] = [0, 1]
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    changed = stale(sh(["dvc", "status"], work, env))
    assert {f"{s}@{m}" for s in ("train", "evaluate") for m in models} <= changed
    assert not {"ingest", "slice", "validate", "audit", "embed"} & changed  # same data: DVC would skip them

    # a new period and the new seed in one `make repro` (as after raising synthetic.years): per model,
    # seed 0 trains one new unit and scores its old checkpoints on the new column only, seed 1 trains
    # K+1 units; every old cell is bit-identical and no old run changes
    before, runs0 = {m: seed_values(work, m) for m in models}, unit_runs(uri)
    params["synthetic"]["years"] = K + 1
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    grown = make_repro(work, env)
    # units: 2(K+1) planned, K done, K+2 trained; cells: seed 0's 2K+1 new ones and seed 1's (K+1)^2
    assert planned(grown) == {m: (2 * (K + 1), K, K + 2, 2 * (K + 1) ** 2, 2 * K + 1 + (K + 1) ** 2) for m in models}
    for m in models:
        two = seed_values(work, m)
        assert two.shape == (2, K + 1, K + 1) and np.isfinite(two).all()
        assert np.array_equal(two[:1, :K, :K], before[m])  # bit for bit, not approximately
    runs1 = unit_runs(uri)
    assert {r: runs1[r] for r in runs0} == runs0  # no run deleted, restored or otherwise changed
    new = [runs1[r] for r in set(runs1) - set(runs0)]
    # seed 0's new unit and seed 1's K+1 units, a run each
    assert sorted(new) == sorted((m, "FINISHED", "active") for m in models for _ in range(K + 2))


def test_a_torn_dvc_lock_is_moved_aside_and_a_valid_one_kept(tmp_path):
    """DVC rewrites dvc.lock in place; a `dvc repro` killed mid-write leaves a file DVC refuses.
    `driftmatrix repair-lock` (run by `make repro` first) moves only such a file aside."""
    from driftmatrix.runtime.dvc import repair_dvc_lock

    lock = tmp_path / "dvc.lock"
    assert repair_dvc_lock(lock) is None  # absent
    text = yaml.safe_dump({"schema": "2.0", "stages": {
        "ingest": {"cmd": "driftmatrix ingest", "outs": [{"path": "outputs/ingested", "hash": "md5",
                                                          "md5": "0" * 32 + ".dir", "size": 10, "nfiles": 2}]},
        "slice": {"cmd": "driftmatrix slice", "deps": [{"path": "outputs/ingested", "hash": "md5",
                                                        "md5": "0" * 32 + ".dir", "size": 10, "nfiles": 2}]}}},
        sort_keys=False)
    lock.write_text(text)
    assert repair_dvc_lock(lock) is None and lock.read_text() == text
    torn = text[:text.index("cmd: driftmatrix slice")]  # killed after "slice:" was written
    lock.write_text(torn)
    aside = repair_dvc_lock(lock)
    assert aside == tmp_path / "dvc.lock.torn" and aside.read_text() == torn and not lock.exists()


@pytest.mark.parametrize("torn", ["", '{"read": {"outputs/slices": [{"pid": 12, "cmd": "dvc rep'])
def test_a_torn_dvc_rwlock_is_moved_aside_and_a_valid_one_kept(tmp_path, torn):
    """DVC's table of stage locks (.dvc/tmp/rwlock), torn by a kill mid-write, stops every later
    `dvc repro` ("JSON structure is corrupted"); `driftmatrix repair-lock` moves only such a file aside."""
    rwlock = tmp_path / ".dvc" / "tmp" / "rwlock"
    rwlock.parent.mkdir(parents=True)
    valid = '{"read": {}, "write": {"outputs/slices": {"pid": 12, "cmd": "dvc repro"}}}'
    rwlock.write_text(valid)
    run = lambda: subprocess.run([sys.executable, "-m", "driftmatrix", "repair-lock"], cwd=tmp_path,  # noqa: E731
                                 capture_output=True, text=True, check=True).stdout
    assert run() == "" and rwlock.read_text() == valid
    rwlock.write_text(torn)
    assert "rwlock (DVC's stage locks) was torn" in run()
    assert not rwlock.exists() and (rwlock.parent / "rwlock.torn").read_text() == torn
