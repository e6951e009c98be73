"""The authors' side of the anchor benchmark: their own CLI on the anchor data.

    python bench/authors.py --data DRIFT_DATA_DIR [--model MLP-S] [--seed 0] [--warm]

Their repository (learning-mechanisms/drift-happens) is never part of this one. Point at a
checkout of it and at a Python 3.13 venv holding torch==2.14.1, torchvision==0.29.1 and the
packages their imports need (../shared/anchor/README.md) with ``--authors-src`` /
``--authors-venv`` or ``DRIFT_AUTHORS_SRC`` / ``DRIFT_AUTHORS_VENV``; the defaults are
``authors-src`` and ``authors-venv`` beside the repository. When either is missing, callers get a
reason string and skip.

One run = one process tree of theirs: ``drift experiment run <yearbook-conference/<key>.json>
--seed S --set runtime.device=cpu --set runtime.num_threads=2 --wandb-mode disabled`` into a fresh
runs root, W&B disabled, ``DRIFT_DATA_DIR`` holding ``yearbook/raw/<the generated tree>`` and, after
one untimed run, their warm preprocessed-data cache (``yearbook/processed``), so PNG decoding is
not timed on their side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
PRESET_GROUP = "yearbook-conference"
PRESETS = {"MLP-S": "mlp_s", "CNN-S": "cnn_s"}  # our registry name -> their trainer key


@dataclass(frozen=True)
class Authors:
    src: Path      # their repository tree (holds pixi.toml, their project-root marker)
    python: Path   # the venv's interpreter


@dataclass(frozen=True)
class AuthorsRun:
    model: str
    seed: int
    seconds: float         # whole process tree, wall clock
    slices: list[str]
    matrix: np.ndarray     # K x K accuracy in %, rows = trained up to, columns = evaluated on


def locate(src: str | Path | None = None, venv: str | Path | None = None) -> Authors:
    src = Path(src or os.environ.get("DRIFT_AUTHORS_SRC") or REPO.parent / "authors-src")
    venv = Path(venv or os.environ.get("DRIFT_AUTHORS_VENV") or REPO.parent / "authors-venv")
    return Authors(src=src.resolve(), python=venv.resolve() / "bin" / "python")


def unavailable(a: Authors) -> str | None:
    """Why the authors' side cannot run here, or None when it can (imports checked too)."""
    if not (a.src / "drift_happens" / "cli" / "main.py").is_file():
        return (f"no checkout of the authors' repository at {a.src} (set DRIFT_AUTHORS_SRC or "
                "--authors-src; see ../shared/anchor/README.md)")
    if not (a.src / "pixi.toml").is_file():
        return f"{a.src}: pixi.toml missing (their code finds its project root by it)"
    if not a.python.is_file():
        return (f"no venv interpreter at {a.python} (set DRIFT_AUTHORS_VENV or --authors-venv: a "
                "Python 3.13 venv with torch==2.14.1, torchvision==0.29.1 and their imports)")
    for key in PRESETS.values():
        if not preset(a, key).is_file():
            return f"preset {preset(a, key)} missing"
    probe = subprocess.run([str(a.python), "-c", "import torch, drift_happens.cli.main"],
                           env=environment(a, a.src / "data", a.src / "artifacts"),
                           capture_output=True, text=True)
    if probe.returncode:
        return f"their CLI does not import in {a.python}: {probe.stderr.strip().splitlines()[-1:]}"
    return None


def preset(a: Authors, key: str) -> Path:
    return a.src / "configs" / "snapshots" / "presets" / PRESET_GROUP / f"{key}.json"


def environment(a: Authors, data_dir: Path, artifacts: Path, threads: int | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "PYTHON"))}
    env.update(PYTHONPATH=str(a.src), WANDB_MODE="disabled", DRIFT_DATA_DIR=str(data_dir),
               DRIFT_ARTIFACTS_DIR=str(artifacts), PYTHONWARNINGS="ignore")
    if threads:  # as on our side: OpenMP/MKL pools match runtime.num_threads
        env.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    return env


