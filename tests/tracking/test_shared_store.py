"""Two projects (clones) syncing one store: a unit redone under new settings supersedes only its
own project's runs and versions; another project's runs of the same dataset and slots stay. And
a tracking server that stays down is one line naming it."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from driftmatrix.tracking import runs as tracking
from driftmatrix.tracking import server as trackserver


def _run(key, cutoff, seed, project=None, run_id=None):
    tags = {"unit_key": key, "cutoff": cutoff, "seed": str(seed), "dataset": "d"}
    if project:
        tags["project"] = project
    return NS(info=NS(run_id=run_id or f"r-{key}", lifecycle_stage="active", status="FINISHED", start_time=1),
              data=NS(tags=tags))


def _wanted(key, cutoff, seed):
    return {key: {"unit": {"cutoff": cutoff, "seed": seed, "key": key}}}


def test_a_redone_unit_supersedes_only_its_own_projects_runs():
    theirs, ours_old, untagged = _run("kA", "1950", 0, "host:/a"), _run("kB0", "1950", 0, "host:/b"), \
        _run("kC", "1950", 0)
    keep, drop = tracking.plan_runs([theirs, ours_old, untagged], "d", _wanted("kB", "1950", 0), "host:/b")
    dropped = {r.info.run_id: by for r, by in drop}
    assert dropped == {"r-kB0": "kB", "r-kC": "kB"}  # ours and the untagged (pre-tag) run, not theirs
    assert keep == {}


def test_registry_leaves_another_projects_versions_alone():
    def version(n, key, project):
        return NS(version=str(n), name="d.M", run_id=f"r-{key}", tags={"unit_key": key, "cutoff": "1950",
                                                                       "seed": "0", "project": project})

    theirs, ours_old = version(1, "kA", "host:/a"), version(2, "kB0", "host:/b")
    records = [{"unit": {"cutoff": "1950", "seed": 0, "key": "kB"}}]
    keep, stale = tracking.registry_plan([theirs, ours_old], "d.M", records, {"kB": "r-kB"}, "host:/b")
    assert [v.version for v in stale] == ["2"]


def test_project_id_is_host_and_folder_unless_set(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(tracking.PROJECT_ENV, raising=False)
    assert tracking.project_id().endswith(f":{tmp_path.resolve()}")
    monkeypatch.setenv(tracking.PROJECT_ENV, "team-a")
    assert tracking.project_id() == "team-a"


def test_a_server_that_stays_down_is_one_line_naming_it(monkeypatch):
    from mlflow.exceptions import MlflowException

    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "4")
    exc = MlflowException("API request to http://127.0.0.1:5123/api/2.0/mlflow/runs/create failed with exception "
                          "HTTPConnectionPool(host='127.0.0.1', port=5123): Max retries exceeded with url: "
                          "/api/2.0/mlflow/runs/create (Caused by NewConnectionError(': Failed to establish a new "
                          "connection: [Errno 111] Connection refused'))")
    with pytest.raises(trackserver.TrackingServerDown) as err:
        with trackserver.server_errors("http://127.0.0.1:5123"):
            raise exc
    line = str(err.value)
    assert "\n" not in line and line.startswith("MLflow tracking server http://127.0.0.1:5123 unreachable "
                                                "(connection refused, after 4 retries)")
    with pytest.raises(MlflowException):  # other errors, and local stores, pass through unchanged
        with trackserver.server_errors("sqlite:///x.db"):
            raise exc
    with pytest.raises(ValueError):
        with trackserver.server_errors("http://127.0.0.1:5123"):
            raise ValueError("not a server error")


def test_retry_defaults_only_where_unset(monkeypatch):
    for key in trackserver.RETRY_DEFAULTS:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "9")
    trackserver.http_retry_defaults("sqlite:///x.db")
    import os

    assert "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR" not in os.environ
    trackserver.http_retry_defaults("http://127.0.0.1:1")
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == "9"
    assert os.environ["MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR"] == "1"
