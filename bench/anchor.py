"""Anchor benchmark: ours against the authors' pipeline on identical Yearbook-layout PNGs.

    python bench/anchor.py [--models MLP-S CNN-S] [--seeds 1|5] [--repeats 2]
                           [--precision fp32 [bf16]] [--json FILE] [--no-authors]

Data: ``../shared/anchor/gen_synth_yearbook.py`` (20 years x 200 portraits, RGB 186x171), written
once into ``--data-dir`` (default ``outputs/bench/anchor-data``, git-ignored) as
``yearbook/raw/<tree>``, the layout the authors' ``DRIFT_DATA_DIR`` wants. Skipped, with a
message, when ../shared is absent.

Our side: per model, five separate CLI processes from the raw PNGs (``driftmatrix ingest``,
``slice``, ``train -m``, ``evaluate -m``, ``matrices``: the time to the matrix, which the ratio
compares) with MLflow logging and registration on, then ``report --track`` (timed and printed
apart: heatmaps, HTML report, the matrices run; the authors' run draws no figures either),
in a fresh temporary working directory whose params.yaml is the anchor setting (yearly slices,
10 epochs, batch 64, lr 5e-4, CPU). Every stage writes to its default ``outputs/`` paths; results
are read from ``outputs/matrices/summary.json`` (or ``outputs/metrics.json``) and, for per-seed
and per-cell figures, the drift-matrix JSON files beside it.

The authors' side (bench/authors.py), when available: their CLI on their ``yearbook-conference``
preset, one process tree per seed, after one untimed warm-up run that builds their cache. Sides
run alternately (authors, ours[, ours bf16]) per model and repeat, so that drift in the machine's
speed hits both; only ratios from one run count. Load averages are printed with every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import authors as authors_side  # noqa: E402  (bench/authors.py, beside this script)

GENERATOR = REPO.parent / "shared" / "anchor" / "gen_synth_yearbook.py"
SOURCE_DIR = "faces_aligned_small_mirrored_co_aligned_cropped_cleaned"
N_IMAGES = 20 * 200
STAGES = ("ingest", "slice", "train", "evaluate", "matrices")  # time to the matrix: the ratio
# Timed and printed, not in the ratio: the authors' `experiment run` draws no figures either (their
# plots are a separate `drift analysis` command).
AFTER = ("report",)


# --- data ---------------------------------------------------------------------------------------
def anchor_data(data_dir: Path) -> Path | None:
    """``data_dir`` (holding yearbook/raw/<tree>) with all 4,000 PNGs, generated when incomplete;
    None when the generator (../shared) is absent."""
    raw = data_dir / "yearbook" / "raw"
    if len(list((raw / SOURCE_DIR).glob("[FM]/*.png"))) == N_IMAGES:
        return data_dir
    if not GENERATOR.is_file():
        return None
    tmp = raw.with_name("raw.partial")
    subprocess.run(["rm", "-rf", str(tmp)], check=True)
    print(f"anchor data: generating {N_IMAGES} PNGs into {raw} ...", flush=True)
    subprocess.run([sys.executable, str(GENERATOR), str(tmp)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["rm", "-rf", str(raw)], check=True)
    tmp.rename(raw)
    return data_dir


def their_cache_warm(data_dir: Path) -> bool:
    """The authors' preprocessed cache (yearbook/processed under DRIFT_DATA_DIR) holds files."""
    processed = data_dir / "yearbook" / "processed"
    return processed.is_dir() and any(processed.iterdir())


# --- our side -----------------------------------------------------------------------------------
@dataclass
class OurRun:
    model: str
    precision: str
    seconds: float                            # sum of the five processes
    stages: dict[str, float]
    in_distribution: float | None = None      # of the seed-mean matrix, %
    future: float | None = None
    seed_values: np.ndarray | None = None     # S x K x K, %, when the matrix JSON is readable
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)


def anchor_params(base: dict, raw: Path, work: Path, model: str, seeds: int, precision: str,
                  first_seed: int = 0) -> dict:
    """The repository's params.yaml with the anchor setting over it."""
    p = dict(base)
    p["dataset"] = {**base["dataset"], "name": "anchor-yearbook", "source": "yearbook",
                    "path": str(raw / SOURCE_DIR), "task": "binary", "options": {}}
    p["slicing"] = {**base["slicing"], "period": "year", "width": 1, "test_fraction": 0.3,
                    "split_seed": 42}
    p["train"] = {**base["train"], "seeds": list(range(first_seed, first_seed + seeds)), "epochs": 10, "batch_size": 64,
                  "lr": 5.0e-4, "weight_decay": 0.0, "device": "cpu", "precision": precision}
    p["models"] = {model: {}}
    p["tracking"] = {**base["tracking"], "uri": f"sqlite:///{work / 'mlflow.db'}",
                     "artifact_root": str(work / "mlruns"), "log_models": True, "register": True}
    return p


