"""tracking: new sqlite stores start from a cached MLflow schema template."""

import sqlite3
from pathlib import Path

import pytest

pytest.importorskip("mlflow")

from driftmatrix.tracking import runs as tracking  # noqa: E402
from driftmatrix.config import TrackingConfig  # noqa: E402
from driftmatrix.models.spec import PYFUNC_FORMAT  # noqa: E402


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
        "from driftmatrix.tracking import runs as tracking\n"
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

    monkeypatch.setattr(tracking, "_alias_setter", counting)  # a server's aliases, one call each
    from driftmatrix.tracking import bulk

    batch = bulk.point_aliases  # a sqlite store's, in one transaction
    monkeypatch.setattr(bulk, "point_aliases", lambda store, name, moved: (
        writes.extend(moved.items()), batch(store, name, moved)))
    assert bulk.registry_store(client) is not None

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


def test_a_server_is_written_several_units_at_once_a_local_store_one_at_a_time(monkeypatch):
    """``each`` keeps the order of its items; at a failure it starts no further item, lets the
    writes under way finish (they leave nothing half-done) and raises that failure."""
    import threading
    import time

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert tracking.write_threads(TrackingConfig(uri="http://127.0.0.1:5000")) == 8
    assert tracking.write_threads(TrackingConfig(uri="https://mlflow.example.org", server_threads=3)) == 3
    assert tracking.write_threads(TrackingConfig(uri="sqlite:///mlflow.db", server_threads=3)) == 1
    assert tracking.write_threads(TrackingConfig(uri="postgresql://u@127.0.0.1/db")) == 1

    names, done = set(), []

    def write(i):
        names.add(threading.current_thread().name)
        if i == 1:
            raise ValueError(f"unit {i}")
        time.sleep(0.2)
        done.append(i)
        return i * i

    assert tracking.each(lambda i: i * i, range(5), 4) == [0, 1, 4, 9, 16]
    assert tracking.each(write, [4, 2, 0], 2) == [16, 4, 0] and len(names) == 2
    done.clear()
    with pytest.raises(ValueError, match="unit 1"):
        tracking.each(write, list(range(12)), 4)
    assert {0, 2, 3} <= set(done) <= {0, 2, 3, 4}  # under way (4: taken by 1's thread at once); 5-11 never ran
    done.clear()
    with pytest.raises(ValueError, match="unit 1"):
        tracking.each(write, list(range(5)), 1)
    assert done == [0]


# --- sync_units: one live run and one registry version per unit ---------------------------------

def _record(cutoff, seed, key, folder=None, dataset="d", model="M", environment=None):
    """A unit's sidecar record as training writes it (``folder``: its checkpoint, for the digest)."""
    import hashlib

    record = {"unit": {"dataset": dataset, "model": model, "family": "F", "seed": seed, "cutoff": cutoff,
                       "cutoff_index": int(cutoff) - 1950, "window": [0], "key": key},
              "window": "cumulative", "params": {"epochs": 1}, "losses": [0.7, 0.5], "train_rows": 10,
              "started": 1_700_000_000.0 + int(cutoff) + seed, "ended": 1_700_000_100.0, "seconds": 1.5,
              "tags": {}}
    if folder is not None:
        record["weights_digest"] = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
    if environment is not None:
        record["environment"] = environment
    return record


def _units(root, weights=b"w", **kw):
    """Two cutoffs x two seeds, each with a checkpoint folder: (records, folders)."""
    records, folders = [], {}
    for cutoff in ("1950", "1951"):
        for seed in (0, 1):
            key = f"k-{cutoff}-{seed}"
            folder = root / key
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "model.safetensors").write_bytes(weights + key.encode())
            (folder / "model.json").write_text("{}")
            records.append(_record(cutoff, seed, key, folder, **kw))
            folders[key] = folder
    return records, folders


def _cfg(tmp_path, **kw):
    return TrackingConfig(**{"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "sync",
                             "artifact_root": str(tmp_path / "mlruns"), **kw})


