"""The study's size: thousands of cheap units through plain ``dvc repro``, into sqlite and through the
PostgreSQL-backed ``mlflow server`` of ``make bench-cluster`` (``make bench-scale``).

    python bench/scale.py [--models 20] [--periods 50] [--seeds 5] [--units N] [--per-year 60]
                          [--stores sqlite server] [--small-seeds 1] [--json out.json] [--keep DIR]

Units = models x periods x seeds (default 20 x 50 x 5 = 5,000; ``--units N`` picks the periods).
The models are cheap tabular variants of the built-in customer table (``presets/tabular.yaml``):
Prior, LogReg, MLP-Tab and scikit-learn estimators named by import path (logistic regressions,
small MLPs, naive Bayes, SGD). Each store gets its own copy of the pipeline (as
``bench/incremental.py`` makes one: src/, dvc.yaml with every stage command timed, its own git +
DVC repo); ``generate`` + ``dvc add`` + ``dvc repro`` run there. The evaluate and report stages run
the real ``driftmatrix`` CLI through ``_hooked.py``, which only adds clocks around the MLflow
bookkeeping (``stages.evaluate.sync``: pyfunc model folders, runs, metrics, drift-matrix row
artifacts, models, registry versions and aliases; ``RowLogs.attach_rest``; inside them
``tracking.runs.create_unit_runs`` and ``sync_registry``).

Measured: bookkeeping seconds per unit (sqlite, server); the plan and key computation per unit
(``units.plan.model_plan`` with its code keys, cold, plus every cell key), in this process on the
copy's slices; each stage's wall seconds and peak RSS (``getrusage`` of the stage process); the
matrices and report stages; the report's size and its load in headless Chromium; peak RSS again
at ``--small-seeds`` seeds (fewer units, same periods: memory flat or not); an extrapolation of the
per-unit figures to the paper's 13,620 units. Targets (issue 33): bookkeeping <= 20 ms/unit
sqlite, <= 50 ms/unit server; plan + keys <= 5 ms/unit; memory flat; a 20-model report < 10 MB
that renders in < 3 s.
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
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests"))  # testkit: the throw-away PostgreSQL and mlflow server
sys.path.insert(0, str(REPO / "src"))

from incremental import load, sh, stage_times, timed_dvc_yaml  # noqa: E402  (bench/incremental.py)

PAPER_UNITS = 13_620
TARGETS = {"bookkeeping_ms_per_unit_sqlite": 20.0, "bookkeeping_ms_per_unit_server": 50.0,
           "plan_keys_ms_per_unit": 5.0, "report_mb": 10.0, "report_load_s": 3.0}

#: Wraps a stage command as incremental's ``_timed.py`` does, adding the stage's peak RSS (MiB).
TIMER = """import json, os, resource, subprocess, sys, time
start = time.time()
rc = subprocess.call(sys.argv[2:], env={**os.environ, "DRIFTMATRIX_WARM": "0"})  # its CPU and RSS are its own
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(os.environ["DM_STAGE_TIMES"], "a") as f:
    f.write(json.dumps({"stage": sys.argv[1], "start": start, "end": time.time(), "cpu": ru.ru_utime + ru.ru_stime,
                        "maxrss_mb": ru.ru_maxrss / 1024, "rc": rc}) + "\\n")
sys.exit(rc)
"""

#: The driftmatrix CLI with clocks around the MLflow bookkeeping; appends one JSON line per stage
#: process to $DM_BOOK_TIMES.
HOOK = """import atexit, json, os, sys, time

def install():
    from driftmatrix.stages import evaluate
    from driftmatrix.tracking import runs
    acc = {"argv": sys.argv[1:], "sync_s": 0.0, "attach_s": 0.0, "create_run_s": 0.0, "registry_s": 0.0,
           "runs_created": 0, "units": 0}

    def clocked(owner, name, field, count=None):
        inner = getattr(owner, name)
        def wrapper(*args, **kw):
            t = time.perf_counter()
            try:
                out = inner(*args, **kw)
            finally:
                acc[field] += time.perf_counter() - t
            if count:
                count(out)
            return out
        setattr(owner, name, wrapper)

    def created(run_ids):
        acc["runs_created"] += len(run_ids)

    def units(out):
        acc["units"] += len(out)

    clocked(evaluate, "sync", "sync_s", units)
    clocked(evaluate.RowLogs, "attach_rest", "attach_s")
    clocked(runs, "create_unit_runs", "create_run_s", created)
    clocked(runs, "sync_registry", "registry_s")

    @atexit.register
    def write():
        with open(os.environ["DM_BOOK_TIMES"], "a") as f:
            f.write(json.dumps(acc) + "\\n")

