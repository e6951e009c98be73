"""The matrices stage assembles exactly the current plan's cells (hand-made score documents)."""

import json
from pathlib import Path

import numpy as np
import pytest

from driftmatrix.stages import matrices
from driftmatrix.config import parse_params
from driftmatrix.data.table import DataError, DatasetMeta
from driftmatrix.units.store import ScoreStore
from driftmatrix.units.environment import Environment
from driftmatrix.units.plan import model_plan

ENV = Environment("fp32", "cpu", 1, {"torch": "t", "numpy": "n"})

SLICES = ["2014-H1", "2014-H2", "2015-H1", "2015-H2"]
META = DatasetMeta(name="toy", task="binary", input_kind="image", class_names=("F", "M"))


def _manifest(labels=SLICES):
    return {"dataset": META.to_dict(), "data_version": "v",
            "slices": [{"index": k, "label": lab, "hash": f"h-{lab}"} for k, lab in enumerate(labels)]}


def _params(models, seeds=(0, 1)):
    return parse_params({"dataset": {"name": "toy"}, "models": models, "train": {"seeds": list(seeds)},
                         "tracking": {"experiment": "test-matrices"}})


def _matrix(diag, step):
    """diag on the diagonal, losing ``step`` per slice ahead, backward cells = diag - 1."""
    i, j = np.indices((4, 4))
    return np.where(j >= i, diag - step * (j - i), diag - 1.0)


def write_scores(root, params, manifest, model, seed_diag, step, hole=None):
    """Score documents of ``model`` as the evaluate stage writes them (every cell of its plan)."""
    plan = model_plan(params, model, manifest, ENV)
    hashes = [s["hash"] for s in manifest["slices"]]
    store = ScoreStore(root, model)
    store.write_environment(ENV.to_dict())  # as the evaluate stage records it
    for unit in plan.units:
        if unit.seed not in seed_diag:
            continue
        M = _matrix(seed_diag[unit.seed], step)
        cells = {}
        for cell in plan.cells(unit, hashes):
            value = None if hole == (unit.seed, unit.cutoff_index, cell.j) else float(M[unit.cutoff_index, cell.j])
            cells[cell.key] = {"value": value, "n_eval": 10 + cell.j, "left_out": []}
        store.write(unit.key, {"unit": {"key": unit.key}, "cells": cells,
                               "seconds": 10.0 * unit.seed + unit.cutoff_index + 0.5})  # its training time


@pytest.fixture
def setup(tmp_path):
    params = _params({"MLP-S": {}, "CNN-S": {}, "ViT-S": {}})
    manifest = _manifest()
    slices = tmp_path / "slices"
    slices.mkdir()
    (slices / "manifest.json").write_text(json.dumps(manifest))
    root = tmp_path / "scores"
    write_scores(root, params, manifest, "MLP-S", {0: 90.0, 1: 92.0}, 2.0, hole=(1, 0, 3))
    write_scores(root, params, manifest, "CNN-S", {0: 90.0}, 5.0)  # seed 1 never scored
    return params, manifest, slices, root


def test_assembles_the_seed_stack_of_the_plan(setup):
    params, _, slices, root = setup
    models = matrices.read_scores(params, slices, root)
    assert set(models) == {"MLP-S", "CNN-S"}  # ViT-S has no scored cell: left out
    mlp = models["MLP-S"]
    assert mlp.seed_values.shape == (2, 4, 4) and mlp.seeds == [0, 1]
    assert mlp.mean[0, 3] == pytest.approx(84.0)  # seed 1 empty there: seed 0 only
    assert mlp.std[0, 0] == pytest.approx(np.sqrt(2.0))
    assert mlp.extra["n_eval"][2] == [10, 11, 12, 13] and mlp.extra["window"] == "cumulative"
    cnn = models["CNN-S"]
    assert np.isnan(cnn.seed_values[1]).all() and cnn.extra["missing_cells"] == 16


