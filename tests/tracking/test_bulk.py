"""tracking.bulk: a batch of unit runs written into sqlite holds, row by row, what MLflow's client
calls write; a batch that fails leaves no live run; other stores go through the client."""

from __future__ import annotations

import math
from dataclasses import replace
import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from driftmatrix.config import TrackingConfig  # noqa: E402
from driftmatrix.tracking import bulk  # noqa: E402
from driftmatrix.tracking import runs as tracking  # noqa: E402

TABLES = {"runs": "run_uuid", "tags": "run_uuid", "params": "run_uuid", "metrics": "run_uuid",
          "latest_metrics": "run_uuid", "datasets": "dataset_uuid", "inputs": "input_uuid", "input_tags": "input_uuid"}


def _records(root: Path) -> tuple[list[dict], dict[str, Path]]:
    """Three units of one model sharing their training data, each with a checkpoint folder."""
    records, folders = [], {}
    for k, (cutoff, seed) in enumerate((("1950", 0), ("1950", 1), ("1951", 0))):
        key = f"k{k}"
        folder = root / key
        (folder / "artifacts").mkdir(parents=True)
        (folder / "MLmodel").write_text(f"unit: {key}\n")
        (folder / "artifacts" / "model.safetensors").write_bytes(key.encode() * 10)
        records.append({"unit": {"dataset": "d", "model": "M", "family": "F", "seed": seed, "cutoff": cutoff,
                                 "cutoff_index": int(cutoff) - 1950, "window": [0], "key": key},
                        "window": "cumulative", "params": {"epochs": 2, "lr": 0.1, "name": "x" * 7000},
                        "losses": [0.7, 0.5, 0.5], "train_rows": 10 + k, "started": 1_700_000_000.0 + k,
                        "ended": 1_700_000_100.5 + k, "seconds": 1.5, "tags": {"extra": "yes"},
                        "weights_digest": f"digest{k}", "environment": {"precision": "fp32", "hardware": "cpu"},
                        "data": {"name": "d[train]", "digest": "abc123", "source": {"path": "data"}}})
        folders[key] = folder
    return records, folders


def _row(tmp_path: Path):
    """A ``row(unit key, run id)`` as the evaluate stage gives: metrics (a NaN and an infinity
    among them), a folder of row artifacts, the evaluation data and the number of slices."""
    def row(key: str, run_id: str):
        folder = tmp_path / "rows" / run_id
        folder.mkdir(parents=True)
        (folder / "row.json").write_text(f'{{"unit_key": "{key}", "run_id": "{run_id}"}}')
        metrics = {"acc_1950": 0.5 + len(key) / 10, "acc_1951": math.nan, "gap": math.inf}
        return metrics, folder, {"name": "d[all slices]", "digest": "e" * 40, "source": {"slices": ["1950"]}}, 2
    return row


def _dump(db: Path, artifacts: Path) -> dict[str, list[tuple]]:
    """Every row of the run tables, ids replaced by their order of first appearance and the store's
    own folder by a placeholder, sorted; and the artifact files (path relative to the run, content)."""
    con = sqlite3.connect(db)
    ids: dict[str, str] = {}
    run_ids = [r for (r,) in con.execute("select run_uuid from runs order by start_time")]
    for r in run_ids:
        ids.setdefault(r, f"run{len(ids)}")
    for table in ("datasets", "inputs"):
        for (u,) in con.execute(f"select {TABLES[table]} from {table} order by rowid"):
            ids.setdefault(u, f"{table}{len(ids)}")
    root = str(db.parent)

    def norm(value):
        if isinstance(value, str):
            for raw, name in ids.items():
                value = value.replace(raw, name)
            return value.replace(root, "<store>")
        return value

    out = {}
    for table in TABLES:
        cur = con.execute(f"select * from {table}")
        cols = [c[0] for c in cur.description]
        out[table] = sorted((tuple(zip(cols, map(norm, row))) for row in cur), key=repr)
    files = sorted((norm(str(p.relative_to(artifacts))), norm(p.read_bytes().decode("latin-1")))
                   for p in artifacts.rglob("*") if p.is_file())
    out["artifacts"] = [(name, data) for name, data in files if "/artifacts/" in name]
    return out


