"""`driftmatrix audit` end to end: files, plots, MLflow, report; from the slices alone (a model matrix
lying beside them is never read: tests/reporting/test_drift_decay.py covers drift vs decay)."""

import json
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from driftmatrix.audit import gate

from driftmatrix.stages import validate as validate_stage
from driftmatrix.stages import audit as stage
from driftmatrix.audit import measures
from testkit.slices import make_slices, write_slices
from driftmatrix.config import parse_params

K = 5
AUDIT = {"mmd_samples": 80, "permutations": 50, "image_size": 4, "top_n": 100}


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    """An image dataset with label and covariate shift, validated, audited (once per module: a
    fresh MLflow sqlite store alone costs several seconds)."""
    tmp_path = tmp_path_factory.mktemp("audit")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
        yield _audit(tmp_path)


def _audit(tmp_path):
    rows, manifest, images = make_slices(k=K, per_slice=100, input_kind="image", label_shift=0.5,
                                         covariate_shift=8.0)
    slices = write_slices(tmp_path / "slices", rows, manifest, images)
    params = parse_params({"models": {"MLP-S": {}}, "audit": AUDIT, "tracking": {"experiment": "audit-test"}})
    validate_stage.run(params, slices, tmp_path / "validation", echo=lambda _: None)
    result = stage.run(params, slices, tmp_path / "audit", tmp_path / "validation")
    return tmp_path, result


def test_audit_writes_matrices_plots_and_json(audited):
    tmp, result = audited
    out = tmp / "audit"
    assert set(result["measures"]) == {"label_js", "label_kl", "mmd_pixels"}
    js = pd.read_csv(out / "label_js.csv", index_col=0)
    assert js.shape == (K, K) and list(js.index.astype(str)) == list(js.columns)
    assert np.all(np.diff(js.iloc[0].to_numpy()) > 0)
    pv = pd.read_csv(out / "mmd_pixels_pvalue.csv", index_col=0).to_numpy()
    assert pv[0, -1] < 0.05 and np.allclose(np.diag(pv), 1)
    curves = pd.read_csv(out / "plots" / "label_drift.csv")
    assert list(curves.columns) == ["index", "slice", "label_js_vs_first", "label_kl_vs_first", "mmd_pixels_vs_first"]
    prev = pd.read_csv(out / "plots" / "prevalence.csv")
    assert list(prev.columns) == ["index", "slice", "class0", "class1"]
    assert np.allclose(prev[["class0", "class1"]].sum(axis=1), 1)
    assert prev["class1"].is_monotonic_increasing        # label shift injected towards class 1
    saved = json.loads((out / "drift.json").read_text())
    assert saved["measures"]["mmd_pixels"]["bandwidth"] > 0
    assert saved["slices"] == js.columns.tolist() and "correlations" not in saved
    assert len(list((out / "figures").glob("*.png"))) == 5
    # the retraining policies' D[r, t]: training window 0..r against period t, on the same pixels
    window = saved["window_drift"]
    D = np.array([[np.nan if v is None else v for v in row] for row in window["values"]])
    assert window["features"] == "4x4 pixels" and window["max_samples"] == AUDIT["mmd_samples"]
    assert np.isnan(D[np.tril_indices(K)]).all() and (D[np.triu_indices(K, 1)] > 0).all()
    assert np.all(np.diff(D[0, 1:]) > 0)  # the covariate shift grows with the period
    assert np.allclose(pd.read_csv(out / "window_drift.csv", index_col=0).to_numpy(), D, equal_nan=True)


def test_audit_logs_an_mlflow_run(audited):
    from mlflow import MlflowClient

    tmp, result = audited
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("audit-test").experiment_id])
    assert [r.info.run_id for r in runs] == [result["mlflow_run_id"]]
    run = runs[0]
    assert run.info.run_name == "audit · synthetic" and run.data.tags["kind"] == "audit"
    assert "label_js_mean_future" in run.data.metrics
    assert not [k for k in run.data.metrics if k.startswith("spearman_")]  # the report stage's run has them


def test_report_is_self_contained(audited):
    tmp, _ = audited
    text = (tmp / "audit" / "report.html").read_text()
    assert text.count("data:image/png;base64,") == 5  # 3 matrices, 1 p-value map, prevalence
    assert "http://" not in text and "https://" not in text and "<script" not in text
    for heading in ("Validation", "Slices that tripped a check", "Drift matrices", "Label prevalence",
                    "Data drift vs model accuracy drop", "outputs/report/report.html"):
        assert heading in text


CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless chromium on this machine")
def test_report_loads_in_headless_chromium(audited):
    tmp, _ = audited
    report = tmp / "audit" / "report.html"
    proc = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                           f"--user-data-dir={tmp / 'chrome'}", "--dump-dom", report.as_uri()],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Data audit: synthetic" in proc.stdout and proc.stdout.count("<img") == 5