def test_rows_outside_the_configuration_are_stale_never_averaged(setup):
    params, manifest, slices, root = setup
    # a third seed, another epoch setting and a longer timeline were scored once...
    write_scores(root, _params({"MLP-S": {}}, seeds=(0, 1, 2)), manifest, "MLP-S", {2: 10.0}, 0.0)
    write_scores(root, _params({"MLP-S": {"epochs": 3}}), manifest, "MLP-S", {0: 20.0, 1: 20.0}, 0.0)
    longer = _manifest(SLICES + ["2016-H1"])
    (slices / "manifest.json").write_text(json.dumps(manifest))
    mlp = matrices.read_scores(params, slices, root)["MLP-S"]
    assert mlp.seeds == [0, 1] and mlp.mean[0, 0] == pytest.approx(91.0)
    assert mlp.extra["stale"] == 1 * 4 + 2 * 4  # seed 2's four units, the 3-epoch units
    # ... and a K change reads the new plan: old cells keep their values, the new column is empty
    (slices / "manifest.json").write_text(json.dumps(longer))
    grown = matrices.read_scores(params, slices, root)["MLP-S"]
    assert grown.seed_values.shape == (2, 5, 5) and np.isnan(grown.seed_values[:, :, 4]).all()
    assert np.array_equal(grown.seed_values[:, :4, :4], mlp.seed_values, equal_nan=True)


def test_stage_outputs_metrics_and_the_report_stage_draws_and_logs_them(setup, tmp_path, monkeypatch):
    import mlflow

    from driftmatrix.stages import report

    params, _, slices, root = setup
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "outputs" / "matrices"
    (tmp_path / "outputs" / "audit").mkdir(parents=True)
    (tmp_path / "outputs" / "audit" / "report.html").write_text("<html></html>")
    matrices.run(params, root, out, slices_dir=slices)

    metrics = json.loads((tmp_path / "outputs" / "metrics.json").read_text())
    assert set(metrics) == {"MLP-S", "CNN-S"}
    cnn = metrics["CNN-S"]
    assert cnn["in_distribution"] == pytest.approx(90.0)
    # future lags 1,1,1,2,2,3 -> 90 - 5 * 10/6
    assert cnn["future"] == pytest.approx(90 - 50 / 6)
    assert cnn["decay"] == pytest.approx(50 / 6)
    assert cnn["backward"] == pytest.approx(89.0)
    summary = json.loads((out / "summary.json").read_text())
    assert [r["model"] for r in summary["models"]] == ["CNN-S", "MLP-S"]
    assert summary["cutoffs"] == ["2014-H1", "2014-H2", "2015-H1"]  # K - 1 = 3 candidates
    back = json.loads((out / "MLP-S.json").read_text())
    assert back["seeds"] == [0, 1] and back["seed_values"][1][0][3] is None
    assert back["values"][0][0] == pytest.approx(91.0)
    assert back["window"] == "cumulative" and back["precision"] == "fp32" and back["stale"] == 0
    # each (seed, cutoff)'s measured training seconds, from its score doc: a retraining policy's cost
    assert back["seconds"] == [[0.5, 1.5, 2.5, 3.5], [10.5, 11.5, 12.5, 13.5]]
    assert json.loads((out / "CNN-S.json").read_text())["seconds"] == [[0.5, 1.5, 2.5, 3.5], [None] * 4]
    assert (out / "MLP-S.csv").read_text().splitlines()[0] == "trained_up_to," + ",".join(SLICES)
    # the matrices stage draws nothing and tracks nothing
    assert not (tmp_path / "outputs" / "report").exists() and not (tmp_path / "mlflow.db").exists()

    page = report.run(out, tmp_path / "outputs" / "report" / "report.html",
                      audit=tmp_path / "outputs" / "audit" / "report.html", params=params)
    assert (tmp_path / "outputs" / "report" / "plots" / "CNN-S.png").read_bytes()[:4] == b"\x89PNG"
    assert 'href="../audit/report.html"' in page.read_text()
    assert "Drift matrices: toy" in page.read_text()

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["test-matrices"], filter_string="tags.kind = 'matrices'",
                              output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == "matrices · toy"
    assert run.data.metrics["CNN-S.future"] == pytest.approx(90 - 50 / 6)
    client = mlflow.MlflowClient()
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {"matrices", "plots", "report"}
    assert {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "matrices")} >= {
        "MLP-S.json", "CNN-S.csv", "summary.json"}