def _store_state(exp_name="sync"):
    """(unit key -> live run ids, unit key -> [(registered name, version, run id)])."""
    import mlflow
    from mlflow.entities import ViewType

    client = mlflow.MlflowClient()
    exp_id = client.get_experiment_by_name(exp_name).experiment_id
    runs: dict[str, list] = {}
    for r in client.search_runs([exp_id], "tags.kind = 'cutoff'", run_view_type=ViewType.ACTIVE_ONLY):
        runs.setdefault(r.data.tags["unit_key"], []).append(r)
    versions: dict[str, list] = {}
    for v in client.search_model_versions("", max_results=10_000):
        versions.setdefault(v.tags.get("unit_key"), []).append((v.name, str(v.version), v.run_id))
    return runs, versions


def _one_each(records, name):
    """Exactly one live FINISHED run and one version (of ``name``, on that run) per unit."""
    runs, versions = _store_state()
    keys = {r["unit"]["key"] for r in records}
    assert set(runs) == keys and set(versions) == keys
    for key in keys:
        assert len(runs[key]) == 1 and runs[key][0].info.status == "FINISHED", runs[key]
        assert [(n, rid) for n, _, rid in versions[key]] == [(name, runs[key][0].info.run_id)], versions[key]
    return {k: v[0] for k, v in runs.items()}


def test_a_renamed_dataset_keeps_one_run_and_one_version_per_unit(mlflow_store, tmp_path):
    """Unit keys do not include the dataset's name: renaming it must not duplicate anything."""
    records, folders = _units(tmp_path / "ckpt")
    cfg = _cfg(tmp_path)
    first = tracking.sync_units(cfg, "old", "M", records, folders)
    second = tracking.sync_units(cfg, "new", "M", records, folders)
    assert second == first  # the same runs
    runs = _one_each(records, "new.M")
    assert {r.data.tags["dataset"] for r in runs.values()} == {"new"}
    import mlflow

    aliases = mlflow.MlflowClient().get_registered_model("new.M").aliases
    assert set(aliases) == {"cutoff-1950", "cutoff-1951", "cutoff-1950-seed-0", "cutoff-1950-seed-1",
                            "cutoff-1951-seed-0", "cutoff-1951-seed-1"}
    assert tracking.sync_units(cfg, "new", "M", records, folders) == first


def test_another_dataset_with_the_same_model_is_left_alone(mlflow_store, tmp_path):
    """Runs are found by model and unit key: another dataset's units of that model, in the same
    slots under other keys, are neither superseded nor deregistered."""
    a, fa = _units(tmp_path / "a", weights=b"a")
    b, fb = _units(tmp_path / "b", weights=b"b")
    for r in b:
        r["unit"]["key"] = "b" + r["unit"]["key"]
    fb = {"b" + k: v for k, v in fb.items()}
    cfg = _cfg(tmp_path)
    ra = tracking.sync_units(cfg, "A", "M", a, fa)
    rb = tracking.sync_units(cfg, "B", "M", b, fb)
    runs, versions = _store_state()
    assert {k: [r.info.run_id for r in v] for k, v in runs.items()} == {k: [v] for k, v in {**ra, **rb}.items()}
    assert all(len(v) == 1 for v in versions.values()) and len(versions) == 8


