"""A shared MLflow tracking server on PostgreSQL (a throw-away ``initdb`` cluster on 127.0.0.1 and
``mlflow server --serve-artifacts`` on loopback): two projects running at once write runs,
versions, aliases and artifacts through it and keep exactly their own; a server stopped while the
evaluate stage syncs stops the stage with one line and loses or doubles nothing once restarted."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from testkit import cluster as ck

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def postgres(tmp_path_factory):
    from testkit.servers import Postgres, postgres_bin

    if postgres_bin() is None:
        pytest.skip("PostgreSQL is not installed (Debian: apt-get install postgresql; .ci/run does)")
    pytest.importorskip("psycopg2", reason="psycopg2-binary (requirements.txt) is not installed")
    pg = Postgres()  # its own folder under /tmp: pytest's are private to root, and PostgreSQL runs as postgres
    try:
        pg.start()
    except Exception as exc:  # pragma: no cover - depends on the machine
        pg.stop()
        pytest.skip(f"PostgreSQL cannot start here: {exc}")
    yield pg
    pg.stop()


@pytest.fixture(scope="module")
def server(postgres, tmp_path_factory):
    """One tracking server on one database for the module (tests keep to their own experiment and
    dataset names); a test that stops it starts it again."""
    from testkit.servers import MlflowServer

    folder = tmp_path_factory.mktemp("server")
    srv = MlflowServer(postgres.create_database("mlflow"), folder / "artifacts", log=folder / "server.log").start()
    yield srv
    srv.stop()


def _units(client, experiment):
    exp = client.get_experiment_by_name(experiment).experiment_id
    runs = client.search_runs([exp], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL, max_results=1000)
    return exp, runs


def _live(runs, project=None):
    return [r for r in runs if r.info.lifecycle_stage == "active"
            and (project is None or r.data.tags.get("project", "").endswith(str(project)))]


def test_server_stopped_while_evaluate_syncs(server, tmp_path):
    folder = ck.project(tmp_path / "p", ck.tiny_raw(tmp_path / "p", name="fault", experiment="fault"))
    ck.run(folder, upto="train")
    # one retry (about a second) instead of the stage's default 15-20 s of them (tracking.server.RETRY_DEFAULTS,
    # tested in test_shared_store.py): the test is what the stage does once they are spent
    env = ck.env_with({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1"}, tracking_uri=server.url)
    proc = subprocess.Popen([sys.executable, "-m", "driftmatrix.cli", "evaluate", "-m", "MLP-S"], cwd=folder,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # stop the server once the stage has created its first runs
    deadline = time.monotonic() + 180
    while "runs/create" not in server.tail(200_000):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the stage never synced"
        time.sleep(0.05)
    server.stop()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, (out, err)
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("error: MLflow tracking server http://127.0.0.1:") and str(server.port) in last, err
    assert "Retrying" in err  # the retries were logged
    # restart on the same port and rerun: nothing lost, nothing duplicated
    server.start()
    done = subprocess.run([sys.executable, "-m", "driftmatrix.cli", "evaluate", "-m", "MLP-S"], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(tracking_uri=server.url)
    _, runs = _units(client, "fault")
    live = _live(runs)
    assert len(live) == 8 and all(r.info.status == "FINISHED" for r in live)
    assert len({r.data.tags["unit_key"] for r in live}) == 8
    versions = client.search_model_versions("name = 'fault.MLP-S'")
    assert len(versions) == 8 and {v.run_id for v in versions} == {r.info.run_id for r in live}


def _two_at_once(a, b, url):
    procs = [ck.start(f, env=ck.env_with(tracking_uri=url)) for f in (a, b)]
    for proc, f in zip(procs, (a, b)):
        ck.finish(proc, f)


@pytest.mark.parametrize("case", ["two-datasets", "same-dataset-other-settings"])
def test_two_pipelines_at_once_on_one_server(server, tmp_path, case):
    a, b = tmp_path / "a", tmp_path / "b"
    exp = f"shared-{case}"
    if case == "two-datasets":
        ck.project(a, ck.tiny_raw(a, name="two-a", data_seed=1, experiment=exp))
        ck.project(b, ck.tiny_raw(b, name="two-b", data_seed=2, scenario="covariate", experiment=exp))
        names = "name LIKE 'two-%'"
    else:
        ck.project(a, ck.tiny_raw(a, name="same", experiment=exp))
        ck.project(b, ck.tiny_raw(b, name="same", experiment=exp, epochs=2))
        names = "name = 'same.MLP-S'"
    _two_at_once(a, b, server.url)
    _two_at_once(a, b, server.url)  # and again: a rerun changes nothing
    client = MlflowClient(tracking_uri=server.url)
    _, runs = _units(client, exp)
    for folder in (a, b):
        mine = _live(runs, folder.resolve())
        keys = {r["unit"]["key"] for r in ck.records(folder)}
        assert len(mine) == 8 and {r.data.tags["unit_key"] for r in mine} == keys, folder
        assert all(r.info.status == "FINISHED" and "superseded_by" not in r.data.tags for r in mine)
    assert len(_live(runs)) == 16 and len(runs) == 16  # nothing deleted or superseded
    versions = client.search_model_versions(names)
    assert len(versions) == 16
    assert {v.run_id for v in versions} == {r.info.run_id for r in _live(runs)}
    # what one pipeline writes through the server (its own test until two projects at once covered it):
    # nothing in the params' sqlite store, its host:folder project tag, one version per run of each
    # registered model, its cutoff aliases, and artifacts through the server into its artifact folder
    for folder in (a, b):
        assert not (folder / "mlflow.db").exists()
        mine = _live(runs, folder.resolve())
        assert {r.data.tags["project"] for r in mine} == {f"{socket.gethostname()}:{folder.resolve()}"}
    registered = {v.name for v in versions}
    assert registered == ({"two-a.MLP-S", "two-b.MLP-S"} if case == "two-datasets" else {"same.MLP-S"})
    for name in registered:
        assert {"cutoff-1950", "cutoff-1953-seed-1"} <= set(client.get_registered_model(name).aliases), name
    if case == "two-datasets":  # each project's registered model holds exactly its own runs
        for folder, name in ((a, "two-a.MLP-S"), (b, "two-b.MLP-S")):
            own = {r.info.run_id for r in _live(runs, folder.resolve())}
            assert {v.run_id for v in versions if v.name == name} == own, name
    assert any(server.artifacts.rglob("MLmodel"))