if __name__ == "__main__":  # worker processes import this file again as __mp_main__
    install()
    from driftmatrix.cli import main
    sys.argv = ["driftmatrix", *sys.argv[1:]]
    main()
"""


def variants(n: int) -> dict[str, dict]:
    """``n`` cheap tabular model variants: the catalog's Prior, LogReg and MLP-Tab (2 epochs) and
    scikit-learn estimators by import path, interleaved so that a few already cover every kind.
    Names hold no dots (DVC reads ``models.<name>`` as a parameter path)."""
    lr, mlp = "sklearn.linear_model.LogisticRegression", "sklearn.neural_network.MLPClassifier"
    sgd, dummy = "sklearn.linear_model.SGDClassifier", "sklearn.dummy.DummyClassifier"

    def name(x: float) -> str:
        return f"{x:g}".replace(".", "p")

    kinds = [
        [("Prior", {}), ("LogReg", {}), ("MLP-Tab", {"epochs": 2})],
        [(f"LR-C{name(c)}", {"estimator": lr, "params": {"C": c, "max_iter": 200}}) for c in (0.01, 0.1, 10, 100)],
        [(f"MLP-h{h}-a{name(a)}", {"estimator": mlp, "params": {"hidden_layer_sizes": [h], "alpha": a, "max_iter": 30,
                                                                "random_state": 0},
                                 "trusted": ["sklearn.neural_network._stochastic_optimizers.AdamOptimizer"]})
         for h in (4, 8, 16) for a in (1e-4, 1e-2)],
        [("NB", {"estimator": "sklearn.naive_bayes.GaussianNB"})]
        + [(f"SGD-a{name(a)}", {"estimator": sgd, "params": {"loss": "log_loss", "alpha": a, "random_state": 0}})
           for a in (1e-4, 1e-3, 1e-2)],
        [(f"Dummy-{s}", {"estimator": dummy, "params": {"strategy": s, "random_state": 0}}) for s in ("prior", "stratified", "uniform")],
    ]
    order = [kind[i] for i in range(max(map(len, kinds))) for kind in kinds if i < len(kind)]
    if n > len(order):
        sys.exit(f"--models: at most {len(order)} variants")
    return dict(order[:n])


def scale_params(models: int, periods: int, seeds: int, per_year: int) -> dict:
    params = yaml.safe_load((REPO / "presets" / "tabular.yaml").read_text())
    params["models"] = variants(models)
    params["synthetic"].update(years=periods, span=periods, per_year=per_year)
    params["train"]["seeds"] = list(range(seeds))
    params["tracking"].update(uri="sqlite:///mlflow.db", experiment="bench-scale")
    params["saliency"] = {**params["saliency"], "pairs": [], "eval_years": []}
    params["runtime"].update(executor="local", workers="auto")
    return params


def setup(work: Path, params: dict) -> None:
    """The copy of the pipeline: src/, params, dvc.yaml with every stage timed and the evaluate and
    report commands through ``_hooked.py``."""
    work.mkdir(parents=True)
    shutil.copytree(REPO / "src", work / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    text = timed_dvc_yaml((REPO / "dvc.yaml").read_text())
    text = re.sub(r"_timed\.py (evaluate@\$\{key\}|report) driftmatrix ", r"_timed.py \1 python _hooked.py ", text)
    (work / "dvc.yaml").write_text(text)
    (work / "_timed.py").write_text(TIMER)
    (work / "_hooked.py").write_text(HOOK)
    (work / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


def plan_and_keys(work: Path, params: dict, repeats: int = 3) -> dict:
    """Seconds to plan every model (unit keys with their code keys, computed cold) and every cell
    key, as the train, evaluate and matrices stages do, on the copy's slices (best of ``repeats``)."""
    from driftmatrix.config import parse_params
    from driftmatrix.data.table import read_manifest
    from driftmatrix.units import code
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.plan import model_plan, slice_hashes

    here = os.getcwd()
    os.chdir(work)
    try:
        p = parse_params(params)
        manifest = read_manifest("outputs/slices")
        hashes = slice_hashes(manifest)
        envs = {m: recorded_environment(p, m, "outputs/checkpoints", resolve_if_missing=True) for m in p.models}
        best, units, cells = float("inf"), 0, 0
        for _ in range(repeats):
            code.code_key.cache_clear()
            code._module.cache_clear() if hasattr(code._module, "cache_clear") else None
            t = time.perf_counter()
            units = cells = 0
            for m in p.models:
                plan = model_plan(p, m, manifest, envs[m])
                units += len(plan.units)
                cells += sum(len(plan.cells(u, hashes)) for u in plan.units)
            best = min(best, time.perf_counter() - t)
        t = time.perf_counter()  # again with the code keys cached: what each further unit costs
        for m in p.models:
            plan = model_plan(p, m, manifest, envs[m])
            sum(len(plan.cells(u, hashes)) for u in plan.units)
        warm = time.perf_counter() - t
    finally:
        os.chdir(here)
    return {"plan_keys_s": best, "units": units, "cells": cells, "plan_keys_ms_per_unit": 1000 * best / units,
            "plan_keys_warm_s": warm, "plan_keys_warm_ms_per_unit": 1000 * warm / units}