def command(a: Authors, model: str, seed: int, runs_root: Path, threads: int = 2) -> list[str]:
    return [str(a.python), "-m", "drift_happens.cli.main", "experiment", "run",
            str(preset(a, PRESETS[model])), "--seed", str(seed),
            "--set", "runtime.device=cpu", "--set", f"runtime.num_threads={threads}",
            "--wandb-mode", "disabled", "--runs-root", str(runs_root), "--no-resume"]


def run(a: Authors, model: str, seed: int, data_dir: Path, work: Path, threads: int = 2) -> AuthorsRun:
    """One timed run of their CLI in a fresh ``work`` folder; raises with the log's tail on failure."""
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / f"authors-{PRESETS[model]}-seed{seed}.log"
    runs_root = work / "runs"
    with log_path.open("w") as log:
        t0 = time.perf_counter()
        proc = subprocess.run(command(a, model, seed, runs_root, threads), cwd=work, stdout=log,
                              stderr=subprocess.STDOUT, env=environment(a, data_dir, work / "artifacts", threads))
        seconds = time.perf_counter() - t0
    if proc.returncode:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"authors' {model} seed {seed} exited {proc.returncode}; log {log_path}:\n{tail}")
    found = sorted(runs_root.rglob("results/drift_matrix.json"))
    if len(found) != 1:
        raise RuntimeError(f"{runs_root}: expected one results/drift_matrix.json, found {len(found)}")
    slices, matrix = read_matrix(found[0])
    return AuthorsRun(model, seed, seconds, slices, matrix)


def _slice_key(label: str):
    try:
        return (0, float(label), label)
    except ValueError:
        return (1, 0.0, label)


def read_matrix(path: Path, metric: str = "accuracy") -> tuple[list[str], np.ndarray]:
    """Their ``{train_slice: {eval_slice: {metric: value}}}`` as (slices, K x K in %, NaN = empty)."""
    raw = json.loads(Path(path).read_text())
    slices = sorted({s for row in raw.values() for s in row} | set(raw), key=_slice_key)
    pos = {s: k for k, s in enumerate(slices)}
    M = np.full((len(slices), len(slices)), np.nan)
    for train, row in raw.items():
        for ev, metrics in row.items():
            if metric in metrics:
                M[pos[train], pos[ev]] = 100.0 * float(metrics[metric])
    return slices, M


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, required=True,
                    help="DRIFT_DATA_DIR: a folder holding yearbook/raw/<the generated tree>")
    ap.add_argument("--model", choices=sorted(PRESETS), default="MLP-S")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=None, help="Run folder (default: a temporary one).")
    ap.add_argument("--threads", type=int, default=2, help="runtime.num_threads (the anchor uses 2).")
    ap.add_argument("--json", type=Path, default=None, help="Write seconds and the matrix (%%) here.")
    ap.add_argument("--authors-src", type=Path, default=None)
    ap.add_argument("--authors-venv", type=Path, default=None)
    args = ap.parse_args()
    a = locate(args.authors_src, args.authors_venv)
    reason = unavailable(a)
    if reason:
        print(f"authors' side skipped: {reason}")
        return
    import tempfile

    with tempfile.TemporaryDirectory(prefix="authors-") as d:
        r = run(a, args.model, args.seed, args.data.resolve(), args.work or Path(d), args.threads)
    sys.path.insert(0, str(REPO / "src"))
    from driftmatrix.analysis.summary import future, in_distribution

    print(f"authors {r.model} seed {r.seed}: {r.seconds:.1f} s, ID {in_distribution(r.matrix):.1f} "
          f"future {future(r.matrix):.1f} ({len(r.slices)} slices)")
    if args.json:
        args.json.write_text(json.dumps({"model": r.model, "seed": r.seed, "seconds": r.seconds, "slices": r.slices,
                                         "matrix": np.where(np.isnan(r.matrix), None, r.matrix).tolist()}))


if __name__ == "__main__":
    main()
