"""The matrices stage on hand-made score rows (docs/CONTRACTS.md format)."""

import json

import numpy as np
import pytest

from driftmatrix import matrices
from driftmatrix.config import parse_params

SLICES = ["2014-H1", "2014-H2", "2015-H1", "2015-H2"]


def _row(model, family, seed, i, values):
    return {"dataset": "toy", "model": model, "family": family, "seed": seed, "cutoff_index": i,
            "cutoff": SLICES[i], "slices": SLICES, "metric": "accuracy", "metric_name": "Accuracy",
            "unit": "%", "higher_is_better": True, "values": values, "n_eval": [10] * 4,
            "left_out": [[]] * 4, "run_id": None}


def _matrix(diag, step):
    """diag on the diagonal, losing ``step`` per slice ahead, backward cells = diag - 1."""
    i, j = np.indices((4, 4))
    return np.where(j >= i, diag - step * (j - i), diag - 1.0)


@pytest.fixture
def scores(tmp_path):
    root = tmp_path / "scores"
    for model, family, step in (("MLP-S", "MLP", 2.0), ("CNN-S", "CNN", 5.0)):
        for seed, diag in ((0, 90.0), (1, 92.0)):
            if model == "CNN-S" and seed == 1:
                continue  # CNN-S has one seed only
            M = _matrix(diag, step)
            for i in range(4):
                values = [float(v) for v in M[i]]
                if model == "MLP-S" and seed == 1 and i == 0:
                    values[3] = None  # empty eval set in one cell
                path = root / model / f"seed{seed}" / f"cutoff{i:03d}.json"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(json.dumps(_row(model, family, seed, i, values)))
    return root


def test_read_scores_builds_seed_stacks(scores):
    models = matrices.read_scores(scores)
    mlp = models["MLP-S"]
    assert mlp.seed_values.shape == (2, 4, 4) and mlp.seeds == [0, 1]
    assert mlp.mean[0, 3] == pytest.approx(84.0)  # seed 1 empty there: seed 0 only
    assert mlp.std[0, 0] == pytest.approx(np.sqrt(2.0))
    assert models["CNN-S"].n_seeds == 1 and models["CNN-S"].family == "CNN"


def test_stage_outputs_metrics_report_and_mlflow(scores, tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    params = parse_params({"models": {"MLP-S": {}, "CNN-S": {}, "ViT-S": {}},
                           "tracking": {"experiment": "test-matrices"}})
    out = tmp_path / "outputs" / "matrices"
    (tmp_path / "outputs" / "audit").mkdir(parents=True)
    (tmp_path / "outputs" / "audit" / "report.html").write_text("<html></html>")
    matrices.run(params, scores, out)  # ViT-S has no scores: left out with a warning

    metrics = json.loads((tmp_path / "outputs" / "metrics.json").read_text())
    assert set(metrics) == {"MLP-S", "CNN-S"}
    cnn = metrics["CNN-S"]
    assert cnn["in_distribution"] == pytest.approx(90.0)
    # future lags 1,1,1,2,2,3 -> 90 - 5 * 10/6
    assert cnn["future"] == pytest.approx(90 - 50 / 6)
    assert cnn["decay"] == pytest.approx(50 / 6)
    assert cnn["backward"] == pytest.approx(89.0)
    assert cnn["td_score"] > 0
    summary = json.loads((out / "summary.json").read_text())
    assert [r["model"] for r in summary["models"]] == ["CNN-S", "MLP-S"]
    assert summary["cutoffs"] == ["2014-H1", "2014-H2", "2015-H1"]  # K - 1 = 3 candidates
    back = json.loads((out / "MLP-S.json").read_text())
    assert back["seeds"] == [0, 1] and back["seed_values"][1][0][3] is None
    assert back["values"][0][0] == pytest.approx(91.0)
    assert (out / "MLP-S.csv").read_text().splitlines()[0] == "trained_up_to," + ",".join(SLICES)
    assert (out / "plots" / "CNN-S.png").read_bytes()[:4] == b"\x89PNG"
    report = (tmp_path / "outputs" / "report" / "report.html").read_text()
    assert 'href="../audit/report.html"' in report and report.count("<img ") == 7

    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs(experiment_names=["test-matrices"], filter_string="tags.kind = 'matrices'",
                              output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_name == "matrices · toy"
    assert run.data.metrics["CNN-S.future"] == pytest.approx(90 - 50 / 6)
    arts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"matrices", "plots", "report"} <= arts


def test_no_scores_is_a_clear_error(tmp_path):
    (tmp_path / "scores").mkdir()
    with pytest.raises(FileNotFoundError, match="evaluate"):
        matrices.read_scores(tmp_path / "scores")