def chromium() -> str | None:
    return next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


PROBE = ("<script>addEventListener('load', () => setTimeout(() => { const t = performance.timing;"
         " document.body.insertAdjacentHTML('beforeend', '<pre id=\"load-ms\">' + (t.loadEventEnd - t.navigationStart)"
         " + '</pre>'); }, 0));</script>")


def report_load(page: Path, tmp: Path) -> dict:
    """The report's load in headless Chromium: the page's own navigation-to-load time and the wall
    seconds of ``chromium --headless --dump-dom`` on it, beside the same for an empty page."""
    browser = chromium()
    if browser is None:
        return {"report_load_s": None, "browser": None}

    def run(path: Path) -> tuple[float, float | None]:
        t = time.perf_counter()
        out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", path.as_uri()],
                             capture_output=True, text=True, timeout=180)
        wall = time.perf_counter() - t
        found = re.search(r'<pre id="load-ms">(\d+)</pre>', out.stdout)
        return wall, int(found.group(1)) / 1000 if found else None

    probe, empty = tmp / "report-probe.html", tmp / "empty.html"
    probe.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    empty.write_text(f"<html><body>{PROBE}</body></html>")
    run(empty)  # the browser's first start fills its caches
    empty_wall, _ = run(empty)
    wall, in_page = run(probe)
    return {"report_load_s": in_page, "chromium_wall_s": wall, "chromium_empty_wall_s": empty_wall,
            "browser": browser}


def book_times(path: Path, since_lines: int = 0) -> dict:
    lines = path.read_text().splitlines()[since_lines:] if path.exists() else []
    recs = [json.loads(x) for x in lines]
    ev = [r for r in recs if r["argv"][:1] == ["evaluate"]]
    total = {k: sum(r[k] for r in ev) for k in ("sync_s", "attach_s", "create_run_s", "registry_s", "runs_created",
                                                  "units")}
    report = [r for r in recs if r["argv"][:1] == ["report"]]
    total["report_registry_s"] = sum(r["registry_s"] for r in report)
    return total


def side(label: str, tmp: Path, params: dict, env: dict, measure: bool) -> dict:
    """One copy of the pipeline, generated, added and reproduced; its figures."""
    work = tmp / label
    (tmp / "logs").mkdir(exist_ok=True)
    setup(work, params)
    env = {**env, "DM_STAGE_TIMES": str(tmp / f"{label}.stages.jsonl"), "DM_BOOK_TIMES": str(tmp / f"{label}.book.jsonl")}
    for cmd in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        sh(cmd, work, env)
    t_gen, _ = sh(["driftmatrix", "data", "generate"], work, env)
    sh(["dvc", "add", "-q", "data"], work, env)
    load_before = load()
    t_repro, _ = sh(["dvc", "repro"], work, env, tmp / "logs" / f"{label}.log", progress=label)
    return {**collect(label, tmp, params, measure), "repro_s": t_repro, "generate_s": t_gen,
            "load_before": load_before, "load_after": load()}


