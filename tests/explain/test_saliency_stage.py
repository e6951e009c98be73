"""The saliency stage on checkpoints of the fading-local-cue scenario.

The generator hides a 4x4 class texture at a random spot inside ``cue_region()``. A CNN reads
that texture; an MLP cannot localise it and reads the global oval instead. So the CNN's maps must
be more concentrated than the MLP's and put their mass in the cue region.
"""

import json

import numpy as np
import pandas as pd
import pytest

from driftmatrix.config import ConfigError, replace
from driftmatrix.data.synthetic import cue_region
from driftmatrix.explain import concentration as conc
from driftmatrix.stages import saliency as stage


@pytest.fixture(scope="module")
def result(trained):
    tmp, params, labels = trained.tmp, trained.params, trained.labels
    cfg = {"pairs": [{"model": m, "cutoff": int(labels[trained.cutoff])} for m in trained.models],  # YAML gives ints
           "eval_years": [labels[1], labels[6]], "n_images": 200, "batch_size": 64}
    params = replace(params, extra={"saliency": cfg})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        out = stage.run(params, tmp / "slices", tmp / "checkpoints", tmp / "saliency")
    return tmp, labels, out, trained.cutoff


def _row(out, model, eval_year):
    return next(r for r in out["rows"] if r["model"] == model and r["eval"] == eval_year)


def test_cnn_is_more_concentrated_than_mlp_where_the_cue_is(result):
    tmp, labels, out, cutoff = result
    early = labels[1]  # a cue-bearing year inside the training window (its test split)
    cnn, mlp = _row(out, "CNN-S", early), _row(out, "MLP-S", early)
    assert cnn["top5_share"] > mlp["top5_share"] + 0.015          # measured 0.113 vs 0.085
    assert cnn["top5_share_img"] > mlp["top5_share_img"] + 0.03   # measured 0.147 vs 0.088
    assert cnn["entropy"] < mlp["entropy"] and cnn["entropy_img"] < mlp["entropy_img"]
    rows, cols = cue_region()
    maps = {m: np.load(tmp / "saliency" / "arrays" / m / f"cutoff{labels[cutoff]}_eval{early}.npz")["mean"]
            for m in ("CNN-S", "MLP-S")}
    area = (rows.stop - rows.start) * (cols.stop - cols.start) / maps["CNN-S"].size
    cnn_in = conc.region_share(maps["CNN-S"], rows, cols)
    assert cnn_in > 1.8 * area and cnn_in > conc.region_share(maps["MLP-S"], rows, cols)


def test_outputs_tables_and_figures(result):
    tmp, labels, out, cutoff = result
    root = tmp / "saliency"
    with np.load(root / "arrays" / "CNN-S" / f"cutoff{labels[cutoff]}_eval{labels[6]}.npz") as z:
        assert z["maps"].shape == (1, 32, 32) and z["image"].shape == (32, 32, 3)
        assert list(z["seeds"]) == [0] and len(z["rows"]) == 150  # the whole later slice (< 200)
        assert 0 <= z["mean"].min() and z["mean"].max() <= 1
    with np.load(root / "arrays" / "CNN-S" / f"cutoff{labels[cutoff]}_eval{labels[1]}.npz") as z:
        assert len(z["rows"]) == 45  # test split only: the slice was in the training window
    table = pd.read_csv(root / "concentration.csv")
    assert len(table) == 4 and set(table["model"]) == {"CNN-S", "MLP-S"} and set(table["block"]) == {2}
    summary = pd.read_csv(root / "concentration_summary.csv")
    assert {"top5_share", "top5_share_std", "entropy", "top5_share_img"} <= set(summary.columns)
    assert json.loads((root / "concentration.json").read_text())["summary"]
    for year in (labels[1], labels[6]):
        assert (root / f"saliency_eval{year}.png").stat().st_size > 1000


def test_logged_to_the_checkpoint_run(result):
    from mlflow import MlflowClient

    tmp, labels, _, cutoff = result
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    (run,) = client.search_experiments(filter_string="name = 'explain-test'") and client.search_runs(
        [client.get_experiment_by_name("explain-test").experiment_id],
        f"tags.model = 'CNN-S' and tags.cutoff = '{labels[cutoff]}'")
    run_id = run.info.run_id
    assert f"saliency_top5_share_eval{labels[1]}" in run.data.metrics
    # attached through the client: the run keeps its training end time, not the saliency time
    record = json.loads(next((tmp / "checkpoints" / "CNN-S").glob("*/unit.json")).read_text())
    assert run.info.end_time == int(record["ended"] * 1000)
    names = {a.path for a in client.list_artifacts(run_id, "saliency")}
    assert f"saliency/cutoff{labels[cutoff]}_eval{labels[1]}.npz" in names


