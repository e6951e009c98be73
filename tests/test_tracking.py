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


def test_a_command_process_leaves_its_sqlite_store_in_one_file(tmp_path):
    """Stage commands skip the final garbage collection (cli.main freezes it), so the store's
    connections are closed explicitly at exit: no write-ahead log is left beside mlflow.db, and a
    copy of that file alone holds every run."""
    import subprocess
    import sys

    db = tmp_path / "mlflow.db"
    script = (
        "import gc, mlflow\n"
        "from driftmatrix import tracking\n"
        "from driftmatrix.config import TrackingConfig\n"
        f"tracking.configure(TrackingConfig(uri='sqlite:///{db}', experiment='wal', "
        f"artifact_root='{tmp_path / 'mlruns'}'))\n"
        "run = mlflow.MlflowClient().create_run(mlflow.get_experiment_by_name('wal').experiment_id)\n"
        "print(run.info.run_id)\n"
        "gc.freeze()  # as cli.main does when a command ends\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "MLFLOW_TRACKING_URI": f"sqlite:///{db}"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert db.exists() and not (tmp_path / "mlflow.db-wal").exists()
    copy = tmp_path / "copy.db"
    copy.write_bytes(db.read_bytes())
    with sqlite3.connect(copy) as con:
        assert [r[0] for r in con.execute("select run_uuid from runs")] == [done.stdout.split()[-1]]


def _unit(cutoff, seed, key):
    return {"unit": {"cutoff": cutoff, "cutoff_index": int(cutoff) - 1950, "seed": seed, "key": key}}


def test_the_registry_sync_writes_only_what_differs(mlflow_store, monkeypatch):
    """Versions and aliases per unit; syncing the same units again writes no alias (MLflow's own
    search does not return aliases, so this once rewrote all of them); a redone unit moves its
    aliases to its new version."""
    import mlflow

    client = mlflow.MlflowClient()
    exp_id = client.create_experiment("registry")
    records = [_unit(c, s, f"k-{c}-{s}") for c in ("1950", "1951") for s in (1, 0)]
    runs = {r["unit"]["key"]: client.create_run(exp_id).info.run_id for r in records}
    writes = []
    real = tracking._alias_setter

    def counting(c):
        set_alias = real(c)
        return lambda *args: (writes.append(args[1:]), set_alias(*args))

    monkeypatch.setattr(tracking, "_alias_setter", counting)

    def aliases():
        return {a: runs_of[str(v)] for a, v in client.get_registered_model("d.M").aliases.items()}

    tracking.sync_registry(client, "d.M", records, runs)
    runs_of = {str(v.version): v.run_id for v in client.search_model_versions("name = 'd.M'")}
    assert len(runs_of) == 4 and len(writes) == 6
    assert aliases() == {"cutoff-1950-seed-0": runs["k-1950-0"], "cutoff-1950-seed-1": runs["k-1950-1"],
                         "cutoff-1951-seed-0": runs["k-1951-0"], "cutoff-1951-seed-1": runs["k-1951-1"],
                         "cutoff-1950": runs["k-1950-0"], "cutoff-1951": runs["k-1951-0"]}

    writes.clear()
    tracking.sync_registry(client, "d.M", records, runs)
    assert writes == [] and len(client.search_model_versions("name = 'd.M'")) == 4

    redone = [r if r["unit"]["key"] != "k-1951-0" else _unit("1951", 0, "k-1951-0b") for r in records]
    runs["k-1951-0b"] = client.create_run(exp_id).info.run_id
    tracking.sync_registry(client, "d.M", redone, runs)
    runs_of = {str(v.version): v.run_id for v in client.search_model_versions("name = 'd.M'")}
    assert len(runs_of) == 4 and runs["k-1951-0"] not in runs_of.values()
    assert sorted(writes) == [("cutoff-1951", writes[0][1]), ("cutoff-1951-seed-0", writes[0][1])]
    assert aliases()["cutoff-1951"] == aliases()["cutoff-1951-seed-0"] == runs["k-1951-0b"]
    assert aliases()["cutoff-1950"] == runs["k-1950-0"]