def collect(label: str, tmp: Path, params: dict, measure: bool) -> dict:
    """The figures of a side from its copy and records, also of a run cut short (``--collect``): then
    the per-unit bookkeeping is over the units the finished evaluate stages synced."""
    work = tmp / label
    stages = stage_times(tmp / f"{label}.stages.jsonl", 0)
    book = book_times(tmp / f"{label}.book.jsonl")
    units = len(params["models"]) * len(params["train"]["seeds"]) * params["synthetic"]["years"]
    synced = book["units"] or 1
    bookkeeping = book["sync_s"] + book["attach_s"]
    out = {"units": units, "units_synced": book["units"],
           "stages_s": {k: v["end"] - v["start"] for k, v in stages.items()},
           "stages_maxrss_mb": {k: v.get("maxrss_mb") for k, v in stages.items()},
           "bookkeeping": {**book, "total_s": bookkeeping, "ms_per_unit": 1000 * bookkeeping / synced,
                           "ms_per_unit_runs": 1000 * book["create_run_s"] / synced,
                           "ms_per_unit_registry": 1000 * book["registry_s"] / synced}}
    if book["units"] != units or book["runs_created"] != units:
        out["warning"] = f"expected {units} units and new runs, the evaluate stages synced {book['units']} " \
                         f"and created {book['runs_created']}"
    rss = out["stages_maxrss_mb"]
    out["peak_rss_mb"] = max(v for v in rss.values() if v is not None)
    out["peak_rss_mb_per_kind"] = {kind: max((v for k, v in rss.items() if k.split("@")[0] == kind and v), default=None)
                                   for kind in ("train", "evaluate", "matrices", "estimates", "report")}
    if measure:  # a failure here keeps the figures above (the run took long)
        try:
            out["plan"] = plan_and_keys(work, params)
            page = work / "outputs" / "report" / "report.html"
            if page.exists():
                out["report_mb"] = page.stat().st_size / 2**20
                out.update(report_load(page, tmp))
        except Exception as exc:  # noqa: BLE001
            out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def cpu_model() -> str:
    out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    found = re.search(r"Model name:\s*(.+)", out)
    return found.group(1).strip() if found else "unknown"


def summary(res: dict) -> dict:
    """The headline figures, each with its target, and the extrapolation to the paper's units."""
    sq = res["sides"]["sqlite"]
    fig = {"units": sq["units"],
           "bookkeeping_ms_per_unit_sqlite": sq["bookkeeping"]["ms_per_unit"],
           "plan_keys_ms_per_unit": sq.get("plan", {}).get("plan_keys_ms_per_unit"),
           "plan_keys_warm_ms_per_unit": sq.get("plan", {}).get("plan_keys_warm_ms_per_unit"),
           "matrices_s": sq["stages_s"].get("matrices"), "report_s": sq["stages_s"].get("report"),
           "report_mb": sq.get("report_mb"), "report_load_s": sq.get("report_load_s"),
           "report_models": len(res["models"]),
           "peak_rss_mb": sq["peak_rss_mb"]}
    if "server" in res["sides"]:
        fig["bookkeeping_ms_per_unit_server"] = res["sides"]["server"]["bookkeeping"]["ms_per_unit"]
    if "sqlite-small" in res["sides"]:
        small = res["sides"]["sqlite-small"]
        fig.update(small_units=small["units"], small_peak_rss_mb=small["peak_rss_mb"],
                   memory_ratio=sq["peak_rss_mb"] / small["peak_rss_mb"])
    fig["paper_units"] = PAPER_UNITS
    for key in ("bookkeeping_ms_per_unit_sqlite", "bookkeeping_ms_per_unit_server", "plan_keys_ms_per_unit"):
        if fig.get(key) is not None:
            fig[f"paper_{key.replace('_ms_per_unit', '')}_min"] = fig[key] * PAPER_UNITS / 60000
    fig["targets"] = {k: {"target": v, "measured": fig.get(k), "met": None if fig.get(k) is None else fig[k] <= v}
                      for k, v in TARGETS.items()}
    return fig