def test_retrained_weights_under_the_same_key_replace_the_run_and_version(mlflow_store, tmp_path):
    records, folders = _units(tmp_path / "ckpt")
    cfg = _cfg(tmp_path)
    first = tracking.sync_units(cfg, "d", "M", records, folders)
    (folders["k-1951-0"] / "model.safetensors").write_bytes(b"retrained")
    retrained = [_record(r["unit"]["cutoff"], r["unit"]["seed"], r["unit"]["key"], folders[r["unit"]["key"]])
                 for r in records]
    second = tracking.sync_units(cfg, "d", "M", retrained, folders)
    assert second["k-1951-0"] != first["k-1951-0"]
    assert {k: v for k, v in second.items() if k != "k-1951-0"} == {k: v for k, v in first.items()
                                                                     if k != "k-1951-0"}
    runs = _one_each(records, "d.M")
    assert runs["k-1951-0"].data.tags["weights_digest"] == retrained[2]["weights_digest"]
    import mlflow

    client = mlflow.MlflowClient()
    old = client.get_run(first["k-1951-0"])
    assert old.info.lifecycle_stage == "deleted" and "superseded_by" in old.data.tags
    folder = mlflow.artifacts.download_artifacts(f"runs:/{second['k-1951-0']}/model", dst_path=str(tmp_path / "dl"))
    assert (Path(folder) / "model.safetensors").read_bytes() == b"retrained"
    assert tracking.sync_units(cfg, "d", "M", retrained, folders) == second  # stable


def test_turning_log_models_on_logs_the_models_of_runs_made_without(mlflow_store, tmp_path):
    import mlflow

    records, folders = _units(tmp_path / "ckpt")
    first = tracking.sync_units(_cfg(tmp_path, log_models=False, register=False), "d", "M", records, folders)
    assert _store_state()[1] == {}
    second = tracking.sync_units(_cfg(tmp_path), "d", "M", records, folders)
    assert second == first  # the runs are kept ...
    _one_each(records, "d.M")
    for key, run_id in second.items():  # ... and now hold their models, which the versions point at
        folder = mlflow.artifacts.download_artifacts(f"models:/d.M@{tracking.alias_for(key[2:6], int(key[-1]))}",
                                                     dst_path=str(tmp_path / "dl" / key))
        assert (Path(folder) / "model.safetensors").read_bytes() == (folders[key] / "model.safetensors").read_bytes()
        assert mlflow.MlflowClient().get_run(run_id).data.tags["model_logged"] == PYFUNC_FORMAT


def test_the_sqlite_view_agrees_exactly_when_a_sync_would_write_nothing(mlflow_store, tmp_path, monkeypatch):
    """``store_agrees`` (an evaluate stage with nothing to score skips MLflow when it holds) reads
    the runs, versions and aliases MLflow's client reads; each thing a sync would write or delete
    makes it disagree, and after that sync it agrees again with the same runs."""
    import dataclasses

    import mlflow
    from mlflow.entities import ViewType

    from driftmatrix.tracking import sqlite_view

    records, folders = _units(tmp_path / "ckpt")
    cfg = _cfg(tmp_path)
    sync = lambda: tracking.sync_units(cfg, "d", "M", records, folders)  # noqa: E731
    run_ids = sync()
    agrees = lambda attached=run_ids, dataset="d", cfg=cfg: tracking.store_agrees(  # noqa: E731
        cfg, dataset, "M", records, attached)
    assert agrees()

    client = mlflow.MlflowClient()
    exp_id = client.get_experiment_by_name("sync").experiment_id
    assert tracking.sqlite_file(mlflow_store) == tmp_path / "mlflow.db"
    view = sqlite_view.read(tmp_path / "mlflow.db", "sync", "M")
    ours = {r.info.run_id: (r.info.status, r.info.lifecycle_stage, r.info.start_time, r.data.tags) for r in view.runs}
    assert ours == {r.info.run_id: (r.info.status, r.info.lifecycle_stage, r.info.start_time, r.data.tags)
                    for r in client.search_runs([exp_id], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL)}
    assert {(v.name, v.version, v.run_id, tuple(sorted(v.tags.items()))) for v in view.versions} == {
        (v.name, str(v.version), v.run_id, tuple(sorted(v.tags.items())))
        for v in client.search_model_versions("name LIKE '%.M'")}
    assert view.registered == {"d.M"} and len(view.runs) == 4 and len(view.versions) == 4
    assert view.aliases == {"d.M": {a: str(v) for a, v in client.get_registered_model("d.M").aliases.items()}}

    assert not agrees(dataset="renamed")  # the runs' dataset tag would change
    assert not agrees({**run_ids, "k-1950-0": "another-run"})  # a row attached to another run
    assert not agrees(cfg=dataclasses.replace(cfg, experiment="other"))
    first = next(iter(run_ids.values()))
    for undo in (lambda: client.delete_registered_model_alias("d.M", "cutoff-1951"),
                 lambda: client.delete_run(first),
                 lambda: client.delete_model_version("d.M", "2"),
                 lambda: client.set_tag(first, "model_logged", "false"),
                 lambda: client.set_terminated(client.create_run(  # a duplicate of a unit's run
                     exp_id, tags=client.get_run(first).data.tags).info.run_id)):
        undo()
        assert not agrees()
        assert sync() == run_ids and agrees()
    assert agrees(cfg=dataclasses.replace(cfg, register=False, log_models=False))  # less is asked

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}?timeout=20")
    assert agrees()  # connection options change no file
    for uri in (f"sqlite:///{tmp_path / 'absent.db'}", "http://127.0.0.1:9/"):
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        assert not agrees()
    (tmp_path / "notes.db").write_text("not a database")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'notes.db'}")
    assert sqlite_view.read(tmp_path / "notes.db", "sync", "M") is None and not agrees()


