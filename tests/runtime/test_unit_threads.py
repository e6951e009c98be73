"""A unit computes with floor(num_cpus) torch threads on every executor: CPU results depend on the
thread count (CNN-S and ViT-S weights differ between 1 and 2 threads), so this is what keeps the
local and Ray executors bit-identical for the same configuration."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from driftmatrix.runtime.executor import LocalExecutor, RayExecutor
from driftmatrix.config import Resources, RuntimeConfig, unit_threads


@dataclass(frozen=True)
class Nothing:
    def build(self):
        return None


def threads(_ctx, _item) -> int:
    import torch

    return torch.get_num_threads()


def test_unit_threads_follow_num_cpus():
    assert [unit_threads(Resources(num_cpus=c)) for c in (0.25, 1, 1.5, 2, 4)] == [1, 1, 1, 2, 4]


def test_local_units_run_with_the_units_threads_and_the_process_keeps_its_own():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        cfg = RuntimeConfig(num_cpus=1, overrides={"CNN-S": Resources(num_cpus=2)})
        assert [r for _, r in LocalExecutor(cfg, progress=False).map(threads, Nothing(), [0, 1])] == [1, 1]
        assert [r for _, r in LocalExecutor(cfg, progress=False).map(threads, Nothing(), [0], model="CNN-S")] == [2]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_ray_units_run_with_the_units_threads(ray_cluster):
    cfg = RuntimeConfig(executor="ray", overrides={"CNN-S": Resources(num_cpus=2)})
    ray_ex = RayExecutor(cfg, progress=False)
    assert [r for _, r in ray_ex.map(threads, Nothing(), [0, 1, 2])] == [1, 1, 1]
    assert [r for _, r in ray_ex.map(threads, Nothing(), [0], model="CNN-S")] == [2]


@pytest.mark.skipif(torch.get_num_threads() < 2, reason="one thread here: local and Ray agree trivially")
def test_a_cnn_unit_trains_to_the_same_bits_locally_and_on_ray(tmp_path, tiny_params, ray_cluster):
    from testkit.pipeline import Paths, prepare
    from driftmatrix.units.experiment import Experiment, ExperimentRecipe, train_task

    params = tiny_params(tmp_path, models={"CNN-S": {}}, train={"seeds": [0]})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    exp = Experiment(params, "CNN-S", paths.slices)
    recipe = ExperimentRecipe.of(params, "CNN-S", paths.slices, paths.features)
    units = exp.plan.units[-1:]
    cfg = RuntimeConfig(executor="ray")
    (_, local), = LocalExecutor(cfg, progress=False).map(train_task, recipe, units, model="CNN-S", context=exp)
    (_, remote), = RayExecutor(cfg, progress=False).map(train_task, recipe, units, model="CNN-S")
    assert local["losses"] == remote["losses"]
    assert all(torch.equal(local["state"][k], remote["state"][k]) for k in local["state"])