def print_summary(fig: dict, res: dict) -> None:
    def num(v, fmt=".2f"):
        return "n/a" if v is None else format(v, fmt)

    print(f"\nbench-scale: {fig['units']} units ({len(res['models'])} models x {res['periods']} periods x "
          f"{res['seeds']} seeds), CPU {res['cpu']}")
    for name, side_ in res["sides"].items():
        b = side_["bookkeeping"]
        print(f"  {name:13} dvc repro {num(side_.get('repro_s'), '7.1f')} s  bookkeeping {b['total_s']:7.1f} s = "
              f"{b['ms_per_unit']:6.1f} ms/unit over {b['units']} units (runs {b['ms_per_unit_runs']:.1f}, registry "
              f"{b['ms_per_unit_registry']:.1f})  peak RSS {side_['peak_rss_mb']:.0f} MiB  load {side_.get('load_before')}"
              f" -> {side_.get('load_after')}")
    print(f"  plan + keys: {num(fig['plan_keys_ms_per_unit'], '.3f')} ms/unit; matrices {num(fig['matrices_s'], '.1f')} "
          f"s, report stage {num(fig['report_s'], '.1f')} s; report {num(fig['report_mb'])} MB for "
          f"{fig['report_models']} models, loads in {num(fig['report_load_s'])} s")
    if "memory_ratio" in fig:
        print(f"  peak RSS {fig['peak_rss_mb']:.0f} MiB at {fig['units']} units vs {fig['small_peak_rss_mb']:.0f} MiB "
              f"at {fig['small_units']} units (x{fig['memory_ratio']:.2f})")
    print(f"  at the paper's {PAPER_UNITS} units: " + ", ".join(
        f"{k[6:]} {v:.1f} min" for k, v in fig.items() if k.startswith("paper_") and k.endswith("_min")))
    for k, t in fig["targets"].items():
        print(f"  target {k} <= {t['target']}: measured {t['measured']}, met {t['met']}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=20, help="model variants (at most 20)")
    ap.add_argument("--periods", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--units", type=int, help="about this many units: sets --periods (at least 3)")
    ap.add_argument("--per-year", type=int, default=60, help="rows per period")
    ap.add_argument("--stores", nargs="*", default=["sqlite", "server"], choices=["sqlite", "server"],
                    help="the sides, run in this order (sqlite, the reference, always runs)")
    ap.add_argument("--small-seeds", type=int, default=1,
                    help="also run sqlite at this many seeds for peak memory at fewer units (0: skip)")
    ap.add_argument("--json", type=Path, default=REPO / "outputs" / "bench" / "scale.json")
    ap.add_argument("--keep", type=Path, help="build the copies here and keep them (default: a temp folder)")
    ap.add_argument("--collect", type=Path, help="run nothing: the figures of the copies a --keep run left here "
                                                   "(also of one cut short), with this run's size options")
    args = ap.parse_args()
    if args.units:
        args.periods = max(3, round(args.units / (args.models * args.seeds)))
    if "sqlite" not in args.stores:
        sys.exit("--stores: sqlite is the reference side and always runs")
    for tool in ("git", "dvc", "driftmatrix"):
        if shutil.which(tool, path=f"{BIN}{os.pathsep}{os.environ['PATH']}") is None:
            sys.exit(f"bench/scale.py needs `{tool}` on PATH")

    if args.collect:
        res = {"models": None, "periods": args.periods, "seeds": args.seeds, "per_year": args.per_year,
               "cpu": cpu_model(), "cpus": os.cpu_count(), "load": load(), "collected": True, "sides": {}}
        for label in ("sqlite", "sqlite-small", "server"):
            if (args.collect / label / "params.yaml").exists():
                params = yaml.safe_load((args.collect / label / "params.yaml").read_text())
                if label == "sqlite":
                    res.update(models=list(params["models"]), periods=params["synthetic"]["years"],
                               seeds=len(params["train"]["seeds"]))
                res["sides"][label] = collect(label, args.collect, params, measure=label == "sqlite")
        res["figures"] = summary(res)
        print_summary(res["figures"], res)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(res, indent=2))
        return
    tmp = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="dm-scale-"))
    tmp.mkdir(parents=True, exist_ok=True)
    params = scale_params(args.models, args.periods, args.seeds, args.per_year)
    res = {"models": list(params["models"]), "periods": args.periods, "seeds": args.seeds,
           "per_year": args.per_year, "cpu": cpu_model(), "cpus": os.cpu_count(), "sides": {}}
    base = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "PYTHONWARNINGS": "ignore",
            "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@localhost",
            "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@localhost"}
    units = args.models * args.periods * args.seeds
    print(f"bench-scale: {units} units in {tmp}", flush=True)
    try:
        def env_for(label: str) -> dict:
            return {**base, "PYTHONPATH": str(tmp / label / "src"),
                    "MLFLOW_TRACKING_URI": f"sqlite:///{tmp / label / 'mlflow.db'}"}

        def keep(name: str, figures: dict) -> None:  # each side's figures as soon as it is done
            res["sides"][name] = figures
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(res, indent=2))

        for store in args.stores:  # in the order given
            if store == "sqlite":
                keep("sqlite", side("sqlite", tmp, params, env_for("sqlite"), measure=True))
                if args.small_seeds:
                    small = scale_params(args.models, args.periods, args.small_seeds, args.per_year)
                    keep("sqlite-small", side("sqlite-small", tmp, small, env_for("sqlite-small"), measure=False))
                continue
            from testkit.servers import MlflowServer, Postgres

            pg, server = Postgres(), None
            try:
                pg.start()
                server = MlflowServer(pg.create_database("mlflow"), tmp / "artifacts", workers=2, log=tmp / "server.log").start()
                keep("server", side("server", tmp, params, {**env_for("server"), "MLFLOW_TRACKING_URI": server.url},
                                    measure=False))
            finally:
                if server is not None:
                    server.stop()
                pg.stop()
        fig = summary(res)
        res["figures"] = fig
        print_summary(fig, res)
        args.json.write_text(json.dumps(res, indent=2))
        print(f"  figures: {args.json}")
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
