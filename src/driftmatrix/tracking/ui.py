"""Where to point a browser: the URL of the experiment's runs table in the MLflow UI (`make ui`).

The MLflow 3 web app routes with a hash (``/#/experiments/<id>/runs``); a missing SQLite store is
reported, not created."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import yaml

DEFAULT_STORE = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "driftmatrix"


def experiment_name(params: str | Path) -> str:
    """``tracking.experiment`` of a params file (the default name if the file or key is absent)."""
    path = Path(params)
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    tracking = (doc or {}).get("tracking") or {}
    return str(tracking.get("experiment") or DEFAULT_EXPERIMENT)


def runs_url(base: str, experiment_id: str) -> str:
    return f"{base.rstrip('/')}/#/experiments/{experiment_id}/runs"


def _sqlite_missing(uri: str) -> Path | None:
    if not uri.startswith("sqlite:///"):
        return None
    path = Path(uri[len("sqlite:///"):])
    return None if path.exists() else path


def describe(uri: str, name: str, host: str, port: int) -> str:
    """The line `make ui` prints: the runs table's URL, or why there is none yet."""
    base = f"http://{host}:{port}"
    missing = _sqlite_missing(uri)
    if missing is not None:
        return f"MLflow UI: {base}  (no store at {missing} yet: run `make repro` first)"
    from mlflow.tracking import MlflowClient

    exp = MlflowClient(tracking_uri=uri).get_experiment_by_name(name)
    if exp is None:
        return f"MLflow UI: {base}  (no experiment {name!r} in {uri} yet)"
    return f"MLflow runs of experiment {name!r}: {runs_url(base, exp.experiment_id)}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m driftmatrix.tracking.ui", description=__doc__.splitlines()[0])
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--uri", default=os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_STORE)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=5000)
    a = ap.parse_args(argv)
    from driftmatrix.tracking.server import redact

    print(redact(describe(a.uri, experiment_name(a.params), a.host, a.port)), flush=True)


if __name__ == "__main__":
    main()