def test_register_without_log_models_is_a_config_error():
    from driftmatrix.config import ConfigError, parse_params

    with pytest.raises(ConfigError, match=r"^params.yaml: tracking.register: .*log_models") as err:
        parse_params({"models": {"M": {}}, "tracking": {"log_models": False, "register": True}})
    assert "\n" not in str(err.value)
    assert parse_params({"models": {"M": {}}, "tracking": {"log_models": False}}).tracking.register is False
    assert parse_params({"models": {"M": {}}}).tracking.register is True


def test_runs_record_what_computed_their_unit(mlflow_store, tmp_path):
    env = {"precision": "bf16", "device": "cuda:0", "threads": 4, "libraries": {"torch": "2.14.1", "numpy": "2.4.6"},
           "hardware": "NVIDIA H200"}
    records, folders = _units(tmp_path / "ckpt", environment=env)
    tracking.sync_units(_cfg(tmp_path), "d", "M", records, folders)
    runs = _one_each(records, "d.M")
    for record in records:
        tags = runs[record["unit"]["key"]].data.tags
        assert {k: tags.get(k) for k in ("precision", "device", "threads", "hardware", "lib.torch", "lib.numpy",
                                         "weights_digest")} == {
            "precision": "bf16", "device": "cuda:0", "threads": "4", "hardware": "NVIDIA H200",
            "lib.torch": "2.14.1", "lib.numpy": "2.4.6", "weights_digest": record["weights_digest"]}


def _sync_in_process(cfg, records, folders, barrier, results):
    """One of two syncs at once (a manual evaluate beside ``dvc repro``): set up, wait, sync."""
    tracking.configure(cfg)
    barrier.wait(timeout=120)
    results.put(tracking.sync_units(cfg, "d", "M", records, folders))


def test_two_syncs_at_once_leave_one_run_and_one_version_per_unit(mlflow_store, tmp_path):
    import multiprocessing

    records, folders = _units(tmp_path / "ckpt")
    cfg = _cfg(tmp_path)
    tracking.configure(cfg)  # the store and experiment exist before the two writers start
    tracking.close_stores()
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_sync_in_process, args=(cfg, records, folders, barrier, results))
             for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0, 0]
    done = [results.get(timeout=5) for _ in procs]
    runs = _one_each(records, "d.M")
    assert done[0] == done[1] == {k: r.info.run_id for k, r in runs.items()}  # neither lost the other's