def _store(tmp_path: Path, name: str, monkeypatch) -> tuple[TrackingConfig, object, str]:
    import mlflow

    (tmp_path / name).mkdir()
    cfg = TrackingConfig(uri=f"sqlite:///{tmp_path / name / 'mlflow.db'}", experiment="bulk",
                         artifact_root=str(tmp_path / name / "mlruns"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", cfg.uri)
    exp_id = tracking.configure(cfg)
    return cfg, mlflow.MlflowClient(cfg.uri), exp_id


def test_a_batch_writes_the_rows_the_client_calls_write(tmp_path, monkeypatch):
    monkeypatch.setattr(tracking.time, "time", lambda: 1_700_000_500.25)  # the row metrics' timestamp
    monkeypatch.setenv(tracking.PROJECT_ENV, "here")
    records, folders = _records(tmp_path / "ckpt")
    extra = {"git_commit": "abc", "dataset": "d", tracking.PROJECT_TAG: "here"}
    folders_of = {r["unit"]["key"]: folders[r["unit"]["key"]] for r in records}

    cfg, client, exp_id = _store(tmp_path, "calls", monkeypatch)
    import mlflow

    assert bulk.sql_store(mlflow.MlflowClient("http://127.0.0.1:5000")) is None  # never for a server
    assert bulk.registry_store(mlflow.MlflowClient("http://127.0.0.1:5000")) is None
    reads = []  # set_terminated reads the run back to print its link: over HTTP, a round trip a unit
    monkeypatch.setattr(type(client._tracking_client), "_log_url", lambda self, run_id: reads.append(run_id))
    by_call = [tracking.create_unit_run(client, exp_id, r, folders_of[r["unit"]["key"]], extra, _row(tmp_path))
               for r in records]
    assert reads == []
    cfg_b, client_b, exp_b = _store(tmp_path, "batch", monkeypatch)
    assert bulk.sql_store(client_b) is not None
    by_batch = tracking.create_unit_runs(client_b, exp_b, records, folders_of, extra, _row(tmp_path))
    assert len(set(by_batch)) == 3 and not set(by_batch) & set(by_call)

    calls = _dump(tmp_path / "calls" / "mlflow.db", tmp_path / "calls" / "mlruns")
    batch = _dump(tmp_path / "batch" / "mlflow.db", tmp_path / "batch" / "mlruns")
    for table in [*TABLES, "artifacts"]:
        assert batch[table] == calls[table], table
    assert len(calls["datasets"]) == 2 and len(calls["inputs"]) == 6  # the shared training data is one dataset
    assert len(calls["artifacts"]) == 9  # MLmodel, weights and row.json a run

    # and MLflow reads them back alike: the run, its metric history, its inputs, a tag search
    for a, b in zip(by_call, by_batch):
        ra, rb = client.get_run(a), client_b.get_run(b)
        assert (ra.info.status, ra.info.start_time, ra.info.end_time, ra.info.run_name, ra.info.lifecycle_stage) == \
            (rb.info.status, rb.info.start_time, rb.info.end_time, rb.info.run_name, rb.info.lifecycle_stage)
        assert ra.data.params == rb.data.params and repr(ra.data.metrics) == repr(rb.data.metrics)  # NaN != NaN
        assert ra.data.tags == rb.data.tags and rb.data.tags["mlflow.runName"] == rb.info.run_name
        assert math.isnan(rb.data.metrics["acc_1951"]) and rb.data.metrics["gap"] > 1e308
        assert [(m.value, m.step) for m in client_b.get_metric_history(b, "train_loss")] == [(0.7, 0), (0.5, 1), (0.5, 2)]
        assert [(d.dataset.name, [t.value for t in d.tags]) for d in rb.inputs.dataset_inputs] == \
            [(d.dataset.name, [t.value for t in d.tags]) for d in ra.inputs.dataset_inputs]
    found = client_b.search_runs([exp_b], "tags.unit_key = 'k1' and tags.kind = 'cutoff'")
    assert [r.info.run_id for r in found] == [by_batch[1]]
    assert tracking.live_runs(exp_b, "d", "M") == {r["unit"]["key"]: i for r, i in zip(records, by_batch)}


def test_a_failed_batch_leaves_no_live_run_and_the_next_sync_writes_it(tmp_path, monkeypatch):
    records, folders = _records(tmp_path / "ckpt")
    cfg, client, exp_id = _store(tmp_path, "store", monkeypatch)
    rows = [tracking.unit_run_rows(r, folders[r["unit"]["key"]], {"git_commit": "abc"}) for r in records]
    copied = []

    def copy(uri, local, path):
        if len(copied) == 2:
            raise OSError("disk full")
        copied.append(local)

    with pytest.raises(OSError, match="disk full"):
        bulk.write_runs(bulk.sql_store(client), exp_id, rows, copy)
    from mlflow.entities import ViewType

    left = client.search_runs([exp_id], "", run_view_type=ViewType.ALL)
    assert len(left) == 3 and {r.info.lifecycle_stage for r in left} == {"deleted"}
    assert tracking.live_runs(exp_id, "d", "M") == {}
    done = tracking.sync_units(replace(cfg, register=False), "d", "M", records, folders)
    assert set(done) == {"k0", "k1", "k2"} and tracking.live_runs(exp_id, "d", "M") == done


def test_invalid_values_are_refused_before_anything_is_written(tmp_path, monkeypatch):
    from mlflow.exceptions import MlflowException

    records, folders = _records(tmp_path / "ckpt")
    records[1]["params"] = {f"p{i}": i for i in range(150)}  # more than one log_batch takes
    cfg, client, exp_id = _store(tmp_path, "store", monkeypatch)
    rows = [tracking.unit_run_rows(r, folders[r["unit"]["key"]], {}) for r in records]
    with pytest.raises(MlflowException, match="params"):
        bulk.write_runs(bulk.sql_store(client), exp_id, rows, lambda *a: None)
    assert client.search_runs([exp_id], "") == []


REGISTRY = ("registered_models", "model_versions", "model_version_tags", "registered_model_aliases")
CLOCKS = ("creation_time", "last_updated_time")


def _registry(db: Path, run_names: dict[str, str]) -> dict[str, list[tuple]]:
    """The registry tables, run ids replaced by ``run_names``, the clocks left out, sorted."""
    con = sqlite3.connect(db)
    out = {}
    for table in REGISTRY:
        cur = con.execute(f"select * from {table}")
        cols = [c[0] for c in cur.description]
        rows = []
        for row in cur:
            values = []
            for col, value in zip(cols, row):
                if col in CLOCKS:
                    continue
                for raw, named in run_names.items():
                    value = value.replace(raw, named) if isinstance(value, str) else value
                values.append((col, value))
            rows.append(tuple(values))
        out[table] = sorted(rows, key=repr)
    return out


def test_a_sync_writes_the_registry_the_client_calls_write(tmp_path, monkeypatch):
    """sync_units end to end, with and without the batches: the same runs, versions, tags and
    aliases; then a unit redone under a new key moves its aliases in both alike."""
    monkeypatch.setattr(tracking.time, "time", lambda: 1_700_000_500.25)
    records, folders = _records(tmp_path / "ckpt")
    described = lambda key, rows: ({"score.id": f"0.{len(key)}"}, f"unit {key}: {rows} rows")  # noqa: E731
    dumps = []
    for mode in ("calls", "batch"):
        cfg, client, exp_id = _store(tmp_path, mode, monkeypatch)
        if mode == "calls":
            monkeypatch.setattr(bulk, "sql_store", lambda *a: None)
            monkeypatch.setattr(bulk, "registry_store", lambda *a: None)
        else:
            monkeypatch.undo()
            monkeypatch.setattr(tracking.time, "time", lambda: 1_700_000_500.25)
            monkeypatch.setenv("MLFLOW_TRACKING_URI", cfg.uri)
            assert bulk.registry_store(client) is not None
        first = tracking.sync_units(cfg, "d", "M", records, folders, {"dataset": "d"}, row=_row(tmp_path / mode),
                                    described=described)
        redone = [dict(r, unit={**r["unit"], "key": r["unit"]["key"] + "-new"}) if r["unit"]["key"] == "k1" else r
                  for r in records]
        second = tracking.sync_units(cfg, "d", "M", redone, {**folders, "k1-new": folders["k1"]}, {"dataset": "d"},
                                     described=described)
        names = {run_id: f"run-{key}" for key, run_id in {**first, **second}.items()}
        dumps.append(_registry(tmp_path / mode / "mlflow.db", names))
        model = client.get_registered_model("d.M")
        assert set(model.aliases) == {"cutoff-1950", "cutoff-1951", "cutoff-1950-seed-0", "cutoff-1950-seed-1",
                                      "cutoff-1951-seed-0"}
        moved = client.get_model_version_by_alias("d.M", "cutoff-1950-seed-1")
        assert moved.tags["unit_key"] == "k1-new" and moved.run_id == second["k1-new"]
        assert moved.description == "unit k1-new: 11 rows" and moved.status == "READY"
        found = client.search_model_versions("name = 'd.M' and tags.unit_key = 'k0'")
        assert [v.run_id for v in found] == [first["k0"]] and found[0].tags["score.id"] == "0.2"
    calls, batch = dumps
    for table in REGISTRY:
        assert batch[table] == calls[table], table
    stages = sorted(dict(v)["current_stage"] for v in calls["model_versions"])
    assert stages == ["Deleted_Internal", "None", "None", "None"]  # k1's first version, superseded
    assert len(calls["registered_model_aliases"]) == 5


def test_a_server_store_is_told_apart_without_importing_the_sqlalchemy_stores():
    """The check costs an evaluate stage that writes through a server nothing: MLflow's SQLAlchemy
    stores, which only a sqlite store needs, take 0.6 s to import."""
    import subprocess
    import sys

    code = ("import sys; from mlflow import MlflowClient; from driftmatrix.tracking import bulk; "
            "c = MlflowClient('http://127.0.0.1:5000'); "
            "print(bulk.sql_store(c), bulk.registry_store(c), "
            "sorted(m for m in sys.modules if m.startswith('sqlalchemy') or m.endswith('sqlalchemy_store'))[:3])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[2] / "src")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["None", "None", "[]"], out.stdout
