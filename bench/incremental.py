"""Appending one period to a K-period experiment through plain `dvc repro`: what it costs.

    python bench/incremental.py [--years K] [--models M ...] [--seeds S ...] [--epochs E]
                                [--json out.json] [--keep DIR]

In a temporary copy of the pipeline (src/, dvc.yaml, params.yaml as shipped unless the flags
narrow it; its own git + DVC repo and a temporary MLflow store, never the repo's):

1. ``driftmatrix data generate`` + ``dvc add data`` + ``dvc repro``: the full run at K periods;
2. ``synthetic.years`` K -> K+1, the same three commands again: the append.

Every stage command is wrapped (``_timed.py`` in the copy) so the wall seconds of each stage
are recorded; what is left of a ``dvc repro``'s wall time is DVC's own work (hashing, caching,
checkouts). From the stage logs: units trained and cells scored per model. Reported: the
append's train + evaluate seconds as a ratio of the full run's (issue 13 target: at most
2.5/K), its end-to-end ``dvc repro`` seconds, per-stage seconds of both runs, a split of each
train/evaluate stage into start-up (process, imports, data and plan), work, and the MLflow sync
after it (from the log timestamps, to the second), and the load average (the machine is shared).
It also checks the append's promise: old cells bit-identical, exactly models x seeds new runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent

#: Wraps a stage command: runs it, appends {"stage", "start", "end", "cpu", "rc"} to $DM_STAGE_TIMES
#: (cpu: user + system seconds of the command, which a shared machine inflates far less than wall).
TIMER = """import json, os, resource, subprocess, sys, time
start = time.time()
rc = subprocess.call(sys.argv[2:], env={**os.environ, "DRIFTMATRIX_WARM": "0"})  # its CPU and RSS are its own
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(os.environ["DM_STAGE_TIMES"], "a") as f:
    f.write(json.dumps({"stage": sys.argv[1], "start": start, "end": time.time(),
                        "cpu": ru.ru_utime + ru.ru_stime, "rc": rc}) + "\\n")
