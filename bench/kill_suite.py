"""Kill suite: SIGKILL the pipeline at random moments, restart, and check that nothing was lost.

    python bench/kill_suite.py [--kills 20] [--seed 0] [--only dvc,train,ray] [--out FILE]

Three scenarios on a tiny copy of the real pipeline (a temporary git + DVC repo holding ``src/``,
``dvc.yaml`` and a small ``params.yaml``, with a temporary MLflow store), each against an
uninterrupted reference run of the same configuration:

- ``dvc``: ``dvc repro`` runs in its own process group; the whole group is SIGKILLed at seeded
  random moments spread over the reference run time (one trial = a few kills, then a run to the
  end), and restarted after each kill.
- ``train``: the stages before training run once, then ``driftmatrix train -m <model>`` (no DVC)
  is SIGKILLed at random moments after it starts its units (counted from its plan log line) and
  restarted; ``dvc repro`` finishes the rest.
- ``ray``: as ``train`` with ``runtime.executor: ray``; a busy Ray worker (a ``ray::`` process
  under the driver) is SIGKILLed at random moments while the driver lives on. Ray retries its unit.

Every trial is checked the same way: the matrices (``outputs/matrices/<model>.json``
``seed_values``) are bit-identical to the reference, every unit of the plan (models x seeds x K)
has exactly one live FINISHED MLflow run and exactly one registered version, and no RUNNING run
is left live. A restart that fails (a non-zero exit we did not cause) is a failed recovery.

Prints one row per scenario and writes the figures as JSON (default outputs/bench/kill.json);
exits 1 if any check failed. ``tests/test_kill.py`` runs a short version of the same harness.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import yaml
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # testkit: the test-only pipeline helpers

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Config:
    """A tiny experiment: what the copied ``params.yaml`` holds."""

    models: tuple[str, ...] = ("MLP-S", "Prior")
    seeds: tuple[int, ...] = (0,)
    years: int = 3
    per_year: int = 40
    epochs: int = 1
    executor: str = "local"  # runtime.executor
    max_retries: int = 3     # runtime.max_retries (Ray)


@dataclass
class Repo:
    """A temporary git + DVC copy of the pipeline and the environment its commands run in."""

    root: Path
    work: Path
    env: dict[str, str]
    cfg: Config

    @property
    def tracking_uri(self) -> str:
        return self.env["MLFLOW_TRACKING_URI"]

    def run(self, cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run(cmd, cwd=self.work, env=self.env, capture_output=True, text=True)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
        return out


def params_for(cfg: Config) -> dict[str, Any]:
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synthetic"].update(years=cfg.years, per_year=cfg.per_year)
    params["slicing"]["min_samples"] = 10
    params["train"].update(seeds=list(cfg.seeds), epochs=cfg.epochs)
    params["models"] = {m: {} for m in cfg.models}
    params["tracking"].update(log_models=True, register=True)
    params["audit"].update(permutations=10, mmd_samples=30)
    params["saliency"].update(pairs=[], eval_years=[])
    params["embed"]["progress"] = False
    params["runtime"] = {"executor": cfg.executor, "max_retries": cfg.max_retries}
    return params


def make_repo(root: Path, cfg: Config) -> Repo:
    """A git + DVC repo under ``root`` with the tiny params, the data generated and ``dvc add``-ed."""
    work = root / "repo"
    work.mkdir(parents=True)
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("dvc.yaml", ".gitignore"):
        shutil.copy(REPO / name, work / name)
    (work / "params.yaml").write_text(yaml.safe_dump(params_for(cfg), sort_keys=False))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(work / "src"),
           "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}", "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONUNBUFFERED": "1"}
    env.pop("DRIFTMATRIX_KILL_ONCE", None)
    repo = Repo(root, work, env, cfg)
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"], ["driftmatrix", "data", "generate"],
                ["dvc", "add", "-q", "data"]):
        repo.run(cmd)
    shutil.copytree(REPO / ".dvc" / "plots", work / ".dvc" / "plots", dirs_exist_ok=True)
    return repo


# --- processes ---------------------------------------------------------------------------------
@dataclass
class Outcome:
    """One start of a command: whether we killed its process group, and its exit code otherwise."""

    killed: bool
    rc: int | None
    seconds: float


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group ``pgid``."""
    import psutil

    out = []
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return out