def our_env(work: Path, threads: int | None = None) -> dict[str, str]:
    """The caller's environment with a temporary MLflow store; ``threads`` caps torch's intra-op
    threads like the authors' ``runtime.num_threads``."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def stage_commands(model: str) -> list[list[str]]:
    p = ["--params", "params.yaml"]
    return [["ingest", *p], ["slice", *p], ["train", "-m", model, *p], ["evaluate", "-m", model, *p],
            ["matrices", *p], ["report", "--track", *p]]


def run_ours(base: dict, raw: Path, model: str, seeds: int, precision: str, keep: Path | None = None,
             threads: int | None = None, first_seed: int = 0) -> OurRun:
    """Five CLI processes in a fresh working directory; each stage's wall time."""
    with tempfile.TemporaryDirectory(prefix="anchor-ours-") as d:
        work = Path(d)
        (work / "params.yaml").write_text(yaml.safe_dump(anchor_params(base, raw, work, model, seeds, precision, first_seed)))
        env = our_env(work, threads)
        load = os.getloadavg()
        times = {}
        for name, args in zip(STAGES + AFTER, stage_commands(model)):
            log = work / f"{name}.log"
            t0 = time.perf_counter()
            with log.open("w") as fh:
                proc = subprocess.run([sys.executable, "-m", "driftmatrix", *args], cwd=work, env=env,
                                      stdout=fh, stderr=subprocess.STDOUT)
            times[name] = time.perf_counter() - t0
            if proc.returncode:
                raise RuntimeError(f"ours: `driftmatrix {' '.join(args)}` exited {proc.returncode}:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
        run = OurRun(model, precision, sum(times[s] for s in STAGES), times, load=load)
        read_our_results(work / "outputs", run)
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["rm", "-rf", str(keep)], check=True)
            subprocess.run(["cp", "-r", str(work / "outputs"), str(keep)], check=True)
        return run


def read_our_results(outputs: Path, run: OurRun) -> None:
    """ID/future from summary.json or metrics.json; seed stack from the drift-matrix JSON."""
    summary, metrics = outputs / "matrices" / "summary.json", outputs / "metrics.json"
    if summary.is_file():
        recs = {r["model"]: r for r in json.loads(summary.read_text()).get("models", [])}
    elif metrics.is_file():
        recs = json.loads(metrics.read_text())
    else:
        raise FileNotFoundError(f"{outputs}: neither matrices/summary.json nor metrics.json")
    rec = recs.get(run.model) or {}
    run.in_distribution, run.future = rec.get("in_distribution"), rec.get("future")
    try:
        from driftmatrix.analysis import matrixfile

        m = matrixfile.load_folder(outputs / "matrices").get(run.model)
        run.seed_values = None if m is None else np.asarray(m.seed_values, dtype=float)
    except (ImportError, FileNotFoundError, KeyError, ValueError):
        run.seed_values = None


def startup_seconds(env: dict[str, str]) -> float:
    """Best of three ``driftmatrix --help``: the floor every stage process pays."""
    best = float("inf")
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "driftmatrix", "--help"], env=env, cwd=REPO,
                       stdout=subprocess.DEVNULL, check=True)
        best = min(best, time.perf_counter() - t0)
    return best


# --- figures ------------------------------------------------------------------------------------
def per_seed(stack: np.ndarray, stat) -> list[float]:
    return [float(stat(M)) for M in stack]


def mean_std(xs: list[float]) -> str:
    if not xs:
        return "-"
    if len(xs) == 1:
        return f"{xs[0]:.1f}"
    return f"{statistics.mean(xs):.1f} +- {statistics.stdev(xs):.1f} (n={len(xs)})"


def welch_t(a: list[float], b: list[float]) -> float | None:
    """Welch's t of mean(a) - mean(b); None below two values a side."""
    if len(a) < 2 or len(b) < 2:
        return None
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    return (statistics.mean(a) - statistics.mean(b)) / max((va + vb) ** 0.5, 1e-12)


def cell_agreement(ref: np.ndarray, other: np.ndarray) -> dict:
    """Per cell of two S x K x K seed stacks: is |mean(other) - mean(ref)| within ref's seed std?"""
    from driftmatrix.analysis.summary import seed_mean, seed_std

    import math

    m_ref, s_ref, m_oth = seed_mean(ref), seed_std(ref), seed_mean(other)
    # share of cells within one std expected when both come from the same distribution (normal)
    n_eff = ref.shape[0] * other.shape[0] / (ref.shape[0] + other.shape[0])
    expected = math.erf(math.sqrt(n_eff) / math.sqrt(2))
    ok = np.isfinite(m_ref) & np.isfinite(m_oth) & np.isfinite(s_ref)
    diff = np.abs(m_oth - m_ref)[ok]
    within = diff <= s_ref[ok]
    within_2 = diff <= 2 * s_ref[ok]
    return {"cells": int(ok.sum()), "expected_within_std_if_same": expected, "within_std": float(within.mean()) if ok.any() else None,
            "within_2std": float(within_2.mean()) if ok.any() else None,
            "mean_abs_diff": float(diff.mean()) if ok.any() else None,
            "max_abs_diff": float(diff.max()) if ok.any() else None,
            "median_std": float(np.median(s_ref[ok])) if ok.any() else None}


