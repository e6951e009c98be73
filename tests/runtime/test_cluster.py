"""A real two-node Ray cluster on loopback (``ray start --head`` and ``ray start --address``, one
CPU and a custom resource each, Ray token authentication on): the pipeline's units land on both
nodes and say so; a node SIGKILLed mid-stage, with or without coming back, costs nothing but
time (same matrices bit for bit as a local run, one run and one version per unit)."""

from __future__ import annotations

import ipaddress
import time

import numpy as np
import psutil
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from testkit import cluster as ck

# xdist_group: with the tests of the local Ray (ray_cluster) on one worker, never beside them: its
# checks find Ray processes by name
pytestmark = [pytest.mark.cluster, pytest.mark.xdist_group("ray")]


@pytest.fixture(scope="module")
def cluster():
    from driftmatrix.runtime.cluster import LocalRayCluster

    c = LocalRayCluster(cpus=1)
    try:
        c.start_head()
        c.add_node("second")
    except Exception as exc:  # pragma: no cover - depends on the machine
        c.stop()
        pytest.skip(f"a two-node Ray cluster cannot start here: {type(exc).__name__}: {exc}")
    yield c
    c.stop()
    assert not c._ours(), "processes of the cluster left running"


def _ensure_second(cluster, name="second"):
    if name not in cluster.nodes:
        cluster.add_node(name)


def _node_ids(cluster) -> dict[str, str]:
    """Resource name -> node id of the alive nodes (asked from a subprocess driver)."""
    import json
    import subprocess
    import sys

    code = ("import json, ray\n"
            "ray.init(address='auto', logging_level='ERROR', log_to_driver=False, _node_ip_address='127.0.0.1')\n"
            "print(json.dumps({k: n['NodeID'] for n in ray.nodes() if n['Alive'] for k in n['Resources']"
            " if k == 'head' or k.startswith(('second', 'back'))}))\n")
    out = subprocess.run([sys.executable, "-c", code], env=ck.env_with(cluster.env()), capture_output=True,
                         text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


RAY = {"executor": "ray", "address": "auto", "max_retries": 3}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The undisturbed local run of the node-loss projects (long units: about 1-4 s each)."""
    folder = tmp_path_factory.mktemp("reference")
    ck.project(folder, ck.tiny_raw(folder, years=5, per_year=100, epochs=200, register=False,
                                   runtime={"executor": "local", "workers": 1}))
    ck.run(folder)
    return ck.matrices(folder)


def _store(folder):
    client = MlflowClient(tracking_uri=f"sqlite:///{folder / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([exp], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL, max_results=1000)
    versions = client.search_model_versions("name = 'tiny.MLP-S'")
    return runs, versions


def _one_per_unit(folder, n_units):
    runs, versions = _store(folder)
    live = [r for r in runs if r.info.lifecycle_stage == "active"]
    assert len(live) == n_units and all(r.info.status == "FINISHED" for r in live)
    assert len({r.data.tags["unit_key"] for r in live}) == n_units
    assert len(versions) == n_units and len({v.tags["unit_key"] for v in versions}) == n_units
    assert {v.run_id for v in versions} == {r.info.run_id for r in live}
    return live


def test_units_land_on_both_nodes_and_record_which(cluster, tmp_path):
    nodes = _node_ids(cluster)
    assert set(nodes) == {"head", "second"}
    # everything the cluster listens on is loopback
    for pid in cluster._ours():
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                addr = ipaddress.ip_address(conn.laddr.ip)
                assert (getattr(addr, "ipv4_mapped", None) or addr).is_loopback, (pid, conn)

    folder = ck.project(tmp_path / "p", ck.tiny_raw(tmp_path / "p", years=5, per_year=100, epochs=40,
                                                    runtime=RAY))
    log = ck.run(folder, env=ck.env_with(cluster.env()))
    assert "joined auto" in log
    records = ck.records(folder)
    assert len(records) == 10
    where = {r["unit"]["key"]: r["node"] for r in records}
    assert {w["ray_node"] for w in where.values()} == set(nodes.values()), where  # both nodes
    assert all(w["host"] for w in where.values())
    live = _one_per_unit(folder, 10)
    assert {r.data.tags["unit_key"]: r.data.tags["ray_node"] for r in live} == \
        {k: w["ray_node"] for k, w in where.items()}


def _kill_second_mid_unit(cluster, proc, name="second", timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the stage ended before a unit ran on the second node"
        if cluster.running_task(name, "ray::train") is not None:
            time.sleep(0.3)  # well inside the unit (1-4 s)
            return cluster.kill_node(name)
        time.sleep(0.1)
    raise AssertionError("no unit ran on the second node")


@pytest.mark.parametrize("comes_back", [False, True], ids=["lost", "lost-and-back"])
def test_a_node_killed_mid_stage(cluster, reference, tmp_path, comes_back):
    _ensure_second(cluster)
    folder = ck.project(tmp_path / "p", ck.tiny_raw(tmp_path / "p", years=5, per_year=100, epochs=200,
                                                    runtime=RAY))
    proc = ck.start(folder, env=ck.env_with(cluster.env()))
    killed = _kill_second_mid_unit(cluster, proc)
    assert killed
    back = None
    if comes_back:
        back = cluster.add_node("back")
    log = ck.finish(proc, folder)
    assert "MLP-S" in log
    got = ck.matrices(folder)
    assert set(got) == set(reference) == {"MLP-S"}
    for model in reference:
        assert np.array_equal(got[model], reference[model]), model  # bit for bit
    live = _one_per_unit(folder, 10)
    nodes = {r.data.tags.get("ray_node") for r in live}
    if back is not None:
        ids = _node_ids(cluster)
        assert ids.keys() >= {"head", "back"}
        cluster.kill_node("back")
    print(f"units per node: {sorted(nodes)}")
