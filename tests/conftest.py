"""Shared fixtures: tiny built-in datasets and a temporary MLflow store (never the repo's)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# The code under test is this checkout's, whatever folder the venv's editable install points at
# (a venv shared between clones): in this process and in every process a test starts.
sys.path.insert(0, str(REPO / "src"))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)

from tinyparams import make_tiny_params  # noqa: E402  (tests import it from there too)


@pytest.fixture
def mlflow_store(tmp_path, monkeypatch):
    """Point MLflow at a temporary sqlite store for the duration of a test."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.fixture(scope="session")
def tiny_params():
    """Factory of params for a tiny synthetic run under a given folder."""
    return make_tiny_params


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray with 2 CPUs for the whole session (started by the first test that needs it);
    tests that need it skip, with the reason, only where Ray cannot start."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is pinned in requirements.txt
        pytest.skip(f"Ray cannot start: not installed ({exc})")
    from driftmatrix.runtime.executor import start_ray
    from driftmatrix.config import RuntimeConfig

    # workers import test modules' functions by name, as they import driftmatrix's in real runs
    saved = os.environ.get("PYTHONPATH")
    here = Path(__file__).parent
    test_dirs = [here, *sorted(d for d in here.iterdir() if d.is_dir() and d.name[0] not in "._")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (*map(str, test_dirs), saved) if p)
    try:
        start_ray(RuntimeConfig(executor="ray", max_retries=2), num_cpus=2)
    except Exception as exc:  # pragma: no cover - depends on the machine
        pytest.skip(f"Ray cannot start on this machine: {type(exc).__name__}: {exc}")
    finally:
        if saved is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = saved
    yield ray
    ray.shutdown()