def spread(xs) -> str:
    xs = list(xs)
    return f"{statistics.median(xs):6.1f} s ({min(xs):.1f}-{max(xs):.1f}, n={len(xs)})"


@dataclass
class Results:
    ours: list[tuple[int, OurRun]] = field(default_factory=list)                    # (repeat, run)
    theirs: list[tuple[int, authors_side.AuthorsRun]] = field(default_factory=list)  # (repeat, run)
    startup: float | None = None
    threads: int = 2

    def our_runs(self, model: str, precision: str) -> list[OurRun]:
        return [r for _, r in self.ours if r.model == model and r.precision == precision]

    def their_seconds(self, model: str) -> dict[int, float]:
        """Authors' wall time per repeat, summed over seeds (one process tree per seed)."""
        out: dict[int, float] = {}
        for rep, r in self.theirs:
            if r.model == model:
                out[rep] = out.get(rep, 0.0) + r.seconds
        return out

    def their_stack(self, model: str) -> np.ndarray | None:
        """S x K x K of the first repeat (later repeats rerun the same seeds)."""
        ms = [r.matrix for rep, r in self.theirs if r.model == model and rep == 0]
        return np.stack(ms) if ms else None

    def our_stack(self, model: str, precision: str) -> np.ndarray | None:
        runs = self.our_runs(model, precision)
        return runs[0].seed_values if runs else None


def report(res: Results, models: list[str], precisions: list[str]) -> None:
    from driftmatrix.analysis.summary import future, in_distribution

    print(f"\n=== anchor: 20 yearly slices x 200, 10 epochs, batch 64, lr 5e-4, CPU, {res.threads} thread(s) a side "
          f"({os.cpu_count()} cores; load {'%.1f %.1f %.1f' % os.getloadavg()} now) ===")
    if res.startup is not None:
        print(f"start-up floor: `driftmatrix --help` {res.startup:.2f} s")
    for model in models:
        theirs = res.their_seconds(model)
        th_stack = res.their_stack(model)
        if theirs:
            print(f"{model:<6} authors       {spread(list(theirs.values()))}  "
                  f"ID {mean_std(per_seed(th_stack, in_distribution))}  future {mean_std(per_seed(th_stack, future))}")
        for prec in precisions:
            ours = res.our_runs(model, prec)
            if not ours:
                continue
            tot = [r.seconds for r in ours]
            line = f"{model:<6} ours {prec:<8} {spread(tot)}"
            stack = res.our_stack(model, prec)
            if stack is not None:
                line += f"  ID {mean_std(per_seed(stack, in_distribution))}  future {mean_std(per_seed(stack, future))}"
            elif ours[0].in_distribution is not None:
                line += f"  ID {ours[0].in_distribution:.1f}  future {ours[0].future:.1f}"
            print(line)
            stages = "  ".join(f"{s} {statistics.median(r.stages[s] for r in ours):.1f}" for s in STAGES)
            after = "  ".join(f"{s} {statistics.median(r.stages[s] for r in ours):.1f}" for s in AFTER)
            print(f"{'':<6}   stages (median s): {stages}   (then, not in the total: {after})")
            if theirs:
                ratios = [theirs[rep] / r.seconds for rep, r in res.ours
                          if r.model == model and r.precision == prec and rep in theirs]
                print(f"{'':<6}   speed-up authors/ours: "
                      f"{statistics.median(theirs.values()) / statistics.median(tot):.2f}x "
                      f"(medians; pairs {', '.join(f'{x:.2f}' for x in ratios)})")
            if th_stack is not None and stack is not None:
                t = welch_t(per_seed(th_stack, in_distribution), per_seed(stack, in_distribution))
                if t is not None:
                    print(f"{'':<6}   ID authors - ours ({prec}): Welch t = {t:.2f}")
        f32, b16 = res.our_stack(model, "fp32"), res.our_stack(model, "bf16")
        if f32 is not None and b16 is not None and f32.shape[0] > 1:
            a = cell_agreement(f32, b16)
            print(f"{'':<6}   bf16 vs fp32 cells ({a['cells']}): {100 * a['within_std']:.0f}% within fp32's seed std, "
                  f"{100 * a['within_2std']:.0f}% within 2 std (same-distribution expectation "
                  f"{100 * a['expected_within_std_if_same']:.0f}% within 1 std); |diff| mean {a['mean_abs_diff']:.2f}, "
                  f"max {a['max_abs_diff']:.2f} (median seed std {a['median_std']:.2f})")