sys.exit(rc)
"""

UNITS = re.compile(r"(\d\d:\d\d:\d\d) INFO driftmatrix\.training: (\S+): (\d+) units in the plan \(\S+ window\), "
                   r"(\d+) done, (\d+) to train")
CELLS = re.compile(r"(\d\d:\d\d:\d\d) INFO driftmatrix\.evaluation: (\S+): (\d+) cells in the plan, (\d+) to score")
STAMP = re.compile(r"^(\d\d:\d\d:\d\d) \w+ (\S+): (.*)$")


def load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed_dvc_yaml(text: str) -> str:
    """dvc.yaml with every stage command run through ``_timed.py <stage name>``."""
    doc = yaml.safe_load(text)
    for name, stage in doc["stages"].items():
        if "foreach" in stage:
            stage["do"]["cmd"] = f"python _timed.py {name}@${{key}} {stage['do']['cmd']}"
        else:
            stage["cmd"] = f"python _timed.py {name} {stage['cmd']}"
    return yaml.safe_dump(doc, sort_keys=False)


def setup(work: Path, years: int | None, models: list[str] | None, seeds: list[int] | None,
          epochs: int | None) -> dict:
    """The copy of the pipeline; returns its params."""
    work.mkdir(parents=True)
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    (work / "dvc.yaml").write_text(timed_dvc_yaml((REPO / "dvc.yaml").read_text()))
    (work / "_timed.py").write_text(TIMER)
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    if years:
        params["synthetic"]["years"] = years
    if models:
        params["models"] = {m: params["models"].get(m) or {} for m in models}
    # saliency pairs of the models kept, on years that exist (both lists empty turns it off)
    last = params["synthetic"]["first_year"] + params["synthetic"]["years"] - 1
    sal = params["saliency"]
    sal["pairs"] = [p for p in sal["pairs"] if p["model"] in params["models"] and int(p["cutoff"]) <= last]
    sal["eval_years"] = [y for y in sal["eval_years"] if int(y) <= last] if sal["pairs"] else []
    if not sal["eval_years"]:
        sal["pairs"] = []
    if seeds:
        params["train"]["seeds"] = seeds
    if epochs:
        params["train"]["epochs"] = epochs
    write_params(work, params)
    return params


def write_params(work: Path, params: dict) -> None:
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def sh(cmd: list[str], work: Path, env: dict, log: Path | None = None,
       progress: str | None = None) -> tuple[float, str]:
    """Run ``cmd`` in ``work``: its seconds and its output (stdout and stderr as one stream, so stage
    logs stay under their "Running stage" line), written to ``log`` line by line as it comes (a run
    cut short leaves what it did). With ``progress`` (a label), each stage DVC starts is printed."""
    t0 = time.perf_counter()
    lines, started = [], 0
    with subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          bufsize=1) as proc, (log.open("w") if log else open(os.devnull, "w")) as sink:
        for line in proc.stdout:
            lines.append(line)
            sink.write(line)
            stage = re.match(r"Running stage '([^']+)'", line)
            if progress and stage:
                started += 1
                mins, secs = divmod(int(time.perf_counter() - t0), 60)
                print(f"  {progress}: stage {started} {stage.group(1)} at {mins}:{secs:02d}", flush=True)
    secs = time.perf_counter() - t0
    text = "".join(lines)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{text[-4000:]}")
    return secs, text


def stage_times(path: Path, since: float) -> dict[str, dict]:
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            if rec["start"] >= since:
                out[rec["stage"]] = rec
    return out


def clock(hms: str, ref: float) -> float:
    """An HH:MM:SS log stamp as epoch seconds, on the day of ``ref`` (epoch seconds)."""
    day = datetime.fromtimestamp(ref).replace(hour=0, minute=0, second=0, microsecond=0)
    h, m, s = map(int, hms.split(":"))
    t = day.timestamp() + 3600 * h + 60 * m + s
    return t + 86400 if t < ref - 43200 else t


def phases(text: str, stages: dict[str, dict]) -> dict[str, dict[str, float]]:
    """Per train/evaluate stage: start-up (start -> the plan line: process, imports, data, plan),
    work (-> the last unit trained or the executor's last "n/n done") and tail (-> end: MLflow
    sync and, in evaluate, attaching rows to runs). Log stamps are whole seconds."""
    out: dict[str, dict[str, float]] = {}
    current = None
    marks: dict[str, list[tuple[float, str]]] = {}
    for line in text.splitlines():
        m = re.match(r"Running stage '([^']+)'", line)
        if m:
            current = m.group(1)
            continue
        m = STAMP.match(line)
        if m and current in stages:
            marks.setdefault(current, []).append((clock(m.group(1), stages[current]["start"]), m.group(3)))
    for name, rec in stages.items():
        if not name.startswith(("train@", "evaluate@")) or name not in marks:
            continue
        plan = [t for t, msg in marks[name] if " in the plan" in msg]
        work = [t for t, msg in marks[name] if re.search(r" seed \d+ cutoff .*: \d+ rows|: (\d+)/\1 done", msg)]
        if not plan:
            continue
        t_plan = max(plan[0], rec["start"])
        t_work = max(work[-1] if work else t_plan, t_plan)
        out[name] = {"startup": t_plan - rec["start"], "work": t_work - t_plan, "tail": max(rec["end"] - t_work, 0.0)}
    return out


def work_done(text: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for _, model, plan, done, todo in UNITS.findall(text):
        out.setdefault(model, {}).update(units=int(plan), units_done=int(done), trained=int(todo))
    for _, model, cells, todo in CELLS.findall(text):
        out.setdefault(model, {}).update(cells=int(cells), scored=int(todo))
    return out


def unit_runs(uri: str, experiment: str) -> dict[str, tuple[str, str]]:
    """run id -> (status, lifecycle) of every unit run (tag kind=cutoff) in the store."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL,
                              max_results=50_000)
    return {r.info.run_id: (r.info.status, r.info.lifecycle_stage) for r in runs}