def test_a_sync_keeps_the_first_duplicate_and_leaves_live_writers_alone(mlflow_store, tmp_path):
    """What a sync finds of another writer on a store a file lock cannot reach: a duplicate of a
    unit's run and version (the first run by start time, then id, stays: every writer keeps the
    same one), a run it is still writing (left alone) and one a killed writer left (deleted)."""
    import socket
    import subprocess
    import sys

    import mlflow

    records, folders = _units(tmp_path / "ckpt")
    cfg = _cfg(tmp_path)
    first = tracking.sync_units(cfg, "d", "M", records, folders)
    client = mlflow.MlflowClient()
    exp_id = client.get_experiment_by_name("sync").experiment_id
    key = records[0]["unit"]["key"]
    dup = tracking.create_unit_run(client, exp_id, records[0], folders[key], {"dataset": "d"})
    client.create_model_version("d.M", f"runs:/{dup}/model", run_id=dup,
                                tags={"unit_key": key, "cutoff": "1950", "seed": "0"})
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    unfinished = {}
    for name, driver in (("busy", tracking.driver_id()), ("killed", f"{socket.gethostname()}:{gone}")):
        unfinished[name] = client.create_run(exp_id, tags={"kind": "cutoff", "model": "M", "unit_key": f"k-{name}",
                                                           tracking.DRIVER_TAG: driver}).info.run_id
    again = tracking.sync_units(cfg, "d", "M", records, folders)
    assert again == {**first, key: min(first[key], dup)}  # equal start times: the lower id
    assert tracking.live_runs(exp_id, "d", "M") == again
    runs, versions = _store_state()
    assert {k: [r.info.run_id for r in v] for k, v in runs.items()} == {
        **{k: [v] for k, v in again.items()}, "k-busy": [unfinished["busy"]]}
    assert {k: [rid for _, _, rid in v] for k, v in versions.items()} == {k: [v] for k, v in again.items()}
    assert client.get_run(unfinished["killed"]).info.lifecycle_stage == "deleted"


def test_syncs_of_one_local_store_take_turns(tmp_path):
    """The store lock is held across processes (and leaves no file behind in the user's tree)."""
    import subprocess
    import sys

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert tracking.lock_folder(uri) == tmp_path
    assert tracking.lock_folder((tmp_path / "mlruns").as_uri()) == tmp_path
    assert tracking.lock_folder("http://localhost:5000") is None
    script = f"from driftmatrix.tracking import runs as tracking\nwith tracking.store_lock({uri!r}):\n    print('locked')\n"
    with tracking.store_lock(uri):
        other = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        with pytest.raises(subprocess.TimeoutExpired):
            other.wait(timeout=3)
    assert other.communicate(timeout=60)[0] == "locked\n" and other.returncode == 0
    assert list(tmp_path.iterdir()) == []


# --- two clones on one store: runs and versions are named by what computed them -----------------
CPU_A = {"precision": "fp32", "device": "cpu", "threads": 1, "libraries": {"torch": "2.14.1"},
         "hardware": "x86_64 AVX512 (Intel Xeon Platinum 8481C)"}
CPU_B = {**CPU_A, "hardware": "x86_64 AVX2 (AMD EPYC 7B13)"}


def _two_clones(tmp_path, monkeypatch, projects=("clone-a", "clone-b"), model="M"):
    """Clones that key the same units but computed them on different CPUs (weights that differ in
    the last bits), synced into one store in turn: (records and run ids of each, sync)."""
    a, fa = _units(tmp_path / "a", weights=b"w\x00", environment=CPU_A, model=model)
    b, fb = _units(tmp_path / "b", weights=b"w\x01", environment=CPU_B, model=model)
    cfg = _cfg(tmp_path)

    def sync(k: int) -> dict[str, str]:
        monkeypatch.setenv(tracking.PROJECT_ENV, projects[k])
        records, folders = ((a, fa), (b, fb))[k]
        return tracking.sync_units(cfg, "d", model, records, folders)

    return (a, sync(0)), (b, sync(1)), sync


