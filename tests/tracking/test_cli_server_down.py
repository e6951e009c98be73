"""A stage that fails on a component ends with one line naming it (the MLflow tracking server, its
database, Ray) and what to change, with the credentials of every URI masked."""

from __future__ import annotations

import sys

import pytest


def test_an_unreachable_server_is_one_line_in_any_stage(monkeypatch, capsys):
    from mlflow.exceptions import MlflowException

    from driftmatrix import cli
    from driftmatrix.stages import report

    def down(*a, **k):
        raise MlflowException("API request to http://127.0.0.1:9/api/2.0/mlflow/runs/create failed with exception "
                              "HTTPConnectionPool(host='127.0.0.1', port=9): Max retries exceeded with url: "
                              "/api/2.0/mlflow/runs/create (Caused by NewConnectionError: Connection refused)")

    monkeypatch.setattr(report, "run", down)
    monkeypatch.setattr(sys, "argv", ["driftmatrix", "report", "--track"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("error: MLflow tracking server http://127.0.0.1:9 unreachable (connection refused")
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_other_errors_keep_their_traceback(monkeypatch):
    from driftmatrix import cli
    from driftmatrix.stages import report

    monkeypatch.setattr(report, "run", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(sys, "argv", ["driftmatrix", "report", "--track"])
    with pytest.raises(ZeroDivisionError):
        cli.main()


def _main(monkeypatch, capsys, failure):
    """Run `driftmatrix report --track` whose work is ``failure``: (exit status, stderr)."""
    from driftmatrix import cli
    from driftmatrix.stages import report

    monkeypatch.setattr(report, "run", lambda *a, **k: failure())
    monkeypatch.setattr(sys, "argv", ["driftmatrix", "report", "--track"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    return exit_.value.code, capsys.readouterr().err


def test_credentials_never_show_in_the_line_of_an_unreachable_server(monkeypatch, capsys):
    """A real request to a closed port on 127.0.0.1 through a URI with ``user:secret@``."""
    from mlflow.tracking import MlflowClient

    from testkit.servers import free_port

    uri = f"http://user:secret@127.0.0.1:{free_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    code, err = _main(monkeypatch, capsys, lambda: MlflowClient(uri).search_experiments())
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: MLflow tracking server http://user:***@127.0.0.1:") and "secret" not in err


def test_an_unreachable_database_is_named_as_such_without_its_password(monkeypatch, capsys):
    from sqlalchemy.exc import OperationalError

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "postgresql+psycopg2://mlflow:secret@127.0.0.1:9/mlflow")

    def down():
        raise OperationalError("SELECT 1", {}, ConnectionRefusedError(
            'connection to server at "127.0.0.1", port 9 failed: Connection refused\n\tIs the server running?'))

    code, err = _main(monkeypatch, capsys, down)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "secret" not in err
    assert err.startswith("error: MLflow tracking database postgresql+psycopg2://mlflow:***@127.0.0.1:9/mlflow: "
                          'connection to server at "127.0.0.1", port 9 failed: Connection refused: start it')


def test_config_errors_and_log_lines_mask_credentials(monkeypatch, capsys):
    import logging

    from driftmatrix.config import ConfigError
    from driftmatrix.tracking.server import RedactingFormatter, redact

    def bad():
        raise ConfigError("tune: study 's' in postgresql://optuna:hunter2@db:5432/optuna?password=hunter2 was run ...")

    code, err = _main(monkeypatch, capsys, bad)
    assert code == 2 and "hunter2" not in err and "postgresql://optuna:***@db:5432/optuna?password=***" in err
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "sync of %s", ("https://u:p4ss@host/x",), None)
    assert RedactingFormatter("%(message)s").format(record) == "sync of https://u:***@host/x"
    assert redact("sqlite:///mlflow.db and http://127.0.0.1:5000") == "sqlite:///mlflow.db and http://127.0.0.1:5000"


def test_a_ray_that_cannot_be_joined_is_named_ray_with_what_to_change(monkeypatch, capsys):
    """A loopback head that announces the machine's interface address (as plain `ray start --head
    --node-ip-address=127.0.0.1` does) is recognised from Ray's own failure and the address; no Ray
    is started: ``ray.init`` raises what Ray 2.60 raises then."""
    import ray
    from ray._private import ray_constants

    from driftmatrix.runtime import executor

    from driftmatrix import config
    from driftmatrix.tracking.server import explain

    def refused(**kwargs):
        assert kwargs["address"] == "auto" and kwargs["_node_ip_address"] == "127.0.0.1"
        try:
            raise RuntimeError("No node info found matching attributes: '127.0.0.1' when trying to resolve node "
                               "to connect to.")
        except RuntimeError as inner:
            raise ConnectionError("Failed to connect to Ray cluster at 127.0.0.1:6379") from inner

    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6379")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    monkeypatch.setenv(executor.LOCAL_ONLY_ENV, "1")
    monkeypatch.setattr(ray_constants, "ENABLE_RAY_CLUSTER", ray_constants.ENABLE_RAY_CLUSTER)
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", refused)
    cfg = config.parse_runtime({"executor": "ray", "address": "auto"})
    with pytest.raises(executor.RayUnreachable) as info:
        executor.start_ray(cfg)
    assert explain(info.value.__cause__) is None  # Ray's ConnectionError is not the tracking server's
    code, err = _main(monkeypatch, capsys, lambda: executor.start_ray(cfg))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "MLflow" not in err
    assert err.startswith("error: Ray at 127.0.0.1:6379 (runtime.address auto, RAY_ADDRESS) cannot be joined: no "
                          "node of it announces 127.0.0.1")
    assert 'docs/scaling.md "Several nodes on one machine"' in err


def test_any_other_failed_join_names_ray_and_the_recipe(monkeypatch):
    from driftmatrix.runtime import executor

    try:
        raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") from \
            RuntimeError("Failed to connect to GCS. Last connection error: timed out")
    except ConnectionError as exc:
        line = executor.join_error("10.0.0.5:6379", exc)
    assert line == ('Ray at 10.0.0.5:6379 (runtime.address) cannot be joined (Failed to connect to GCS. Last '
                    'connection error: timed out): start the head and nodes as docs/scaling.md "A Ray cluster" '
                    "shows, or point runtime.address / RAY_ADDRESS at its head (null: a private Ray here)")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    line = executor.join_error("auto", ConnectionError("Could not find any running Ray instance."))
    assert line.startswith("Ray at auto (runtime.address auto, RAY_ADDRESS) cannot be joined (Could not find any "
                           "running Ray instance.): start the head and nodes")
