"""Data drift vs model decay, drawn by the report stage from the audit's drift.json and the model
matrices (the audit stage itself reads only the slices)."""

import json

import numpy as np
import pytest

from driftmatrix.stages import report
from driftmatrix.stages import audit as stage
from driftmatrix.audit import measures
from driftmatrix.audit.slices import load_slices
from testkit.slices import make_slices, write_slices
from driftmatrix.config import parse_params
from driftmatrix.reporting import drift_decay

K = 5


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """An audit (drift.json of image slices with label and covariate shift) and a folder with one
    model whose accuracy falls with the distance between slices (one cell left empty)."""
    root = tmp_path_factory.mktemp("decay")
    rows, manifest, images = make_slices(k=K, per_slice=100, input_kind="image", label_shift=0.5,
                                         covariate_shift=8.0)
    slices = load_slices(write_slices(root / "slices", rows, manifest, images), images=True)
    cfg = measures.AuditConfig(mmd_samples=80, permutations=50, image_size=4)
    stage.write_tables(measures.compute(slices, cfg), root / "audit")
    (root / "audit" / "report.html").write_text("<html></html>")
    d = np.abs(np.subtract.outer(np.arange(K), np.arange(K)))
    values = (90.0 - 4 * d).tolist()
    values[0][K - 1] = None
    (root / "matrices").mkdir()
    (root / "matrices" / "MLP-S.json").write_text(json.dumps(
        {"dataset": "synthetic", "model": "MLP-S", "metric": "accuracy", "higherIsBetter": True,
         "slices": slices.labels, "values": values}))
    return root


def test_model_matrix_is_reindexed_onto_the_audit_slices():
    mean = np.arange(9.0).reshape(3, 3)
    got = drift_decay.on_slices(["a", "b", "c"], mean, ["b", "x", "c"])
    assert got[0, 0] == 4 and got[0, 2] == 5 and got[2, 0] == 7 and got[2, 2] == 8
    assert np.isnan(got[1]).all() and np.isnan(got[:, 1]).all()


def test_report_correlates_audit_drift_with_model_decay_and_logs_it(folders, tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    params = parse_params({"models": {"MLP-S": {}}, "tracking": {"experiment": "decay-test"}})
    page = report.run(folders / "matrices", tmp_path / "report" / "report.html",
                      audit=folders / "audit" / "report.html", params=params)

    rows = json.loads((tmp_path / "report" / "drift_vs_decay.json").read_text())
    corr = {c["measure"]: c for c in rows if c["model"] == "MLP-S"}
    assert set(corr) == {"label_js", "label_kl", "mmd_pixels"}
    assert corr["label_js"]["n"] == K * (K - 1) // 2 - 1          # the empty cell is left out
    assert corr["label_js"]["spearman"] > 0.8 and corr["mmd_pixels"]["spearman"] > 0.8

    text = page.read_text()
    section = text[text.index('<section id="drift-decay">'):]
    section = section[:section.index("</section>")]
    assert "Data drift vs model decay" in section and "Spearman rho" in section
    assert section.count("data:image/png;base64,") == 3            # one scatter per measure
    assert f"{corr['label_js']['spearman']:.3f}" in section

    mlflow.set_tracking_uri(uri)
    (run,) = mlflow.search_runs(experiment_names=["decay-test"], filter_string="tags.kind = 'matrices'",
                                output_format="list")
    assert run.data.metrics["spearman_MLP-S_label_js"] == pytest.approx(corr["label_js"]["spearman"])


def test_no_audit_no_drift_decay_section(folders, tmp_path):
    page = report.run(folders / "matrices", tmp_path / "report.html", audit=tmp_path / "none" / "report.html")
    assert 'id="drift-decay"' not in page.read_text()
    assert not (tmp_path / "drift_vs_decay.json").exists()