@pytest.mark.parametrize("projects", [("host-a:/work/drift", "host-b:/work/drift"), ("team", "team")],
                         ids=["two-projects", "one-shared-project-name"])
def test_two_clones_on_different_cpus_never_supersede_each_other(mlflow_store, tmp_path, monkeypatch, projects):
    """Before, each sync deleted the other clone's runs as superseded (same keys, other weights).
    Now every sync of either clone keeps both clones' runs and versions as they were, also when
    the clones share a project name (``DRIFTMATRIX_PROJECT``): a run of the same unit with other
    weights is superseded only when computed on the same hardware."""
    import mlflow
    from mlflow.entities import ViewType

    (a, ids_a), (b, ids_b), sync = _two_clones(tmp_path, monkeypatch, projects)
    assert set(ids_a) == set(ids_b) and set(ids_a.values()).isdisjoint(ids_b.values())
    for _ in range(2):
        assert sync(0) == ids_a and sync(1) == ids_b  # the same runs, every time
    client = mlflow.MlflowClient()
    exp_id = client.get_experiment_by_name("sync").experiment_id
    runs = client.search_runs([exp_id], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL)
    assert sorted(r.info.run_id for r in runs) == sorted([*ids_a.values(), *ids_b.values()])
    assert all(r.info.lifecycle_stage == "active" and "superseded_by" not in r.data.tags for r in runs)
    versions = {v.run_id: v for v in client.search_model_versions("name = 'd.M'")}
    assert set(versions) == {*ids_a.values(), *ids_b.values()}  # one version per run of each clone
    for records, ids, env in ((a, ids_a, CPU_A), (b, ids_b, CPU_B)):
        for r in records:
            tags = versions[ids[r["unit"]["key"]]].tags
            assert (tags["hardware"], tags["weights_digest"]) == (env["hardware"], r["weights_digest"])


def test_weights_retrained_on_the_same_hardware_supersede_that_run(mlflow_store, tmp_path, monkeypatch):
    """The rule that spares other CPUs' runs still retires a project's own run of old weights."""
    import mlflow

    (a, ids_a), _, _ = _two_clones(tmp_path, monkeypatch)
    monkeypatch.setenv(tracking.PROJECT_ENV, "clone-a")
    again, folders = _units(tmp_path / "a2", weights=b"w\x02", environment=CPU_A)
    redone = tracking.sync_units(_cfg(tmp_path), "d", "M", again, folders)
    client = mlflow.MlflowClient()
    for key, run_id in ids_a.items():
        old = client.get_run(run_id)
        assert redone[key] != run_id and old.info.lifecycle_stage == "deleted"
        assert old.data.tags["superseded_by"].startswith(key)


def test_a_unit_loads_only_from_a_version_of_its_key_and_weights(mlflow_store, tmp_path, monkeypatch):
    """``registered_version`` resolves a unit by key (and by the weights its scores came from),
    this project's version first; a version of another key in the unit's slot (an old
    configuration, another clone's) is never used, and the error says which and why in one line."""
    from dataclasses import replace

    import mlflow

    from driftmatrix.units.plan import Unit

    (a, ids_a), (b, ids_b), _ = _two_clones(tmp_path, monkeypatch)
    client = mlflow.MlflowClient()
    unit = Unit("d", "M", "F", 0, 0, "1950", (0,), "k-1950-0")
    assert tracking.registered_version(client, unit).run_id == ids_b["k-1950-0"]  # clone-b's own, by project
    assert tracking.registered_version(client, unit, a[0]["weights_digest"]).run_id == ids_a["k-1950-0"]
    monkeypatch.setenv(tracking.PROJECT_ENV, "clone-a")
    assert tracking.registered_version(client, unit).run_id == ids_a["k-1950-0"]
    assert tracking.registered_version(client, unit, b[0]["weights_digest"]).run_id == ids_b["k-1950-0"]

    with pytest.raises(LookupError) as err:
        tracking.registered_version(client, replace(unit, key="0123456789ab"))
    line = str(err.value)
    assert "\n" not in line and line.startswith("M seed 0 cutoff 1950: the MLflow registry did not give a model "
                                                "(d.M version ")
    assert "has unit key k-1950-0, this plan's is 0123456789ab" in line and line.endswith(": not used)")
    with pytest.raises(LookupError, match=r"^M seed 0 cutoff 1950: .*d\.M version \d+ holds this unit but weights "
                                          r"\w{12} \(computed on x86_64 AVX.*\), its scores came from ffffffffffff: "
                                          r"not used\)$"):
        tracking.registered_version(client, unit, "f" * 64)
    with pytest.raises(LookupError, match=r"^M seed 2 cutoff 1950: .*\(d\.M has no version of unit k-1950-2\)$"):
        tracking.registered_version(client, replace(unit, seed=2, key="k-1950-2"))


