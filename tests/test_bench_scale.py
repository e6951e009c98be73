"""bench/scale.py end to end at a tiny size (sqlite only): every figure is in its JSON and sane.
It reports times; it never fails on them."""

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "bench"
sys.path.insert(0, str(BENCH))

import scale  # noqa: E402


def test_variants_are_distinct_cheap_models_without_dots():
    models = scale.variants(20)
    assert len(models) == 20 and not any("." in name for name in models)
    assert {"Prior", "LogReg", "MLP-Tab"} <= set(models)
    assert list(scale.variants(5)) == list(models)[:5]  # a few already mix the kinds
    with pytest.raises(SystemExit):
        scale.variants(21)


def test_scale_params_size_the_study():
    p = scale.scale_params(4, 7, 3, 40)
    assert len(p["models"]) * p["synthetic"]["years"] * len(p["train"]["seeds"]) == 4 * 7 * 3
    assert p["synthetic"]["span"] == 7 and p["synthetic"]["per_year"] == 40
    assert p["dataset"]["source"] == "table" and p["saliency"]["pairs"] == []


@pytest.mark.slow
def test_tiny_run_writes_every_figure(tmp_path, capsys):
    """One side, sqlite, end to end. `--small-seeds` (on by default) runs the same `side()` again at
    fewer seeds: a second `dvc repro` of the same code, about 45 s of the suite, so its figures are
    checked on this run's side standing in for it."""
    out = tmp_path / "scale.json"
    env = {**os.environ, "PYTHONPATH": str(BENCH.parent / "src")}
    env.pop("MLFLOW_TRACKING_URI", None)
    run = subprocess.run([sys.executable, str(BENCH / "scale.py"), "--models", "2", "--periods", "3", "--seeds", "2",
                          "--small-seeds", "0", "--stores", "sqlite", "--per-year", "40", "--json", str(out)],
                         capture_output=True, text=True, env=env, timeout=3600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    res = json.loads(out.read_text())
    fig = res["figures"]
    assert fig["units"] == 12 and fig["report_models"] == 2
    assert set(res["sides"]) == {"sqlite"} and "memory_ratio" not in fig  # --small-seeds 0: no second run
    sq = res["sides"]["sqlite"]
    assert "error" not in sq and "warning" not in sq, sq
    assert sq["bookkeeping"]["runs_created"] == 12 and sq["bookkeeping"]["units"] == 12
    assert sq["plan"]["units"] == 12 and sq["plan"]["cells"] == 12 * 3
    for key in ("bookkeeping_ms_per_unit_sqlite", "plan_keys_ms_per_unit", "matrices_s", "report_s", "report_mb",
                "peak_rss_mb", "paper_bookkeeping_sqlite_min", "paper_plan_keys_min"):
        assert isinstance(fig[key], float) and math.isfinite(fig[key]) and fig[key] > 0, (key, fig[key])
    assert 0 < fig["bookkeeping_ms_per_unit_sqlite"] < 60_000 and 10 < fig["peak_rss_mb"] < 20_000
    assert 0.001 < fig["report_mb"] < 100
    if fig["report_load_s"] is not None:  # a Chromium on PATH
        assert 0 <= fig["report_load_s"] < 600
    assert set(fig["targets"]) == set(scale.TARGETS)
    assert all(t["met"] in (True, False) for k, t in fig["targets"].items()
               if k not in ("bookkeeping_ms_per_unit_server", "report_load_s"))
    assert "bench-scale: 12 units" in run.stdout
    # progress while `dvc repro` runs: one line per stage it starts, the models' train stages among them
    started = re.findall(r"^  sqlite: stage (\d+) (\S+) at \d+:\d\d$", run.stdout, re.M)
    assert [int(n) for n, _ in started] == list(range(1, len(started) + 1))
    assert {s for _, s in started} >= {"ingest", "train@Prior", "evaluate@Prior", "matrices", "report"}, started
    # the small side's figures: peak memory against fewer units (this side, at half the units and memory)
    small = {**sq, "units": 6, "peak_rss_mb": sq["peak_rss_mb"] / 2}
    both = {**res, "sides": {"sqlite": sq, "sqlite-small": small}}
    fig2 = scale.summary(both)
    assert fig2["small_units"] == 6 and fig2["small_peak_rss_mb"] == sq["peak_rss_mb"] / 2
    assert fig2["memory_ratio"] == 2.0
    capsys.readouterr()
    scale.print_summary(fig2, both)
    assert f"at 12 units vs {sq['peak_rss_mb'] / 2:.0f} MiB at 6 units (x2.00)" in capsys.readouterr().out
