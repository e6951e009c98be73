"""The text path through the real stages: loss weights per cutoff, and an end-to-end CLI smoke run."""

from __future__ import annotations

import json
import time

import numpy as np
import yaml
from textfixtures import text_raw
from typer.testing import CliRunner

from driftmatrix.learn import tasks
from driftmatrix.cli import app
from driftmatrix.stages import embed as embed_stage
from driftmatrix.units.experiment import Experiment
from driftmatrix.learn.fit import cutoff_train_rows


def test_loss_weights_come_from_the_cutoffs_training_rows_only(review_slices, counting_encoder, tmp_path, monkeypatch):
    params, slices = review_slices
    embed_stage.run(params, slices, tmp_path)
    exp = Experiment(params, "FFN-S", slices, tmp_path)
    seen = []
    real = tasks.make_loss
    monkeypatch.setattr(tasks, "make_loss", lambda task, targets: seen.append(targets) or real(task, targets))
    for cutoff in range(len(exp.labels)):
        exp.train_unit(exp.plan.unit(0, cutoff))
    for cutoff, targets in enumerate(seen):
        rows = cutoff_train_rows(exp.slice_ids, exp.split, cutoff)
        np.testing.assert_array_equal(targets, exp.targets_np[rows])
        assert exp.slice_ids[rows].max() == cutoff and (exp.split[rows] == "train").all()
    assert len(seen[0]) < len(seen[-1]) < len(exp.targets_np)


def test_text_pipeline_end_to_end_on_generated_reviews(tmp_path, monkeypatch):
    """generate -> ingest -> slice -> embed (MiniLM-L6 from its PyPI package) -> train -> evaluate
    -> matrices for FFN-S, one seed, two epochs, temporary MLflow store."""
    started = time.perf_counter()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    raw = text_raw(tmp_path, train={"epochs": 2, "seeds": [0]}, synthetic={"per_year": 60},
                   embed={"token_encoder": "MiniLM-L6", "max_length": 32})
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(raw))
    out = tmp_path / "out"
    run = CliRunner().invoke
    common = ["--params", str(tmp_path / "p.yaml")]
    for args in (["data", "generate", *common],
                 ["ingest", *common, "--out", str(out / "ingested")],
                 ["slice", *common, "--src", str(out / "ingested"), "--out", str(out / "slices")],
                 ["embed", *common, "--slices", str(out / "slices"), "--out", str(out / "features")],
                 ["train", "-m", "FFN-S", *common, "--slices", str(out / "slices"), "--out", str(out / "ckpt"),
                  "--features", str(out / "features")],
                 ["evaluate", "-m", "FFN-S", *common, "--slices", str(out / "slices"), "--checkpoints",
                  str(out / "ckpt"), "--out", str(out / "scores"), "--features", str(out / "features")],
                 ["matrices", *common, "--slices", str(out / "slices"), "--scores", str(out / "scores"),
                  "--out", str(out / "matrices"), "--metrics", str(out / "metrics.json"),  # never the repo's
                  "--plots", str(out / "plots")]):
        result = run(app, args, catch_exceptions=False)
        assert result.exit_code == 0, (args, result.output)
    (feature_dir,) = (p for p in (out / "features").iterdir() if p.is_dir())
    assert feature_dir.name.startswith("MiniLM-L6-len32-")
    doc = json.loads((out / "matrices" / "FFN-S.json").read_text())
    values = np.array(doc["values"], dtype=float)
    assert values.shape == (4, 4) and doc["slices"] == ["2014-H1", "2014-H2", "2015-H1", "2015-H2"]
    assert np.isfinite(values).all() and (values > 0).all() and doc["metric"] == "Balanced MSE"
    assert time.perf_counter() - started < 90
