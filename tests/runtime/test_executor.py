"""Executors: runtime config, the local executor, and Ray (a local Ray with 2 CPUs, one per module).

The Ray tests skip only where Ray cannot start, and say why.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass

import pytest

from driftmatrix.config import ConfigError
from driftmatrix.runtime.executor import KILL_ENV, LocalExecutor, Progress, RayExecutor, local_slots, machine_cpus, make_executor, recipe_key, reuse_workers
from driftmatrix.config import Resources, RuntimeConfig, parse_runtime


# --- work used by both executors (top level: Ray pickles it by reference) -----------------------
_BUILDS: list[int] = []  # builds of TinyData in this process


@dataclass(frozen=True)
class TinyData:
    """Recipe: a small fixed regression problem."""

    rows: int = 64
    seed: int = 123

    def build(self):
        import torch

        _BUILDS.append(os.getpid())
        gen = torch.Generator().manual_seed(self.seed)
        x = torch.randn(self.rows, 8, generator=gen)
        y = x @ torch.randn(8, 1, generator=gen) + 0.1 * torch.randn(self.rows, 1, generator=gen)
        return {"x": x, "y": y, "pid": os.getpid(), "build": uuid.uuid4().hex}


def train_linear(ctx, seed):
    """Train an nn.Linear for a few epochs with a fixed seed; return its state dict and the context's id."""
    import torch

    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(seed)
    for _ in range(5):
        for idx in torch.randperm(len(ctx["x"]), generator=gen).split(16):
            loss = torch.nn.functional.mse_loss(model(ctx["x"][idx]), ctx["y"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    return {"state": model.state_dict(), "context": (ctx["pid"], ctx["build"])}


def slow_double(ctx, item):
    time.sleep(0.3)
    return {"value": item * 2, "pid": os.getpid()}


def meet_then_return(ctx, item):
    """Both items run at once (2 CPUs), wait for each other, then return together."""
    name, folder = item
    open(os.path.join(folder, name), "w").close()
    deadline = time.monotonic() + 60
    while len(os.listdir(folder)) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return name


def identity(ctx, item):
    return item


def fail_on_three(ctx, item):
    if item == 3:
        raise ValueError("unit 3 is broken")
    return item


def die_on_two(ctx, item):
    if item == 2:
        os._exit(3)  # a worker killed mid-unit (out of memory, kill -9)
    return item


def sleep_then_pid(ctx, item):
    time.sleep(item)
    return os.getpid()


# --- runtime config ------------------------------------------------------------------------------
def test_runtime_defaults_are_local():
    cfg = parse_runtime(None)
    assert cfg == RuntimeConfig()
    assert (cfg.executor, cfg.workers, cfg.address, cfg.num_cpus, cfg.num_gpus, cfg.max_retries) == \
        ("local", 1, None, 1, 0, 3)
    assert isinstance(make_executor(cfg), LocalExecutor)


def test_runtime_overrides_per_model():
    cfg = parse_runtime({"executor": "ray", "address": "auto", "num_gpus": 0.25,
                         "overrides": {"ViT-L": {"num_gpus": 0.5}, "CNN-S": {"num_cpus": 2}}},
                        models=["ViT-L", "CNN-S", "MLP-S"])
    assert cfg.resources_for("MLP-S") == Resources(1, 0.25)
    assert cfg.resources_for("ViT-L") == Resources(1, 0.5)
    assert cfg.resources_for("CNN-S") == Resources(2, 0.25)
    assert cfg.resources_for(None) == Resources(1, 0.25)
    assert isinstance(make_executor(cfg), RayExecutor)


@pytest.mark.parametrize("raw, where", [
    ({"exector": "ray"}, r"params.yaml: runtime: unknown key\(s\) \['exector'\]"),
    ({"executor": "dask"}, "params.yaml: runtime.executor"),
    ({"num_gpus": -1}, "params.yaml: runtime.num_gpus"),
    ({"num_gpus": 1.5}, "params.yaml: runtime.num_gpus"),
    ({"num_cpus": "two"}, "params.yaml: runtime.num_cpus"),
    ({"max_retries": 1.5}, "params.yaml: runtime.max_retries"),
    ({"address": ""}, "params.yaml: runtime.address"),
    ({"workers": 0}, "params.yaml: runtime.workers"),
    ({"workers": "all"}, "params.yaml: runtime.workers"),
    ({"workers": True}, "params.yaml: runtime.workers"),
    ({"overrides": {"MLP-S": {"gpus": 1}}}, r"params.yaml: runtime.overrides.MLP-S: unknown key\(s\) \['gpus'\]"),
    ({"overrides": {"MLP-X": {"num_gpus": 1}}}, "params.yaml: runtime.overrides.MLP-X"),
    ({"overrides": {"MLP-S": {"num_gpus": 2.5}}}, "params.yaml: runtime.overrides.MLP-S.num_gpus"),
])
def test_runtime_errors_name_the_key(raw, where):
    with pytest.raises(ConfigError, match=f"^{where}"):
        parse_runtime(raw, models=["MLP-S"])


@dataclass(frozen=True)
class WithDict:
    """A recipe holding a dict (like ``Params``): frozen but not hashable."""

    options: dict


def test_recipe_key_of_an_unhashable_recipe_is_stable():
    assert recipe_key(TinyData()) == TinyData()
    assert recipe_key(WithDict({"a": 1})) == recipe_key(WithDict({"a": 1})) != recipe_key(WithDict({"a": 2}))


def test_gpu_units_reuse_workers_only_with_one_gpu_per_node():
    assert reuse_workers(0, 8) and reuse_workers(0.25, 1) and reuse_workers(1, 0)
    assert not reuse_workers(0.25, 8)


# --- local executor --------------------------------------------------------------------------------
def test_local_builds_once_and_keeps_item_order():
    before = len(_BUILDS)
    out = list(LocalExecutor(progress=False).map(train_linear, TinyData(), [3, 1, 2], model="MLP-S"))
    assert [item for item, _ in out] == [3, 1, 2]
    assert len(_BUILDS) == before + 1
    assert len({r["context"] for _, r in out}) == 1
    assert list(LocalExecutor(progress=False).map(train_linear, TinyData(), [])) == []


def test_local_slots_are_workers_or_cpus_over_num_cpus():
    cpus = machine_cpus()
    assert local_slots(RuntimeConfig(workers=3), Resources(num_cpus=2)) == 3
    assert local_slots(RuntimeConfig(workers="auto"), Resources(num_cpus=1)) == cpus
    assert local_slots(RuntimeConfig(workers="auto"), Resources(num_cpus=cpus)) == 1
    assert local_slots(RuntimeConfig(workers="auto"), Resources(num_cpus=cpus + 1)) == 1
    ex = LocalExecutor(RuntimeConfig(workers=2, overrides={"ViT-L": Resources(num_cpus=1, num_gpus=1)}))
    assert ex.workers("MLP-S", 5) == 2 and ex.workers("MLP-S", 1) == 0  # one unit: no worker to start
    assert ex.workers("ViT-L", 5) == 0  # GPU units stay in the stage process
    from driftmatrix.runtime.executor import start_worker_server

    assert not start_worker_server(RuntimeConfig(workers=2, num_gpus=1), "ViT-L")  # so no server for them


POOL = RuntimeConfig(workers=2)


def test_local_workers_give_the_in_process_bits_from_other_processes():
    import torch

    seeds = [0, 1, 2, 3, 4]
    here = dict(LocalExecutor(progress=False).map(train_linear, TinyData(), seeds))
    there = list(LocalExecutor(POOL, progress=False).map(train_linear, TinyData(), seeds))
    assert sorted(item for item, _ in there) == seeds  # each unit exactly once
    for seed, result in there:
        for name, value in here[seed]["state"].items():
            assert torch.equal(value, result["state"][name]), (seed, name)
    pids = {pid for _, r in there for pid, _ in [r["context"]]}
    assert os.getpid() not in pids and 1 <= len(pids) <= 2
    assert len({r["context"] for _, r in there}) == len(pids)  # one context build per worker


def test_local_workers_yield_units_as_they_finish():
    out = list(LocalExecutor(POOL, progress=False).map(sleep_then_pid, TinyData(), [1.5, 0.0, 0.1]))
    assert [item for item, _ in out][-1] == 1.5
    assert len({pid for _, pid in out}) == 2


def test_local_workers_are_spawned_where_the_os_has_no_forkserver(monkeypatch):
    import multiprocessing

    from driftmatrix.runtime import executor

    monkeypatch.setattr(multiprocessing, "get_all_start_methods", lambda: ["spawn"])  # as on macOS, Windows
    assert not executor.start_worker_server(POOL, "MLP-S")
    out = list(LocalExecutor(POOL, progress=False).map(identity, TinyData(), [4, 5, 6]))
    assert sorted(item for item, _ in out) == [4, 5, 6] and all(item == r for item, r in out)


def test_local_worker_unit_error_reaches_the_stage():
    with pytest.raises(ValueError, match="unit 3 is broken"):
        list(LocalExecutor(POOL, progress=False).map(fail_on_three, TinyData(), [1, 2, 3, 4]))


def test_local_worker_that_dies_fails_the_map_naming_its_unit():
    with pytest.raises(RuntimeError, match=r"kill-test: a worker process died .* in flight: \[.*2.*\]"):
        list(LocalExecutor(POOL, progress=False).map(die_on_two, TinyData(), [1, 2, 3], label="kill-test"))


def test_local_workers_stop_when_the_stage_stops_reading():
    gen = LocalExecutor(POOL, progress=False).map(sleep_then_pid, TinyData(), [0.0, 30.0, 30.0, 30.0])
    item, pid = next(gen)
    started = time.monotonic()
    gen.close()  # e.g. the stage failed writing the first result
    assert item == 0.0 and time.monotonic() - started < 10
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"worker {pid} still runs after the map stopped")


STAGE = """
import os, sys, time
from dataclasses import dataclass
from driftmatrix.runtime.executor import LocalExecutor, RuntimeConfig, start_worker_server

@dataclass(frozen=True)
class Nothing:
    def build(self):
        return None

def report_then_sleep(ctx, folder):
    open(os.path.join(folder, str(os.getpid())), "w").close()
    time.sleep(120)

if __name__ == "__main__":
    cfg = RuntimeConfig(workers=2)
    assert start_worker_server(cfg, "MLP-S")
    list(LocalExecutor(cfg, progress=False).map(report_then_sleep, Nothing(), [sys.argv[1]] * 2))
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.skipif(sys.platform != "linux", reason="the worker server dies with its stage on Linux only")
def test_local_workers_die_with_a_killed_stage_process(tmp_path):
    """SIGKILL of the stage process alone (not its process group) takes its worker server and
    workers with it: left running they would finish units that nobody collects."""
    import signal
    import subprocess

    (tmp_path / "stage.py").write_text(STAGE)
    folder = tmp_path / "pids"
    folder.mkdir()
    stage = subprocess.Popen([sys.executable, "stage.py", str(folder)], cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while len(os.listdir(folder)) < 2:
            assert stage.poll() is None and time.monotonic() < deadline, "the workers never started"
            time.sleep(0.1)
        workers = [int(name) for name in os.listdir(folder)]
        assert all(not _gone(pid) for pid in workers)
        stage.send_signal(signal.SIGKILL)
        stage.wait()
        deadline = time.monotonic() + 10
        while not all(_gone(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert all(_gone(pid) for pid in workers), f"workers {workers} outlived their stage process"
    finally:
        stage.kill()


def test_progress_logs_done_running_queued_and_eta(caplog):
    caplog.set_level(logging.INFO, logger="driftmatrix.runtime.executor")
    bar = Progress("train MLP-S", 4, every=2)
    for done in range(1, 5):
        bar.update(done, min(2, 4 - done))
    bar.close()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("train MLP-S: 2/4 done, 2 running, 0 queued") and "ETA" in lines[0]
    assert lines[1].startswith("train MLP-S: 4/4 done, 0 running, 0 queued")


# --- Ray -------------------------------------------------------------------------------------------
RAY_CFG = RuntimeConfig(executor="ray", max_retries=2)




def test_ray_and_local_give_bit_identical_state_dicts(ray_cluster):
    import torch

    seeds = [0, 1, 2, 3, 4, 5]
    local = dict(LocalExecutor(progress=False).map(train_linear, TinyData(), seeds))
    remote = list(RayExecutor(RAY_CFG, progress=False).map(train_linear, TinyData(), seeds, model="MLP-S"))
    assert sorted(item for item, _ in remote) == seeds
    for seed, result in remote:
        ours, theirs = local[seed]["state"], result["state"]
        assert ours.keys() == theirs.keys()
        for name in ours:
            assert torch.equal(ours[name], theirs[name]), (seed, name)
    assert not torch.equal(local[0]["state"]["weight"], local[1]["state"]["weight"])  # seeds matter
    # the context is built once per worker process, not once per unit
    contexts = {r["context"] for _, r in remote}
    assert len(contexts) == len({pid for pid, _ in contexts}) <= 2


def test_ray_worker_killed_mid_item_is_retried(ray_cluster, tmp_path, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="driftmatrix.runtime.executor")
    marker = tmp_path / "killed-once"
    monkeypatch.setenv(KILL_ENV, str(marker))
    items = list(range(6))
    out = list(RayExecutor(RAY_CFG).map(slow_double, TinyData(), items, label="kill-test"))
    assert any(r.getMessage().startswith("kill-test: 6/6 done, 0 running, 0 queued") for r in caplog.records)
    assert marker.exists(), "the hook did not fire"
    killed = int(marker.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(killed, 0)  # that worker process is gone
    assert sorted(item for item, _ in out) == items  # every item exactly once
    assert all(result["value"] == item * 2 for item, result in out)


def test_ray_delivers_units_that_finish_together(ray_cluster, tmp_path):
    items = [("a", str(tmp_path)), ("b", str(tmp_path))]
    out = list(RayExecutor(RAY_CFG, progress=False).map(meet_then_return, TinyData(), items))
    assert sorted(result for _, result in out) == ["a", "b"]
    assert sorted(item for item, _ in out) == sorted(items)


def test_ray_more_units_than_in_flight_window_each_yield_once(ray_cluster):
    items = list(range(150))  # the window on 2 CPUs is 64 units in flight
    out = list(RayExecutor(RAY_CFG, progress=False).map(identity, TinyData(), items))
    assert sorted(item for item, _ in out) == items
    assert all(item == result for item, result in out)


def test_ray_unit_error_reaches_the_driver(ray_cluster):
    with pytest.raises(ValueError, match="unit 3 is broken"):
        list(RayExecutor(RAY_CFG, progress=False).map(fail_on_three, TinyData(), [1, 2, 3, 4]))


def test_ray_rejects_units_this_machine_cannot_hold(ray_cluster):
    cfg = RuntimeConfig(executor="ray", num_cpus=64)
    with pytest.raises(ConfigError, match="runtime"):
        list(RayExecutor(cfg, progress=False).map(slow_double, TinyData(), [1]))


def test_keep_freed_memory_stops_each_step_page_faulting_its_tensors_afresh():
    import subprocess
    import sys

    code = """
import resource, torch
torch.set_num_threads(1)  # one malloc arena: the counts do not depend on thread scheduling
from driftmatrix.runtime.executor import keep_freed_memory
from driftmatrix.models.catalog import REGISTRY
torch.manual_seed(0)
model, x = REGISTRY["CNN-S"].build(2, {}), torch.randn(32, 3, 32, 32)
def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(10):
        model(x).sum().backward()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults()
plain = faults()
assert keep_freed_memory()
faults()  # the heap grows once
print(plain, min(faults() for _ in range(3)))  # the fewest of three windows: a stray heap growth is not a step
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    plain, kept = map(int, out.split())
    # plain glibc page-faults 800-4,000 pages a step on dev machines but only ~150 on one CI machine (cause
    # unknown), so the test asserts what keep_freed_memory promises, not what plain malloc costs
    assert kept <= 10 * 20, (plain, kept)  # steady state: steps reuse the heap (without it: >= 150 a step)
    assert kept <= plain, (plain, kept)
