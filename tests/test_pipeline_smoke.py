"""The real pipeline end to end on tiny data, with a temporary MLflow store."""

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from driftmatrix.units import store as checkpoints
from driftmatrix.units import experiment
from driftmatrix.units import plan
from testkit.pipeline import Paths, run_all, train_and_evaluate
from driftmatrix.tracking.runs import configure, load_registered
from tinyparams import TINY_RUN_MODELS as MODELS


@pytest.fixture
def finished(tiny_run):
    """The session's tiny pipeline (tests/conftest.py): MLP-S, CNN-S (2 epochs) and Prior, registered."""
    return tiny_run.params, tiny_run.paths


def test_run_all_runs_the_validation_gate_like_dvc_repro(finished):
    _, paths = finished
    summary = json.loads((paths.validation / "summary.json").read_text())
    assert summary["passed"] is True and (paths.validation / "results.json").exists()


def test_a_failing_gate_stops_run_all_before_any_training(tmp_path, tiny_params):
    from driftmatrix.audit.gate import ValidationFailed

    params = tiny_params(tmp_path, validation={"min_rows": 1000})
    paths = Paths(tmp_path / "out")
    with pytest.raises(ValidationFailed, match="min_rows"):
        run_all(params, paths, generate=True)
    assert json.loads((paths.validation / "summary.json").read_text())["passed"] is False
    assert not paths.checkpoints.exists() and not paths.matrices.exists()


def cutoff_runs(params, status="FINISHED"):
    exp_id = configure(params.tracking)
    runs = MlflowClient().search_runs([exp_id], filter_string="tags.kind = 'cutoff'", max_results=1000)
    return [r for r in runs if r.info.status == status]


def test_matrices_have_protocol_shape_and_sane_values(finished):
    params, paths = finished
    for model in MODELS:
        doc = json.loads((paths.matrices / f"{model}.json").read_text())
        values = np.array(doc["values"], dtype=float)
        assert values.shape == (4, 4) and doc["slices"] == ["1950", "1951", "1952", "1953"]
        assert np.isfinite(values).all() and (values >= 0).all() and (values <= 100).all()
        assert np.array(doc["seed_values"], dtype=float).shape == (2, 4, 4)
    metrics = json.loads((paths.root / "metrics.json").read_text())
    assert set(metrics) == set(MODELS) and {"in_distribution", "future", "decay"} <= set(metrics["CNN-S"])
    assert (paths.root / "report" / "report.html").stat().st_size > 10_000


def test_one_finished_run_per_model_cutoff_seed_with_tags(finished):
    params, _ = finished
    runs = cutoff_runs(params)
    assert len(runs) == len(MODELS) * 4 * 2
    keys = {(r.data.tags["model"], r.data.tags["cutoff"], r.data.tags["seed"]) for r in runs}
    assert len(keys) == len(runs)
    run = next(r for r in runs if r.data.tags["model"] == "CNN-S" and r.data.tags["cutoff"] == "1951")
    assert run.info.run_name == "CNN-S · cutoff 1951 · seed " + run.data.tags["seed"]
    for tag in ("dataset", "family", "data_version", "git_commit", "unit_key", "window"):
        assert run.data.tags[tag]
    assert run.data.tags["family"] == "CNN" and run.data.params["epochs"] == "2"
    assert {"train_loss", "in_distribution", "future_mean"} <= set(run.data.metrics)
    history = MlflowClient().get_metric_history(run.info.run_id, "train_loss")
    assert len(history) == 2
    artifacts = [a.path for a in MlflowClient().list_artifacts(run.info.run_id, "drift_row")]
    assert sorted(p.rsplit(".", 1)[1] for p in artifacts) == ["csv", "json"]
    # the row came with the run's creation: one evaluation input beside the training one, the
    # row's metrics at step K (= 4 slices), and the row file naming this very run
    full = MlflowClient().get_run(run.info.run_id)
    contexts = sorted(t.value for d in full.inputs.dataset_inputs for t in d.tags if t.key == "mlflow.data.context")
    assert contexts == ["evaluation", "training"]
    assert [m.step for m in MlflowClient().get_metric_history(run.info.run_id, "in_distribution")] == [4]
    row_json = next(p for p in artifacts if p.endswith(".json"))
    with tempfile.TemporaryDirectory() as tmp:
        row = json.loads(Path(MlflowClient().download_artifacts(run.info.run_id, row_json, tmp)).read_text())
    assert row["run_id"] == run.info.run_id and len(row["values"]) == 4
    assert row["values"][1] == pytest.approx(run.data.metrics["in_distribution"])


def test_registry_alias_resolves_to_a_model_that_predicts(finished):
    params, paths = finished
    model = load_registered(plan.planned_unit(params, "CNN-S", "1952", 0, paths.slices, paths.checkpoints))
    version = MlflowClient().get_model_version_by_alias("tiny.CNN-S", "cutoff-1952")
    assert version.tags["cutoff"] == "1952" and version.tags["seed"] == "0"
    assert MlflowClient().get_model_version_by_alias("tiny.CNN-S", "cutoff-1952-seed-1").tags["seed"] == "1"
    images = np.load(paths.slices / "images.npy")[:5]
    from driftmatrix.features.inputs import PixelInputs
    import torch

    out = model(PixelInputs(images).batch(torch.arange(5))[0])
    assert out.shape == (5, 2)


def test_rerun_skips_finished_work_and_redoes_a_killed_unit(finished, caplog):
    params, paths = finished
    before = {r.info.run_id for r in cutoff_runs(params)}
    # Simulate a unit killed half-way: its record is gone and a RUNNING run was left behind.
    exp = experiment.Experiment(params, "MLP-S", paths.slices)
    unit = exp.plan.unit(1, 2)
    store = checkpoints.CheckpointStore(paths.checkpoints, "MLP-S")
    weights = store.folder(unit.key) / store.WEIGHTS
    original = weights.read_bytes()
    (store.folder(unit.key) / store.RECORD).unlink()
    exp_id = configure(params.tracking)
    MlflowClient().create_run(exp_id, tags=unit.tags())  # the half-finished leftover
    caplog.set_level("INFO")
    train_and_evaluate(params, paths, ["MLP-S"])
    assert any("8 units in the plan (cumulative window), 7 done, 1 to train" in m for m in caplog.messages)
    assert weights.read_bytes() == original  # redone, bit-identical
    after = cutoff_runs(params)
    assert {r.info.run_id for r in after} == before  # nothing duplicated, nothing lost
    assert not cutoff_runs(params, "RUNNING")
