"""Any stage whose MLflow tracking server stays unreachable ends with one line naming it."""

from __future__ import annotations

import sys

import pytest


def test_an_unreachable_server_is_one_line_in_any_stage(monkeypatch, capsys):
    from mlflow.exceptions import MlflowException

    from driftmatrix import cli, report

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
    from driftmatrix import cli, report

    monkeypatch.setattr(report, "run", lambda *a, **k: 1 / 0)
    monkeypatch.setattr(sys, "argv", ["driftmatrix", "report", "--track"])
    with pytest.raises(ZeroDivisionError):
        cli.main()