def to_json(res: Results) -> dict:
    def arr(a):
        return None if a is None else np.where(np.isnan(a), None, np.round(a, 4)).tolist()

    return {"startup": res.startup, "threads": res.threads, "load_end": os.getloadavg(),
            "ours": [{"repeat": rep, "model": r.model, "precision": r.precision, "seconds": r.seconds,
                      "stages": r.stages, "load": r.load, "in_distribution": r.in_distribution,
                      "future": r.future, "seed_values": arr(r.seed_values)} for rep, r in res.ours],
            "theirs": [{"repeat": rep, "model": r.model, "seed": r.seed, "seconds": r.seconds,
                        "slices": r.slices, "matrix": arr(r.matrix)} for rep, r in res.theirs]}


def save(path: Path | None, res: Results) -> None:
    """Every figure so far, after each run: a long study stopped half-way keeps what finished."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(to_json(res)))


# --- main ---------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["MLP-S", "CNN-S"], choices=sorted(authors_side.PRESETS))
    ap.add_argument("--seeds", type=int, default=1, choices=(1, 5))
    ap.add_argument("--first-seed", type=int, default=0,
                    help="Seeds first-seed .. first-seed+seeds-1 (split a seed study into lanes).")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--precision", nargs="+", default=["fp32"], choices=("fp32", "bf16"))
    ap.add_argument("--data-dir", type=Path, default=REPO / "outputs" / "bench" / "anchor-data")
    ap.add_argument("--json", type=Path, default=None, help="Write every raw figure here.")
    ap.add_argument("--keep", type=Path, default=None,
                    help="Copy each of our runs' outputs/ to KEEP/<model>-<precision>-<repeat>.")
    ap.add_argument("--no-authors", action="store_true", help="Our side only.")
    ap.add_argument("--authors-src", type=Path, default=None)
    ap.add_argument("--authors-venv", type=Path, default=None)
    ap.add_argument("--warm", action="store_true",
                    help="Run the authors' untimed warm-up even when their cache folder is filled.")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads of each side: the authors' runtime.num_threads, our OMP_NUM_THREADS "
                         "(the anchor README uses 2; 1 is fairer on an oversubscribed machine).")
    args = ap.parse_args(argv)

    data = anchor_data(args.data_dir.resolve())
    if data is None:
        print(f"anchor: skipped, {GENERATOR} not found (../shared is absent)")
        return
    raw = data / "yearbook" / "raw"
    theirs = None
    if not args.no_authors:
        a = authors_side.locate(args.authors_src, args.authors_venv)
        reason = authors_side.unavailable(a)
        if reason:
            print(f"anchor: authors' side skipped: {reason}")
        else:
            theirs = a
    base = yaml.safe_load((REPO / "params.yaml").read_text())
    res = Results(threads=args.threads)
    res.startup = startup_seconds(our_env(Path(tempfile.gettempdir())))
    with tempfile.TemporaryDirectory(prefix="anchor-authors-") as d:
        scratch = Path(d)
        if theirs is not None and (args.warm or not their_cache_warm(data)):
            print("anchor: untimed warm-up run of the authors' MLP-S (builds their cache) ...", flush=True)
            authors_side.run(theirs, "MLP-S", 0, data, scratch / "warm", args.threads)
        for rep in range(args.repeats):
            for model in args.models:
                if theirs is not None:
                    for seed in range(args.seeds):
                        run_dir = scratch / f"{model}-{rep}-{seed}"
                        load = os.getloadavg()[0]
                        r = authors_side.run(theirs, model, args.first_seed + seed, data, run_dir, args.threads)
                        res.theirs.append((rep, r))
                        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                        save(args.json, res)
                        print(f"[{rep}] authors {model} seed {args.first_seed + seed}: {r.seconds:.1f} s (load {load:.1f})",
                              flush=True)
                for prec in args.precision:
                    keep = args.keep / f"{model}-{prec}-{rep}" if args.keep else None
                    o = run_ours(base, raw, model, args.seeds, prec, keep, args.threads, args.first_seed)
                    res.ours.append((rep, o))
                    print(f"[{rep}] ours {model} {prec}: {o.seconds:.1f} s "
                          f"({', '.join(f'{k} {v:.1f}' for k, v in o.stages.items())}; load {o.load[0]:.1f})",
                          flush=True)
                    save(args.json, res)
    report(res, args.models, args.precision)
    if args.json:
        save(args.json, res)
        print(f"raw figures -> {args.json}")


if __name__ == "__main__":
    main()