def test_text_slices_get_a_vocabulary_overlap_matrix_read_as_drift(tmp_path):
    from driftmatrix.audit.slices import load_slices

    rows, manifest, _ = make_slices(k=K, per_slice=80, covariate_shift=10.0)
    slices = load_slices(write_slices(tmp_path / "slices", rows, manifest))
    audit = measures.compute(slices, measures.AuditConfig(top_n=100))
    (vocab,) = [m for m in audit.measures if m.name == "vocab_overlap"]
    assert np.all(np.diff(vocab.values[0]) < 0)          # overlap falls with distance ...
    assert audit.to_dict()["measures"]["vocab_overlap"]["higher_is_more_drift"] is False  # ... so it is read flipped
    assert vocab.info["sizes"] == [100] * K


def test_window_drift_of_a_feature_table_uses_its_numeric_columns(tmp_path):
    from driftmatrix.audit.slices import load_slices

    rows, manifest, _ = make_slices(k=4, per_slice=60)
    meta = dict(manifest["dataset"], numeric=["a", "b"], input_kind="table")
    rng = np.random.default_rng(0)
    rows["feat:a"] = rng.normal(size=len(rows)) * 100 + rows["slice"].to_numpy() * 300.0  # drifts, large scale
    rows["feat:b"] = np.where(rng.random(len(rows)) < 0.1, np.nan, rng.normal(size=len(rows)))
    slices = load_slices(write_slices(tmp_path / "slices", rows, {**manifest, "dataset": meta}))
    window = measures.window_drift(slices, measures.AuditConfig(mmd_samples=40))
    assert window.info["features"] == "numeric features, standardised"
    assert np.all(np.diff(window.values[0, 1:]) > 0) and np.isnan(window.values[np.tril_indices(4)]).all()
    assert measures.window_drift(load_slices(write_slices(tmp_path / "text", *make_slices(k=3)[:2])),
                              measures.AuditConfig()) is None  # text without embeddings: none


def test_cached_features_get_an_mmd_matrix(tmp_path):
    from driftmatrix.audit.slices import load_slices

    rows, manifest, _ = make_slices(k=3, per_slice=60)
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(len(rows), 16)) + rows["slice"].to_numpy()[:, None] * 0.5
    np.save(tmp_path / "enc.npy", feats.astype(np.float32))
    slices = load_slices(write_slices(tmp_path / "slices", rows, manifest))
    cfg = measures.AuditConfig(top_n=50, features=(str(tmp_path / "enc.npy"),), mmd_samples=50, permutations=30)
    (mmd,) = [m for m in measures.covariate_measures(slices, cfg) if m.name == "mmd_enc"]
    assert mmd.values[0, 2] > mmd.values[0, 1] > 0 and mmd.pvalues[0, 2] < 0.05
    np.save(tmp_path / "bad.npy", feats[:10])
    with pytest.raises(Exception, match="bad.npy has 10 rows"):
        measures.covariate_measures(slices, measures.AuditConfig(features=(str(tmp_path / "bad.npy"),)))


def test_untracked_audit_logs_nothing_and_its_folder_logs_the_same_run(tmp_path, monkeypatch):
    """The DVC stage runs `audit --no-track`; the report stage logs the run from the folder."""
    from mlflow import MlflowClient

    monkeypatch.chdir(tmp_path)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    rows, manifest, images = make_slices(k=3, per_slice=60, input_kind="image", label_shift=0.5)
    slices = write_slices(tmp_path / "slices", rows, manifest, images)
    params = parse_params({"models": {"MLP-S": {}}, "audit": {**AUDIT, "permutations": 10},
                           "tracking": {"experiment": "audit-untracked"}})
    validate_stage.run(params, slices, tmp_path / "validation", echo=lambda _: None)
    result = stage.run(params, slices, tmp_path / "audit", tmp_path / "validation", track=False)
    assert result["mlflow_run_id"] is None and not (tmp_path / "mlflow.db").exists()
    run_id = stage.log_folder(params, tmp_path / "audit")
    run = MlflowClient(tracking_uri=uri).get_run(run_id)
    assert run.info.run_name == "audit · synthetic" and run.data.tags["kind"] == "audit"
    saved = json.loads((tmp_path / "audit" / "drift.json").read_text())
    assert run.data.metrics == {f"{name}_mean_future": m["mean_future"] for name, m in saved["measures"].items()}
    assert run.data.params["permutations"] == "10"
    logged = {f.path for f in MlflowClient(tracking_uri=uri).list_artifacts(run_id, "audit")}
    assert {"audit/drift.json", "audit/report.html", "audit/figures"} <= logged
    assert stage.log_folder(params, tmp_path / "nothing-here") is None