def seed_values(work: Path, models: list[str]) -> dict[str, list]:
    return {m: json.loads((work / "outputs" / "matrices" / f"{m}.json").read_text())["seed_values"] for m in models}


def old_cells_identical(before: list, after: list) -> bool:
    """Every cell M[s][i][j] of ``before`` equals the same cell of ``after`` bit for bit (NaN = NaN)."""
    import numpy as np

    a, b = np.array(before, dtype=float), np.array(after, dtype=float)
    k = a.shape[1]
    return b.shape[0] == a.shape[0] and np.array_equal(b[:, :k, :k], a, equal_nan=True)


def repro(label: str, work: Path, env: dict, times: Path, logs: Path) -> dict:
    """generate + dvc add + dvc repro (what `make repro` runs after install), timed."""
    t_gen, _ = sh(["driftmatrix", "data", "generate"], work, env)
    t_add, _ = sh(["dvc", "add", "-q", "data"], work, env)
    since = time.time()
    t_repro, text = sh(["dvc", "repro"], work, env, logs / f"{label}.log", progress=label)
    stages = stage_times(times, since)
    secs = {k: v["end"] - v["start"] for k, v in stages.items()}
    cpu = {k: v.get("cpu", float("nan")) for k, v in stages.items()}
    te = [k for k in secs if k.startswith(("train@", "evaluate@"))]
    return {"generate_s": t_gen, "dvc_add_s": t_add, "repro_s": t_repro, "stages_s": secs, "stages_cpu_s": cpu,
            "train_evaluate_s": sum(secs[k] for k in te), "train_evaluate_cpu_s": sum(cpu[k] for k in te),
            "dvc_own_s": t_repro - sum(secs.values()),
            "phases_s": phases(text, stages), "work": work_done(text), "load": load()}


