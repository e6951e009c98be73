"""Shared fixtures: tiny built-in datasets and a temporary MLflow store (never the repo's)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# The code under test is this checkout's, whatever folder the venv's editable install points at
# (a venv shared between clones): in this process and in every process a test starts.
sys.path.insert(0, str(REPO / "src"))
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH")) if p)

from tinyparams import TINY_RUN_MODELS, make_tiny_params  # noqa: E402  (tests import them from there too)


def pytest_configure(config):
    """The worker pools tests start in this process fork from one server that imports torch once
    (when the first pool starts), as a stage's pools do, rather than each worker importing it anew."""
    import multiprocessing

    from driftmatrix.runtime.executor import server_preload

    multiprocessing.set_forkserver_preload(server_preload())


# --- `make test` runs on 2 workers (pytest -n 2 --dist loadgroup) ---------------------------------
# A worker runs whole groups: each module is one group (its module fixtures, such as a trained tiny
# pipeline, are built once), and every test that uses a Ray (the `ray_cluster` fixture, or a module
# marked xdist_group("ray")) is in the one group "ray", so no two Rays run at once and `address:
# auto` finds the right one; the tests of the shared `tiny_run` are one group too (it is trained
# once). Groups with tests marked `slow` start first (the longest work first
# keeps the two workers busy to the end); so do those of the `cluster` tests.
RAY_GROUP = "ray"
TINY_RUN_GROUP = "tiny_run"
SLOW_PREFIX = "slow:"


def _group(item) -> str:
    marks = [m.args[0] if m.args else m.kwargs.get("name", "default") for m in item.iter_markers("xdist_group")]
    if marks:
        return "_".join(sorted(map(str, marks)))
    if "ray_cluster" in getattr(item, "fixturenames", ()):
        return RAY_GROUP
    if "tiny_run" in getattr(item, "fixturenames", ()):
        return TINY_RUN_GROUP
    return item.nodeid.split("::")[0]


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """Name each test's group in its id (``nodeid@group``), as xdist's loadgroup reads it: xdist 3.8
    sets ``item._nodeid``, which pytest 9.2 no longer reads (a node's id is ``item._id``), so its own
    xdist_group marks are silently ignored and tests meant to run one after the other run at once."""
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        return
    groups = {item: _group(item) for item in items}
    slow = {g for item, g in groups.items() if item.get_closest_marker("slow") or item.get_closest_marker("cluster")}
    for item, group in groups.items():
        name = f"{SLOW_PREFIX}{group}" if group in slow else group
        item._id = type(item._id).parse(f"{item.nodeid}@{name}")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """loadgroup, with the groups holding slow tests handed out first, then the others by size."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class SlowFirst(LoadGroupScheduling):
        def _assign_work_unit(self, node):
            first = max(self.workqueue, key=lambda scope: scope.startswith(SLOW_PREFIX))
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return SlowFirst(config, log)


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


@dataclass(frozen=True)
class TinyRun:
    params: object
    paths: object  # testkit.pipeline.Paths, under root / "out"
    root: Path


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One tiny pipeline, every stage of ``run_all`` (4 years, 2 seeds, MLP-S, CNN-S and Prior, on
    the CPU, models logged and registered in its own sqlite store), trained once for the session:
    for tests that only read what it left. A test that changes something puts it back as it was;
    what a test writes goes under ``root``, beside ``paths.root``."""
    from testkit.pipeline import Paths, run_all

    root = tmp_path_factory.mktemp("tiny-run")
    params = make_tiny_params(root, models=TINY_RUN_MODELS, train={"device": "cpu"},
                              tracking={"log_models": True, "register": True})
    paths = Paths(root / "out")
    run_all(params, paths, generate=True)
    return TinyRun(params, paths, root)


@pytest.fixture
def ray_cluster():
    """The local Ray with 2 CPUs, started by the first test that needs it and kept for the next ones
    until the Ray group ends (:func:`pytest_runtest_teardown`); tests that need it skip, with the
    reason, only where Ray cannot start."""
    try:
        import ray
    except ImportError as exc:  # pragma: no cover - ray is pinned in requirements.txt
        pytest.skip(f"Ray cannot start: not installed ({exc})")
    if ray.is_initialized():
        return ray
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
    return ray


def pytest_runtest_teardown(item, nextitem):
    """Stop the local Ray after the last test of the Ray group (a worker runs the group's tests one
    after the other): Ray's idle daemons and workers would otherwise take about 4% of a core until
    the worker's last test, hundreds of seconds later; a later test that needs it starts it again."""
    ray = sys.modules.get("ray")
    if ray is None or _group(item) != RAY_GROUP or (nextitem is not None and _group(nextitem) == RAY_GROUP):
        return
    if ray.is_initialized():
        ray.shutdown()
