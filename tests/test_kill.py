"""Kill suite, short version: SIGKILL `dvc repro` (its whole process group) and a `driftmatrix train`
process at seeded random moments of a tiny run, restart each time, and check that nothing was lost
or doubled: matrices bit-identical to an uninterrupted run, one live FINISHED MLflow run and one
registered version per unit, no RUNNING run left. The full suite (20 kills of each kind, Ray
workers too) is `python bench/kill_suite.py`; both use its harness."""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def harness():
    spec = importlib.util.spec_from_file_location("kill_suite", REPO / "bench" / "kill_suite.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_killed_dvc_repro_and_train_restart_to_identical_matrices_and_one_run_per_unit(tmp_path, monkeypatch):
    if shutil.which("git") is None:
        pytest.skip("git not installed")
    ks = harness()
    # 100 epochs keep MLP-S's units running for about a second after the plan line (tiny data), so
    # the train kill below always lands mid-training
    cfg = ks.Config(models=("MLP-S", "Prior"), seeds=(0,), years=3, per_year=40, epochs=100)
    repo = ks.make_repo(tmp_path / "killed", cfg)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'reference.db'}")
    reference = ks.inprocess_reference(repo, tmp_path / "reference")

    rng = random.Random(14)
    log = tmp_path / "log.txt"
    trial = ks.Trial("short")
    # 1. `dvc repro` up to the training stages, killed inside a random stage, restarted
    first = rng.choice(["ingest", "slice", "validate", "embed"])
    ks.restart_loop(repo, trial, ["dvc", "repro", "validate", "embed"], [(ks.stage(first), rng.uniform(0.1, 1.0))],
                    log)
    # 2. `driftmatrix train -m MLP-S` (no DVC) killed at a random moment of its training (counted
    #    from its plan line), restarted
    ks.restart_loop(repo, trial, ["driftmatrix", "train", "-m", "MLP-S"],
                    [("units in the plan", rng.uniform(0.0, 0.1))], log)
    # 3. `dvc repro` killed inside two random later stages (the second always runs after the
    #    first: it depends on it), restarted each time; within a second of the stage's start, as a
    #    warm-started stage (driftmatrix.runtime.warmstart) of this tiny run lasts about that long
    later = rng.choice([("audit", "matrices"), ("train@Prior", "evaluate@Prior"), ("train@Prior", "matrices"),
                        ("evaluate@MLP-S", "matrices"), ("evaluate@Prior", "matrices")])
    ks.restart_loop(repo, trial, ["dvc", "repro"], [(ks.stage(s), rng.uniform(0.2, 1.0)) for s in later], log)

    assert not trial.failures, trial.failures
    assert trial.kills == 4 and trial.recoveries == 4, (trial.kills, trial.moments, ks.log_tail(log))
    # a killed `dvc repro` leaves its PID in .dvc/tmp/rwlock; the next one sees that the process is
    # gone and drops the entries that stand in its way itself (nothing for the user to do). Read
    # entries of dead PIDs may stay until a stage writes those paths: no live process holds a lock.
    assert "had been killed. Auto removed it from the lock file" in log.read_text()
    lock = json.loads((repo.work / ".dvc" / "tmp" / "rwlock").read_text())
    holders = [i["pid"] for infos in lock.get("read", {}).values() for i in infos]
    holders += [i["pid"] for i in lock.get("write", {}).values()]
    assert not [pid for pid in holders if _alive(pid)], lock
    result = ks.check(repo, reference)
    assert result.units == 2 * 1 * 3  # models x seeds x K
    assert result.identical, result.problems
    assert result.ok, result.problems

    # the checker has teeth: a duplicated run, a left-over RUNNING run and a changed cell are caught
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=repo.tracking_uri)
    live = client.search_runs([client.get_experiment_by_name("driftmatrix").experiment_id], "tags.kind = 'cutoff'")
    client.create_run(live[0].info.experiment_id, tags=live[0].data.tags)  # RUNNING, same unit
    dup = client.create_run(live[0].info.experiment_id, tags=live[0].data.tags)
    client.set_terminated(dup.info.run_id, "FINISHED")  # a second FINISHED run of that unit
    changed = {m: [[[v + 1e-12 if v is not None else v for v in row] for row in seed] for seed in values]
               for m, values in reference.items()}
    bad = ks.check(repo, changed)
    assert not bad.identical and bad.running == 1 and bad.per_unit(bad.runs) == "1..2"


def test_a_stage_run_left_running_by_a_killed_process_is_marked_killed(tmp_path, monkeypatch):
    import subprocess

    from mlflow.tracking import MlflowClient

    from driftmatrix.tracking import runs as tracking
    from driftmatrix.config import TrackingConfig

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp_id = tracking.configure(TrackingConfig(experiment="orphans"))
    client = MlflowClient()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    tags = {"kind": "matrices", "dataset": "d"}
    host = tracking.driver_id().rpartition(":")[0]
    killed = client.create_run(exp_id, tags={**tags, "driver": f"{host}:{gone}"}).info.run_id
    alive = client.create_run(exp_id, tags={**tags, "driver": tracking.driver_id()}).info.run_id  # running now
    remote = client.create_run(exp_id, tags={**tags, "driver": f"elsewhere:{gone}"}).info.run_id
    other = client.create_run(exp_id, tags={"kind": "audit", "dataset": "d", "driver": f"{host}:{gone}"}).info.run_id
    with tracking.stage_run(exp_id, "matrices · d", tags) as run:
        pass
    status = {r: client.get_run(r).info.status for r in (killed, alive, remote, other, run.info.run_id)}
    assert status == {killed: "KILLED", alive: "RUNNING", remote: "RUNNING", other: "RUNNING",
                      run.info.run_id: "FINISHED"}
    assert client.get_run(run.info.run_id).data.tags["driver"] == tracking.driver_id()