def test_an_untracked_run_is_logged_later_from_its_folder(result, trained, tmp_path):
    """`driftmatrix saliency --no-mlflow` (the DVC stage) logs nothing; the report stage's
    log_folder then puts each map's metrics and files on its unit's run."""
    from mlflow import MlflowClient

    tmp, labels, first, cutoff = result
    cfg = {"pairs": [{"model": "CNN-S", "cutoff": labels[cutoff]}], "eval_years": [labels[1]], "n_images": 50}
    params = replace(trained.params, extra={"saliency": cfg})
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("explain-test").experiment_id],
                                f"tags.model = 'CNN-S' and tags.cutoff = '{labels[cutoff]}'")
    key = f"saliency_top5_share_eval{labels[1]}"
    before = len(client.get_metric_history(run.info.run_id, key))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        out = stage.run(params, tmp / "slices", tmp / "checkpoints", tmp_path / "saliency", log_mlflow=False)
        assert len(client.get_metric_history(run.info.run_id, key)) == before
        logged = json.loads((tmp_path / "saliency" / "concentration.json").read_text())["logged"]
        assert [(e["model"], e["unit_key"], e["eval"]) for e in logged] == \
            [("CNN-S", run.data.tags["unit_key"], labels[1])]
        assert stage.log_folder(params, tmp_path / "saliency") == 1
    history = client.get_metric_history(run.info.run_id, key)
    assert len(history) == before + 1 and history[-1].value == pytest.approx(out["rows"][0]["top5_share"])
    assert stage.log_folder(params, tmp_path / "nothing-here") == 0


def test_config_errors_name_the_key(trained):
    params = trained.params
    with pytest.raises(ConfigError, match="pairs"):
        stage.saliency_config(replace(params, extra={"saliency": {"pairs": [{"model": "CNN-S"}], "eval_years": [1]}}))
    with pytest.raises(ConfigError, match="unknown"):
        stage.saliency_config(replace(params, extra={"saliency": {"pair": []}}))


def test_cli_writes_the_tables(trained, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from driftmatrix.cli import app

    tmp, labels = trained.tmp, trained.labels
    raw = {**trained.raw, "saliency": {"pairs": [{"model": "CNN-S", "cutoff": labels[trained.cutoff]}],
                                       "eval_years": [labels[1]], "n_images": 20}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["saliency", "-p", str(tmp_path / "params.yaml"), "--slices", str(tmp / "slices"),
                                      "--checkpoints", str(tmp / "checkpoints"), "--out", str(tmp_path / "out"),
                                      "--no-mlflow"])
    assert result.exit_code == 0, result.output
    assert "CNN-S" in result.output and "top-5% share" in result.output
    assert len(pd.read_csv(tmp_path / "out" / "concentration.csv")) == 1


def test_stage_runs_a_frozen_encoder_head_from_pixels(tmp_path):
    """EffNet-L0 (offline weights): the checkpoint is a head on cached features; the stage puts the
    frozen backbone in front of it and differentiates down to the portrait."""
    import torch

    from driftmatrix.data import slicing

    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.config import parse_params
    from driftmatrix.data import synthetic
    from driftmatrix.stages import ingest
    from driftmatrix.stages import embed as embed_stage
    from driftmatrix.stages.train import train_units
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.experiment import Experiment

    params = parse_params({
        "dataset": {"name": "frozen", "path": str(tmp_path / "raw")},
        "synthetic": {"years": 3, "per_year": 16}, "slicing": {"min_samples": 5},
        "train": {"seeds": [0], "epochs": 1, "device": "cpu"}, "models": {"EffNet-L0": {}}})
    synthetic.write_dataset(params.synthetic, tmp_path / "raw")
    ingest.run(params, tmp_path / "ingested")
    slice_stage.run(params, tmp_path / "ingested", tmp_path / "slices")
    embed_stage.run(params, tmp_path / "slices", tmp_path / "features")
    exp = Experiment(params, "EffNet-L0", tmp_path / "slices", tmp_path / "features")
    train_units(exp, CheckpointStore(tmp_path / "checkpoints", "EffNet-L0"), [exp.plan.unit(0, 1)])

    params = replace(params, extra={"saliency": {"pairs": [{"model": "EffNet-L0", "cutoff": exp.labels[1]}],
                                                 "eval_years": [exp.labels[2]], "n_images": 6}})
    out = stage.run(params, tmp_path / "slices", tmp_path / "checkpoints", tmp_path / "sal",
                    log_mlflow=False, features_dir=tmp_path / "features")
    (row,) = out["rows"]
    assert row["model"] == "EffNet-L0" and row["n_images"] == 6 and 0.05 <= row["top5_share"] <= 1
    with np.load(tmp_path / "sal" / "arrays" / "EffNet-L0" / f"cutoff{exp.labels[1]}_eval{exp.labels[2]}.npz") as z:
        assert z["maps"].shape == (1, 32, 32) and np.isfinite(z["maps"]).all() and z["maps"].max() > 0


def test_pairs_that_cannot_apply_are_skipped_with_a_reason(trained, tmp_path):
    """Saliency of a text model, of a model params.yaml does not run, or at an unknown cutoff is
    skipped and explained instead of stopping `dvc repro`."""
    labels = trained.labels
    extra = {"saliency": {"pairs": [{"model": "FFN-S", "cutoff": labels[1]}, {"model": "ResNet-S", "cutoff": labels[1]},
                                    {"model": "CNN-S", "cutoff": "1066"}], "eval_years": [labels[2]]}}
    params = replace(trained.params, extra={**trained.params.extra, **extra})
    kept, skipped = stage.applicable_pairs(stage.saliency_config(params), params, labels)
    assert kept == [] and len(skipped) == 3
    assert "not among params.yaml's models" in skipped[1] and "1066 is not a slice label" in skipped[2]
    result = stage.run(params, trained.tmp / "slices", trained.tmp / "checkpoints", tmp_path / "out", log_mlflow=False)
    assert result == {"cells": 0, "summary": []}
    note = (tmp_path / "out" / "README.txt").read_text()
    assert "nothing to compute" in note and "FFN-S" in note