def test_annotate_touches_only_this_projects_versions_of_the_plan(mlflow_store, tmp_path, monkeypatch):
    """The report stage's registry notes (scores, descriptions, the advisor's alias) go on this
    project's versions of the matrices' own units only: never on another clone's versions of the
    same registered model, nor on a version of another configuration left in a unit's slot."""
    import mlflow
    import numpy as np

    from driftmatrix.tracking import registry as registry_info
    from driftmatrix.analysis.matrixfile import DriftMatrices
    from driftmatrix.analysis.tables import Cohort
    from driftmatrix.config import parse_params

    (a, ids_a), (b, ids_b), _ = _two_clones(tmp_path, monkeypatch, model="MLP-S")
    client = mlflow.MlflowClient()
    old = client.create_model_version("d.MLP-S", f"runs:/{ids_a['k-1950-0']}/model", run_id=ids_a["k-1950-0"],
                                      tags={"unit_key": "k-old", "cutoff": "1950", "seed": "0",
                                            tracking.PROJECT_TAG: "clone-a"})
    keys = [[f"k-{c}-{s}" for c in ("1950", "1951")] for s in (0, 1)]
    matrices = DriftMatrices(model="MLP-S", slices=["1950", "1951"], dataset="d", seeds=[0, 1],
                             seed_values=np.array([[[90.0, 80.0], [85.0, 88.0]], [[91.0, 79.0], [86.0, 87.0]]]),
                             extra={"unit_keys": keys})
    cfg = _cfg(tmp_path)
    params = parse_params({"dataset": {"name": "d"}, "models": {"MLP-S": {}},
                           "tracking": {"uri": cfg.uri, "experiment": cfg.experiment, "artifact_root": cfg.artifact_root}})
    monkeypatch.setenv(tracking.PROJECT_ENV, "clone-a")
    done = registry_info.annotate(params, Cohort({"MLP-S": matrices}))
    versions = client.search_model_versions("name = 'd.MLP-S'")
    noted = {v.run_id for v in versions if "in_distribution" in v.tags or v.description}
    assert noted == set(ids_a.values()) and len(versions) == 9
    assert not client.get_model_version("d.MLP-S", old.version).description
    version = client.get_model_version_by_alias("d.MLP-S", "recommended-h1")
    assert version.run_id == ids_a["k-1951-0"] and done["aliases"] == {"recommended-h1": f"d.MLP-S/{version.version}"}
    assert version.tags["in_distribution"] == "88"  # M[1, 1] of seed 0
    # the policy stage's pick gets `recommended` on the same version; a recommendation of none removes it
    done = registry_info.annotate(params, Cohort({"MLP-S": matrices}), recommended="MLP-S")
    assert client.get_model_version_by_alias("d.MLP-S", "recommended").version == version.version
    assert done["aliases"]["recommended"] == f"d.MLP-S/{version.version}"
    registry_info.annotate(params, Cohort({"MLP-S": matrices}), recommended=None)
    assert "recommended" not in client.get_registered_model("d.MLP-S").aliases