def kill_group(pgid: int, timeout: float = 30.0) -> None:
    """SIGKILL every process of the group and wait until none is left alive."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)


def start(repo: Repo, cmd: list[str], log_path: Path) -> subprocess.Popen:
    """``cmd`` in the repo, in its own process group (session), output appended to ``log_path``."""
    with open(log_path, "ab") as log:
        log.write(f"\n$ {' '.join(cmd)}\n".encode())
        log.flush()
        return subprocess.Popen(cmd, cwd=repo.work, env=repo.env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


def run_until(repo: Repo, cmd: list[str], after: float | None, log_path: Path,
              during: Callable[[subprocess.Popen], None] | None = None, mark: str | None = None) -> Outcome:
    """Run ``cmd``; ``after`` seconds in, SIGKILL its whole process group (``None``: run to the
    end). With ``mark``, the seconds count from the moment this run's output first shows that
    text (e.g. DVC's ``Running stage 'audit'``), so a kill lands inside a chosen step whatever
    the machine's load. ``during(proc)``, when given, runs while the command does."""
    offset = log_path.stat().st_size if log_path.exists() else 0
    t0 = time.monotonic()
    proc = start(repo, cmd, log_path)
    killed = False
    try:
        if during is not None:
            during(proc)
        if mark is not None:
            needle = mark.encode()
            while proc.poll() is None:
                with open(log_path, "rb") as log:
                    log.seek(offset)
                    if needle in log.read():
                        break
                time.sleep(0.05)
            t0 = time.monotonic()
        if after is not None:
            try:
                proc.wait(timeout=max(after - (time.monotonic() - t0), 0.01))
            except subprocess.TimeoutExpired:
                kill_group(proc.pid)
                killed = True
        rc = proc.wait()
    finally:
        if proc.poll() is None:  # an error in this harness: never leave the group running
            kill_group(proc.pid)
            proc.wait()
        kill_group(proc.pid)  # anything the command left behind in its group
    return Outcome(killed, None if killed else rc, time.monotonic() - t0)


def log_tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


# --- checks ------------------------------------------------------------------------------------
@dataclass
class Check:
    identical: bool
    units: int                      # models x seeds x K
    runs: Counter = field(default_factory=Counter)       # live FINISHED runs per unit key
    versions: Counter = field(default_factory=Counter)   # registered versions per unit key
    running: int = 0                # live RUNNING runs (of any kind)
    stray_runs: int = 0             # live FINISHED runs of keys outside the plan
    stray_versions: int = 0         # versions of keys outside the plan (or without a key)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def per_unit(self, counter: Counter) -> str:
        """``1`` when every unit has exactly one, else the spread (``0..2``)."""
        values = [counter.get(k, 0) for k in self.keys] or [0]
        lo, hi = min(values), max(values)
        return str(lo) if lo == hi else f"{lo}..{hi}"

    keys: tuple[str, ...] = ()


def matrices(repo: Repo) -> dict[str, list]:
    out = {}
    for model in repo.cfg.models:
        path = repo.work / "outputs" / "matrices" / f"{model}.json"
        out[model] = json.loads(path.read_text())["seed_values"] if path.exists() else None
    return out


def plan_keys(repo: Repo) -> dict[str, list[str]]:
    """Unit keys of the current plan per model (driftmatrix's own planner on the repo's slices)."""
    from driftmatrix.config import parse_params
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.plan import model_plan

    params = parse_params(yaml.safe_load((repo.work / "params.yaml").read_text()))
    manifest = json.loads((repo.work / "outputs" / "slices" / "manifest.json").read_text())
    ckpts = repo.work / "outputs" / "checkpoints"
    return {m: [u.key for u in model_plan(params, m, manifest,
                                          recorded_environment(params, m, ckpts, resolve_if_missing=True)).units]
            for m in repo.cfg.models}


def inprocess_reference(repo: Repo, out: Path) -> dict[str, list]:
    """The matrices of the repo's configuration computed in this process, from the same raw data,
    into ``out`` (MLflow: whatever ``MLFLOW_TRACKING_URI`` names; set it to a scratch store)."""
    from driftmatrix.stages import matrices as stage
    from driftmatrix.config import parse_params
    from testkit.pipeline import Paths, prepare, train_and_evaluate

    raw = yaml.safe_load((repo.work / "params.yaml").read_text())
    raw["dataset"]["path"] = str(repo.work / raw["dataset"]["path"])
    raw["tracking"].update(log_models=False, register=False)
    params = parse_params(raw)
    paths = Paths(out)
    prepare(params, paths)
    train_and_evaluate(params, paths)
    stage.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    return {m: json.loads((paths.matrices / f"{m}.json").read_text())["seed_values"] for m in repo.cfg.models}


def check(repo: Repo, reference: dict[str, list]) -> Check:
    """Matrices identical to ``reference``; one live FINISHED run and one version per unit."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    got = matrices(repo)
    identical = all(got[m] is not None and got[m] == reference[m] for m in repo.cfg.models)
    keys = plan_keys(repo)
    every = [k for m in repo.cfg.models for k in keys[m]]
    result = Check(identical, len(every), keys=tuple(every))
    if not identical:
        result.problems.append("matrices differ from the reference: " + ", ".join(
            m for m in repo.cfg.models if got[m] != reference[m]))
    client = MlflowClient(tracking_uri=repo.tracking_uri)
    params = yaml.safe_load((repo.work / "params.yaml").read_text())
    dataset, experiment = params["dataset"]["name"], params["tracking"]["experiment"]
    exp = client.get_experiment_by_name(experiment)
    runs = [] if exp is None else client.search_runs([exp.experiment_id], "", run_view_type=ViewType.ACTIVE_ONLY,
                                                      max_results=10_000)
    for r in runs:  # every live run (units, audit, matrices): none may be left RUNNING
        if r.info.status == "RUNNING":
            result.running += 1
        elif r.info.status == "FINISHED" and r.data.tags.get("kind") == "cutoff":
            key = r.data.tags.get("unit_key")
            if key in every:
                result.runs[key] += 1
            else:
                result.stray_runs += 1
    for model in repo.cfg.models:
        for v in client.search_model_versions(f"name = '{dataset}.{model}'", max_results=10_000):
            key = v.tags.get("unit_key")
            if key in keys[model]:
                result.versions[key] += 1
            else:
                result.stray_versions += 1
    bad_runs = [k for k in every if result.runs[k] != 1]
    bad_versions = [k for k in every if result.versions[k] != 1]
    if bad_runs:
        result.problems.append(f"{len(bad_runs)} units without exactly one live FINISHED run "
                               f"(runs per unit {result.per_unit(result.runs)})")
    if bad_versions:
        result.problems.append(f"{len(bad_versions)} units without exactly one registered version "
                               f"(versions per unit {result.per_unit(result.versions)})")
    if result.running:
        result.problems.append(f"{result.running} RUNNING runs left live")
    if result.stray_runs or result.stray_versions:
        result.problems.append(f"{result.stray_runs} live runs and {result.stray_versions} versions outside the plan")
    return result


# --- scenarios ---------------------------------------------------------------------------------
@dataclass
class Trial:
    """One trial: the kills that landed, the restarts that recovered, and the final check."""

    scenario: str
    kills: int = 0
    recoveries: int = 0
    failures: list[str] = field(default_factory=list)
    check: Check | None = None
    seconds: float = 0.0
    moments: list[Any] = field(default_factory=list)
    repairs: list[str] = field(default_factory=list)  # dvc.lock files torn by a kill and moved aside

    @property
    def ok(self) -> bool:
        return not self.failures and self.check is not None and self.check.ok


@dataclass(frozen=True)
class Reference:
    """An uninterrupted run: its matrices, the whole run's duration and the train process's."""

    matrices: dict[str, list]
    seconds: float
    train_seconds: float


def reference_run(root: Path, cfg: Config, model: str = "MLP-S") -> Reference:
    """The stages before training (``dvc repro validate embed``), ``driftmatrix train -m <model>``
    on its own (timed: the train scenarios kill within it), then ``dvc repro`` for the rest."""
    repo = make_repo(root, cfg)
    t0 = time.monotonic()
    repo.run(["dvc", "repro", "validate", "embed"])
    t1 = time.monotonic()
    repo.run(["driftmatrix", "train", "-m", model])
    t2 = time.monotonic()
    repo.run(["dvc", "repro"])
    ref = matrices(repo)
    if any(v is None for v in ref.values()):
        raise RuntimeError(f"reference run wrote no matrices under {repo.work}")
    result = check(repo, ref)
    if not result.ok:
        raise RuntimeError(f"the reference run itself fails the checks: {result.problems}")
    return Reference(ref, time.monotonic() - t0, t2 - t1)


def spread(rng: random.Random, n: int, total: float, low: float = 0.5) -> list[float]:
    """``n`` sorted random moments in (low, total) as gaps from one to the next (a restart
    resumes roughly where the killed run was, so each gap is the next run's time to its kill)."""
    moments = sorted(rng.uniform(low, max(total, low + 1.0)) for _ in range(n))
    return [b - a for a, b in zip([0.0] + moments, moments)]


def timed(gaps: list[float]) -> list[Moment]:
    return [(None, g) for g in gaps]


Moment = tuple  # (mark or None, seconds): when to kill, counted from the output's mark or the start


UNITS_MARK = "units in the plan"  # training's log line just before its first unit


def stage(name: str) -> str:
    """The mark of a DVC stage's start in ``dvc repro``'s output."""
    return f"Running stage '{name}'"


def restart_loop(repo: Repo, trial: Trial, cmd: list[str], moments: list[Moment], log_path: Path,
                 min_gap: float = 0.3) -> None:
    """Start ``cmd`` and SIGKILL its process group at each moment, restarting after each kill;
    then run it to the end. A restart after a kill that exits non-zero on its own is a failed
    recovery; a start that finishes before its kill moment ends the kills (nothing left to kill)."""
    for mark, gap in moments:
        out = run_until(repo, cmd, max(gap, min_gap), log_path, mark=mark)
        if out.rc not in (None, 0):
            trial.failures.append(f"{' '.join(cmd)} exited {out.rc} after a kill:\n{log_tail(log_path)}")
            return
        if not out.killed:
            break
        trial.kills += 1
        trial.moments.append(f"{mark!r}+{gap:.1f}s" if mark else round(max(gap, min_gap), 2))
        if cmd[:2] == ["dvc", "repro"]:  # restarted as `make repro` does: a torn dvc.lock moved aside
            repaired = repo.run(["driftmatrix", "repair-lock"]).stdout.strip()
            if repaired:
                trial.repairs.append(repaired)
                with open(log_path, "a") as log:
                    log.write(repaired + "\n")
    final = run_until(repo, cmd, None, log_path)
    if final.rc != 0:
        trial.failures.append(f"{' '.join(cmd)} did not recover (exit {final.rc}):\n{log_tail(log_path)}")
    else:
        trial.recoveries = trial.kills


def dvc_trial(root: Path, cfg: Config, reference: dict[str, list], moments: list[Moment]) -> Trial:
    """Kill ``dvc repro`` (its whole process group) at each moment; restart; check."""
    trial, t0 = Trial("dvc repro"), time.monotonic()
    repo = make_repo(root, cfg)
    restart_loop(repo, trial, ["dvc", "repro"], moments, root / "log.txt")
    trial.check = check(repo, reference) if not trial.failures else None
    trial.seconds = time.monotonic() - t0
    return trial


def train_trial(root: Path, cfg: Config, reference: dict, gaps: list[float], model: str = "MLP-S") -> Trial:
    """Kill a ``driftmatrix train -m <model>`` process after each gap (seconds from the moment it
    starts its units); restart; finish with dvc repro."""
    trial, t0 = Trial("driftmatrix train"), time.monotonic()
    repo = make_repo(root, cfg)
    repo.run(["dvc", "repro", "validate", "embed"])
    log_path = root / "log.txt"
    # seconds count from the plan line, printed once imports and data loading are done: the kills
    # land while units train and checkpoints are written, not during Python's start-up
    restart_loop(repo, trial, ["driftmatrix", "train", "-m", model], [(UNITS_MARK, g) for g in gaps], log_path)
    return finish(repo, trial, reference, log_path, "the train kills", t0)


def finish(repo: Repo, trial: Trial, reference: dict, log_path: Path, after: str, t0: float) -> Trial:
    """Unless the trial already failed, ``dvc repro`` to the end; then check it against the reference."""
    if not trial.failures:
        out = run_until(repo, ["dvc", "repro"], None, log_path)
        if out.rc != 0:
            trial.failures.append(f"dvc repro after {after} failed (exit {out.rc}):\n{log_tail(log_path)}")
    trial.check = check(repo, reference) if not trial.failures else None
    trial.seconds = time.monotonic() - t0
    return trial


def busy_ray_workers(pid: int, task: str) -> list[Any]:
    """Ray worker processes under ``pid`` running a task named ``task`` (their title is
    ``ray::<task>`` while they do; ``ray::IDLE`` between tasks). Ray's own processes (raylet,
    dashboard agent, GCS) are never chosen: killing those is a node failure, not a worker's."""
    import psutil

    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for p in children:
        try:
            title = " ".join(p.cmdline()) or p.name()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if title.startswith(f"ray::{task}"):
            out.append(p)
    return out


class RayWorkerKiller:
    """At each gap (from the driver's start), SIGKILL one busy Ray worker of the driver, waiting up
    to ``patience`` s for one to be busy; the driver itself lives on. ``moments``: when each died."""

    def __init__(self, rng: random.Random, gaps: list[float], task: str, patience: float = 120.0):
        self.rng, self.gaps, self.task, self.patience = rng, gaps, task, patience
        self.moments: list[float] = []

    def __call__(self, proc: subprocess.Popen) -> None:
        t0, at = time.monotonic(), 0.0
        for gap in self.gaps:
            at += gap
            while proc.poll() is None and time.monotonic() - t0 < at:
                time.sleep(0.05)
            deadline = time.monotonic() + self.patience
            while proc.poll() is None and time.monotonic() < deadline:
                workers = busy_ray_workers(proc.pid, self.task)
                if workers:
                    try:
                        self.rng.choice(workers).kill()
                    except Exception:  # noqa: BLE001 - it finished meanwhile: try again
                        continue
                    self.moments.append(round(time.monotonic() - t0, 2))
                    break
                time.sleep(0.02)
            if proc.poll() is not None:
                return


def ray_trial(root: Path, cfg: Config, reference: dict, gaps: list[float], rng: random.Random,
              model: str = "MLP-S") -> Trial:
    """Kill busy Ray workers of one ``driftmatrix train`` (``runtime.executor: ray``) at the gaps;
    Ray retries their units; the driver must finish on its own; ``dvc repro`` finishes the rest."""
    trial, t0 = Trial("ray worker"), time.monotonic()
    repo = make_repo(root, replace(cfg, executor="ray", max_retries=len(gaps) + 1))
    repo.run(["dvc", "repro", "validate", "embed"])
    log_path = root / "log.txt"
    killer = RayWorkerKiller(rng, gaps, f"train {model}")  # the executor names tasks '<stage> <model>'
    out = run_until(repo, ["driftmatrix", "train", "-m", model], None, log_path, during=killer)
    trial.kills, trial.moments = len(killer.moments), killer.moments
    if out.rc != 0:
        trial.failures.append(f"train exited {out.rc} after {trial.kills} worker kills:\n{log_tail(log_path)}")
    else:
        trial.recoveries = trial.kills
    return finish(repo, trial, reference, log_path, "the worker kills", t0)


# --- the suite ---------------------------------------------------------------------------------
SCENARIOS = ("dvc", "train", "ray")


def table(trials: list[Trial]) -> str:
    """One row per scenario: kills, recoveries, identical matrices, runs / versions per unit."""
    head = (f"{'scenario':<18}{'trials':>7}{'kills':>6}{'recovered':>10}{'identical':>10}{'units':>6}"
            f"{'runs/unit':>10}{'versions/unit':>14}{'RUNNING':>8}{'stray':>6}{'torn lock':>10}{'s':>7}")
    lines = [head]
    for name in dict.fromkeys(t.scenario for t in trials):
        group = [t for t in trials if t.scenario == name]
        checks = [t.check for t in group if t.check is not None]
        runs = sorted({c.per_unit(c.runs) for c in checks}) or ["-"]
        versions = sorted({c.per_unit(c.versions) for c in checks}) or ["-"]
        identical = "yes" if len(checks) == len(group) and all(c.identical for c in checks) else "NO"
        lines.append(f"{name:<18}{len(group):>7}{sum(t.kills for t in group):>6}"
                     f"{sum(t.recoveries for t in group):>10}{identical:>10}"
                     f"{'/'.join(sorted({str(c.units) for c in checks})) or '-':>6}{','.join(runs):>10}"
                     f"{','.join(versions):>14}{sum(c.running for c in checks):>8}"
                     f"{sum(c.stray_runs + c.stray_versions for c in checks):>6}"
                     f"{sum(len(t.repairs) for t in group):>10}{sum(t.seconds for t in group):>7.0f}")
    return "\n".join(lines)


def as_json(trial: Trial) -> dict[str, Any]:
    c = trial.check
    return {"scenario": trial.scenario, "kills": trial.kills, "recoveries": trial.recoveries,
            "dvc_lock_repairs": trial.repairs,
            "moments_s": trial.moments, "seconds": round(trial.seconds, 1), "ok": trial.ok,
            "failures": [f[:4000] for f in trial.failures],
            "check": None if c is None else {"identical": c.identical, "units": c.units,
                                             "runs_per_unit": c.per_unit(c.runs),
                                             "versions_per_unit": c.per_unit(c.versions), "running": c.running,
                                             "stray_runs": c.stray_runs, "stray_versions": c.stray_versions,
                                             "problems": c.problems}}


def scenario_trials(name: str, kills: int, per_trial: int, root: Path, cfg: Config, ref: Reference,
                    rng: random.Random, echo: Callable[[str], None] = print) -> list[Trial]:
    """Trials of one scenario until ``kills`` kills have landed (a trial whose run finished before
    its kill moments lands fewer; ten trials in a row without a kill stop the scenario)."""
    trials, landed, dry = [], 0, 0
    while landed < kills and dry < 10:
        n = min(per_trial, kills - landed)
        trial_root = root / f"{name}-{len(trials):02d}"
        trial_root.mkdir(parents=True)
        if name == "dvc":
            trial = dvc_trial(trial_root, cfg, ref.matrices, timed(spread(rng, n, ref.seconds)))
        elif name == "train":
            trial = train_trial(trial_root, cfg, ref.matrices, spread(rng, n, ref.train_seconds))
        else:
            trial = ray_trial(trial_root, cfg, ref.matrices, spread(rng, n, ref.train_seconds, low=0.0), rng)
        trials.append(trial)
        landed += trial.kills
        dry = dry + 1 if trial.kills == 0 else 0
        echo(f"  {name} trial {len(trials)}: {trial.kills} kills at {trial.moments} s, "
             f"{'ok' if trial.ok else 'FAILED: ' + '; '.join((trial.check.problems if trial.check else []) + [f.splitlines()[0] for f in trial.failures])}"
             f" ({trial.seconds:.0f} s)")
        if trial.ok:
            shutil.rmtree(trial_root, ignore_errors=True)
    return trials


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kills", type=int, default=20, help="kills per scenario")
    ap.add_argument("--per-trial", type=int, default=4, help="kills per trial before it runs to the end")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated: " + ",".join(SCENARIOS))
    ap.add_argument("--epochs", type=int, default=2, help="epochs of the tiny models (longer: more mid-unit kills)")
    ap.add_argument("--per-year", type=int, default=60)
    ap.add_argument("--years", type=int, default=4)
    ap.add_argument("--keep", type=Path, default=None, help="keep trial folders here (default: failed ones "
                                                            "in a temporary folder that is printed)")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/kill.json"))
    args = ap.parse_args()
    chosen = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(chosen) - set(SCENARIOS)
    if unknown:
        ap.error(f"--only: unknown scenarios {sorted(unknown)}; expected some of {list(SCENARIOS)}")
    cfg = Config(years=args.years, per_year=args.per_year, epochs=args.epochs)
    rng = random.Random(args.seed)
    root = args.keep or Path(tempfile.mkdtemp(prefix="driftmatrix-kill-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"kill suite: {cfg}, work in {root}", flush=True)
    ref = reference_run(root / "reference", cfg)
    print(f"reference: {ref.seconds:.0f} s in all, train {ref.train_seconds:.0f} s", flush=True)
    trials: list[Trial] = []
    for name in chosen:
        trials += scenario_trials(name, args.kills, args.per_trial, root, cfg, ref, rng,
                                  echo=lambda line: print(line, flush=True))
    print(table(trials))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"config": {**cfg.__dict__}, "reference_s": round(ref.seconds, 1),
                                    "train_s": round(ref.train_seconds, 1), "seed": args.seed,
                                    "trials": [as_json(t) for t in trials]}, indent=2))
    failed = [t for t in trials if not t.ok]
    if not failed and args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    elif failed:
        print(f"{len(failed)} failed trials kept under {root}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
