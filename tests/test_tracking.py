"""tracking: new sqlite stores start from a cached MLflow schema template."""

import sqlite3

import pytest

pytest.importorskip("mlflow")

from driftmatrix import tracking  # noqa: E402
from driftmatrix.config import TrackingConfig  # noqa: E402


def _experiments(db):
    return dict(sqlite3.connect(db).execute("select name, artifact_location from experiments").fetchall())


def test_a_new_store_is_seeded_from_the_template_and_works(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)
    template = tracking.schema_template()
    assert template is not None and template.parent == tmp_path / "cache" / "driftmatrix"
    assert _experiments(template) == {}  # no Default experiment with somebody else's path in it
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        db = tmp_path / name / "mlflow.db"
        cfg = TrackingConfig(uri=f"sqlite:///{db}", artifact_root=str(tmp_path / name / "mlruns"),
                             experiment=f"exp-{name}")
        exp_id = tracking.configure(cfg)
        import mlflow

        client = mlflow.MlflowClient()
        run = client.create_run(exp_id)
        client.log_metric(run.info.run_id, "m", 2.5)
        assert client.get_run(run.info.run_id).data.metrics == {"m": 2.5}
        exps = _experiments(db)
        assert exps[f"exp-{name}"] == (tmp_path / name / "mlruns").as_uri()
        assert exps["Default"].endswith("mlruns/0")  # made by MLflow for this store


def test_an_existing_store_is_never_replaced(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = tmp_path / "mlflow.db"
    db.write_bytes(b"not ours to touch")
    tracking.seed_sqlite_store(f"sqlite:///{db}")
    assert db.read_bytes() == b"not ours to touch"
    tracking.seed_sqlite_store(f"sqlite:///{tmp_path}/missing-folder/mlflow.db")  # no folder: left to MLflow
    assert not (tmp_path / "missing-folder").exists()