def test_a_model_dropped_from_params_loses_its_files_and_nothing_else(setup, tmp_path, caplog):
    """Run outside DVC (which would empty outputs/matrices first), the stage removes the files it
    wrote for a model no longer configured, so the report and advisor never read them as current."""
    from driftmatrix.analysis import matrixfile

    params, _, slices, root = setup
    out, plots = tmp_path / "matrices", tmp_path / "plots"
    matrices.run(params, root, out, tmp_path / "metrics.json", plots, slices_dir=slices)
    assert {f.name for f in out.iterdir()} >= {"CNN-S.json", "CNN-S.csv", "CNN-S_std.csv"}
    (out / "notes.json").write_text('{"mine": true}')          # not the stage's: kept
    (out / "README.txt").write_text("kept")

    with caplog.at_level("INFO", logger="driftmatrix.stages.matrices"):
        matrices.run(_params({"MLP-S": {}}), root, out, tmp_path / "metrics.json", plots, slices_dir=slices)
    assert sorted(f.name for f in out.iterdir()) == [
        "MLP-S.csv", "MLP-S.json", "MLP-S_std.csv", "README.txt", "notes.json", "summary.csv", "summary.json"]
    assert list(matrixfile.load_folder(out)) == ["MLP-S"]
    assert [r["model"] for r in json.loads((out / "summary.json").read_text())["models"]] == ["MLP-S"]
    assert list(json.loads((tmp_path / "metrics.json").read_text())) == ["MLP-S"]
    assert sorted(f.name for f in plots.iterdir()) == ["MLP-S.csv"]
    assert "removed the files of models no longer configured or scored: CNN-S.json, CNN-S.csv, " \
           "CNN-S_std.csv" in caplog.text


def test_no_scores_is_a_clear_error(setup, tmp_path):
    params, _, slices, _ = setup
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="evaluate"):
        matrices.read_scores(params, slices, tmp_path / "empty")


def test_no_slices_is_a_clear_error(setup, tmp_path):
    params, _, _, scores = setup
    with pytest.raises(DataError, match=r"noslices: no manifest.json \(run `driftmatrix slice` first\)"):
        matrices.read_scores(params, tmp_path / "noslices", scores)


def test_the_chosen_metric_keys_every_cell_and_names_the_matrices(setup):
    """evaluation.metric is part of each cell's scoring key: accuracy scores are never read as log
    loss; scored under log loss, the matrices say so and read lower as better."""
    params, manifest, slices, root = setup
    lossy = parse_params({"dataset": {"name": "toy"}, "models": {"MLP-S": {}}, "train": {"seeds": [0, 1]},
                          "evaluation": {"metric": "log_loss"}})
    plan, acc = model_plan(lossy, "MLP-S", manifest, ENV), model_plan(params, "MLP-S", manifest, ENV)
    hashes = [s["hash"] for s in manifest["slices"]]
    assert plan.scoring["metric"] == "log_loss" and acc.scoring["metric"] == "accuracy"
    assert [u.key for u in plan.units] == [u.key for u in acc.units]  # the same trained units...
    assert not {c.key for u in plan.units for c in plan.cells(u, hashes)} & {
        c.key for u in acc.units for c in acc.cells(u, hashes)}  # ...scored under other keys
    assert matrices.read_model(lossy, "MLP-S", manifest, root).extra["missing_cells"] == 2 * 4 * 4
    write_scores(root, lossy, manifest, "MLP-S", {0: 0.3, 1: 0.4}, -0.1)
    m = matrices.read_model(lossy, "MLP-S", manifest, root)
    assert (m.metric, m.unit, m.higher_is_better) == ("Log loss", "nats", False)
    assert m.seed_values[0, 0, 3] == pytest.approx(0.6) and m.extra["missing_cells"] == 0