def report(full: dict, app: dict, k: int, checks: dict) -> str:
    lines = []
    stages = list(full["stages_s"]) + [s for s in app["stages_s"] if s not in full["stages_s"]]
    lines.append(f"{'stage, wall (cpu) s':<18} {'full K=' + str(k):>16} {'append':>16}")
    for s in stages:
        f = f"{full['stages_s'][s]:.1f} ({full['stages_cpu_s'][s]:.1f})" if s in full["stages_s"] else "skipped"
        a = f"{app['stages_s'][s]:.1f} ({app['stages_cpu_s'][s]:.1f})" if s in app["stages_s"] else "skipped"
        lines.append(f"{s:<18} {f:>16} {a:>16}")
    lines.append(f"{'dvc itself':<18} {full['dvc_own_s']:16.1f} {app['dvc_own_s']:16.1f}")
    lines.append(f"{'dvc repro total':<18} {full['repro_s']:16.1f} {app['repro_s']:16.1f}")
    lines.append(f"(generate {full['generate_s']:.1f} / {app['generate_s']:.1f} s, dvc add {full['dvc_add_s']:.1f} / "
                 f"{app['dvc_add_s']:.1f} s, not in dvc repro)")
    lines.append("train/evaluate stages, seconds: start-up (process, imports, data, plan) / work / MLflow tail")
    for s in stages:
        f, a = full["phases_s"].get(s), app["phases_s"].get(s)
        if f or a:
            fmt = lambda p: "-" if not p else f"{p['startup']:.0f} / {p['work']:.0f} / {p['tail']:.0f}"
            lines.append(f"  {s:<16} full {fmt(f):>16}   append {fmt(a):>16}")
    tr_f = sum(w.get("trained", 0) for w in full["work"].values())
    tr_a = sum(w.get("trained", 0) for w in app["work"].values())
    sc_f = sum(w.get("scored", 0) for w in full["work"].values())
    sc_a = sum(w.get("scored", 0) for w in app["work"].values())
    ratio = app["train_evaluate_s"] / max(full["train_evaluate_s"], 1e-9)
    lines.append(f"units trained: full {tr_f}, append {tr_a} ({tr_a / max(tr_f, 1):.3f}); cells scored: full {sc_f}, "
                 f"append {sc_a} ({sc_a / max(sc_f, 1):.3f})")
    for model, w in app["work"].items():
        lines.append(f"  {model:<8} append: {w.get('trained')} of {w.get('units')} units trained, "
                     f"{w.get('scored')} of {w.get('cells')} cells scored")
    cpu = app["train_evaluate_cpu_s"] / max(full["train_evaluate_cpu_s"], 1e-9)
    lines.append(f"train + evaluate wall: full {full['train_evaluate_s']:.1f} s, append {app['train_evaluate_s']:.1f} s: "
                 f"ratio {ratio:.3f} (target <= 2.5/K = {2.5 / k:.3f}: {'met' if ratio <= 2.5 / k else 'NOT met'})")
    lines.append(f"train + evaluate cpu:  full {full['train_evaluate_cpu_s']:.1f} s, append "
                 f"{app['train_evaluate_cpu_s']:.1f} s: ratio {cpu:.3f}")
    lines.append(f"append end to end: dvc repro {app['repro_s']:.1f} s (+ generate and dvc add "
                 f"{app['generate_s'] + app['dvc_add_s']:.1f} s)")
    lines.append(f"checks: old cells bit-identical {checks['identical']}, new unit runs {checks['new_runs']} "
                 f"(expected {checks['expected_runs']}), unit runs deleted or changed {checks['lost_runs']}")
    lines.append(f"load average: before {checks['load_before']}, after full {full['load']}, after append {app['load']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--years", type=int, default=None, help="K (default: params.yaml synthetic.years)")
    ap.add_argument("--models", nargs="*", default=None, help="subset of params.yaml models")
    ap.add_argument("--seeds", nargs="*", type=int, default=None)
    ap.add_argument("--epochs", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--keep", default=None, help="build the copy here and keep it (default: a temp folder)")
    args = ap.parse_args()
    for tool in ("git", "dvc", "driftmatrix"):
        if shutil.which(tool, path=f"{BIN}{os.pathsep}{os.environ['PATH']}") is None:
            sys.exit(f"bench/incremental.py needs `{tool}` on PATH")

    tmp = Path(args.keep).resolve() if args.keep else Path(tempfile.mkdtemp(prefix="dm-incbench-"))
    work, times, logs = tmp / "repo", tmp / "stage_times.jsonl", tmp / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        params = setup(work, args.years, args.models, args.seeds, args.epochs)
        k, models, seeds = params["synthetic"]["years"], list(params["models"]), params["train"]["seeds"]
        uri = f"sqlite:///{tmp / 'mlflow.db'}"
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(work / "src"),
               "MLFLOW_TRACKING_URI": uri, "DM_STAGE_TIMES": str(times), "PYTHONWARNINGS": "ignore",
               "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
               "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
        for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
            sh(cmd, work, env)
        print(f"incremental: {len(models)} models x {len(seeds)} seeds, K={k} -> {k + 1}, "
              f"{params['train']['epochs']} epochs, in {work}", flush=True)
        checks = {"load_before": load()}
        full = repro("full", work, env, times, logs)
        print(f"  full dvc repro: {full['repro_s']:.1f} s", flush=True)
        runs0, cells0 = unit_runs(uri, params["tracking"]["experiment"]), seed_values(work, models)
        params["synthetic"]["years"] = k + 1
        write_params(work, params)
        app = repro("append", work, env, times, logs)
        runs1, cells1 = unit_runs(uri, params["tracking"]["experiment"]), seed_values(work, models)
        checks.update(identical=all(old_cells_identical(cells0[m], cells1[m]) for m in models),
                      new_runs=len(set(runs1) - set(runs0)), expected_runs=len(models) * len(seeds),
                      lost_runs=sum(1 for r, s in runs0.items() if runs1.get(r) != s))
        print(report(full, app, k, checks))
        if args.json:
            Path(args.json).write_text(json.dumps({"K": k, "models": models, "seeds": seeds,
                                                   "epochs": params["train"]["epochs"], "full": full,
                                                   "append": app, "checks": checks}, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
