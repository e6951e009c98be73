"""What the label-free estimates add to the evaluate stages' time (issue 27: at most 10%).

On a finished run (`make repro`), re-times without touching it: each model's evaluate stage
scoring into a scratch folder with a scratch MLflow store (every cell scored and every run
created, as on a fresh run), then the estimates stage on those scores, the forward-pass summaries
those cells carry (recomputed on outputs of the same shapes), and what the report stage adds for
the estimates (their section, and their MLflow run in a process where MLflow is already up).
Prints each and the ratio:

    python bench/estimate_cost.py [-p params.yaml] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np


def wall(cmd: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True)
    return time.perf_counter() - t


def summaries_time(scores: Path) -> tuple[float, int]:
    """Seconds to recompute every stored cell's forward-pass summary (and held-out correctness) on
    random outputs of the same shape, and the number of cells."""
    from driftmatrix.learn.score import forward_stats, row_correctness

    rng = np.random.default_rng(0)
    shapes = [(c["n_eval"], len(c["stats"]["pred"]), c.get("evalset") == "test")
              for p in scores.glob("*/*.json") if p.name != "environment.json"
              for c in json.loads(p.read_text())["cells"].values() if c.get("stats")]
    cells = [(rng.normal(size=(n, k)) * 4, rng.integers(0, k, n), test) for n, k, test in shapes]
    t = time.perf_counter()
    for logits, y, test in cells:
        doc = forward_stats(logits, y, "multiclass" if logits.shape[1] > 2 else "binary")
        if test:
            doc.update(row_correctness(logits, y))
        json.dumps(doc)
    return time.perf_counter() - t, len(cells)


def report_share(params, estimates: Path) -> float:
    """Seconds the report stage spends on the estimates: their section, and their MLflow run once
    MLflow is up (``params`` point at the scratch store)."""
    from driftmatrix.tracking import runs as tracking
    from driftmatrix.stages import estimates as stage
    from driftmatrix.reporting import estimates as section

    with tracking.stage_run(tracking.configure(params.tracking), "warm-up", {"kind": "bench"}):
        pass  # MLflow imported and its store open, as in the report stage before this point
    t = time.perf_counter()
    section.section(estimates)
    stage.log_folder(params, estimates)
    return time.perf_counter() - t


def main() -> None:
    import yaml

    from driftmatrix.config import load_params, to_raw

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--params", default="params.yaml")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    params = load_params(a.params)
    for rep in range(a.repeat):
        with tempfile.TemporaryDirectory() as tmp:
            scores, out, scratch = Path(tmp) / "scores", Path(tmp) / "estimates", Path(tmp) / "params.yaml"
            raw = to_raw(params)
            raw["tracking"] = {**raw["tracking"], "uri": f"sqlite:///{tmp}/mlflow.db", "artifact_root": f"{tmp}/mlruns"}
            scratch.write_text(yaml.safe_dump(raw))
            evaluate = {m: wall(["driftmatrix", "evaluate", "-m", m, "-p", str(scratch), "--out", str(scores)])
                        for m in params.models}
            stage = wall(["driftmatrix", "backtest", "-p", str(scratch), "--scores", str(scores), "--out", str(out),
                          "--metrics", str(Path(tmp) / "metrics.json")])
            summaries, n_cells = summaries_time(scores)
            report = report_share(load_params(scratch), out)
        total_eval, extra = sum(evaluate.values()), stage + summaries + report
        print(f"run {rep + 1}: evaluate {total_eval:.2f} s ("
              + ", ".join(f"{m} {s:.2f}" for m, s in evaluate.items())
              + f"); estimates stage {stage:.2f} s, summaries of {n_cells} cells {summaries:.2f} s, "
              f"report's share {report:.2f} s: +{extra:.2f} s = {100 * extra / total_eval:.1f}% of evaluate")


if __name__ == "__main__":
    main()
