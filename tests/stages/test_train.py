import numpy as np
import pytest
import torch

from testkit.pipeline import Paths, prepare
from driftmatrix.stages.train import largest_first
from driftmatrix.units.experiment import Experiment
from driftmatrix.learn.fit import predict
from driftmatrix.units.plan import Unit


def test_same_seed_on_cpu_gives_identical_models_and_scores(tmp_path, tiny_params):
    params = tiny_params(tmp_path, train={"epochs": 2, "device": "cpu"}, models={"CNN-S": {}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    exp = Experiment(params, "CNN-S", paths.slices)
    (a, la, _), (b, lb, _), (c, lc, _) = exp.train_unit(exp.plan.unit(0, 1)), exp.train_unit(exp.plan.unit(0, 1)), exp.train_unit(exp.plan.unit(1, 1))
    assert la == lb and la != lc
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(va, vb), k
    pa, pb = predict(a, exp.inputs), predict(b, exp.inputs)
    assert pa.shape == (len(exp.inputs), 2) and np.array_equal(pa, pb)


def test_model_seed_never_changes_the_split(tmp_path, tiny_params):
    params = tiny_params(tmp_path)
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    exp0 = Experiment(params, "MLP-S", paths.slices)
    exp0.train_unit(exp0.plan.unit(0, 0))
    exp0.train_unit(exp0.plan.unit(1, 0))
    exp1 = Experiment(params, "MLP-S", paths.slices)
    assert (exp0.split == exp1.split).all() and (exp0.slice_ids == exp1.slice_ids).all()


def test_bf16_mixed_precision_is_deterministic_and_close_to_fp32(tmp_path, tiny_params):
    params = tiny_params(tmp_path, train={"epochs": 1, "precision": "bf16"}, models={"CNN-S": {}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    exp = Experiment(params, "CNN-S", paths.slices)
    (a, la, _), (b, lb, _) = exp.train_unit(exp.plan.unit(0, 2)), exp.train_unit(exp.plan.unit(0, 2))
    assert la == lb
    assert all(p.dtype == torch.float32 for p in a.parameters())  # weights stay fp32
    pa = predict(a, exp.inputs, precision="bf16")
    assert np.array_equal(pa, predict(b, exp.inputs, precision="bf16"))
    assert np.abs(pa - predict(a, exp.inputs)).max() < 0.1


def test_units_are_trained_largest_first_ties_in_plan_order():
    manifest = {"slices": [{"n_train": n} for n in (50, 10, 30)]}
    units = [Unit("d", "M", "MLP", seed, i, str(i), window, f"k{seed}{i}")
             for seed in (0, 1) for i, window in enumerate([(0,), (0, 1), (1, 2), (1,)])]
    order = [(u.seed, u.cutoff_index) for u in largest_first(units, manifest)]
    assert order == [(0, 1), (1, 1), (0, 0), (1, 0), (0, 2), (1, 2), (0, 3), (1, 3)]


def test_device_and_precision_mistakes_are_config_errors_before_any_work(monkeypatch):
    import torch

    from driftmatrix.config import ConfigError, parse_params
    from driftmatrix.learn.precision import resolve_device
    from driftmatrix.config import effective_config

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto").type == "cpu" and resolve_device("cpu").type == "cpu"
    with pytest.raises(ConfigError, match=r"^train.device: 'cuda:1', but torch sees no CUDA GPU here"):
        resolve_device("cuda:1")
    with pytest.raises(ConfigError, match=r"^train.device: expected auto, cpu or cuda\[:N\], got 'gpu'$"):
        resolve_device("gpu")
    with pytest.raises(ConfigError, match=r"^models.MLP-S.precision: expected fp32, bf16 or auto, got 'fp16'$"):
        effective_config(parse_params({"models": {"MLP-S": {"precision": "fp16"}}}), "MLP-S")


def test_stages_with_nothing_to_do_ask_no_torch_and_start_no_workers(tiny_run, monkeypatch):
    """On a machine whose probe (settings, libraries, CPU) matches the recorded one, the train stage
    reads the environment instead of resolving it again (torch's import is most of such a stage
    process), and neither it nor the evaluate stage starts worker processes; a changed probe
    resolves it again."""
    from driftmatrix.stages import evaluate, train
    from driftmatrix.units import environment
    from driftmatrix.units.store import CheckpointStore

    params, paths = tiny_run.params, tiny_run.paths
    if environment.environment_probe(params, "MLP-S") is None:
        pytest.skip("a GPU device file on this machine: torch is always asked")
    recorded = CheckpointStore(paths.checkpoints, "MLP-S").dir / "environment.json"
    before = recorded.read_bytes()
    asked = []
    monkeypatch.setattr(environment, "environment_of", lambda *a, **k: asked.append(a) or 1 / 0)
    monkeypatch.setattr(train, "start_workers", lambda *a, **k: 1 / 0)
    assert train.run(params, "MLP-S", paths.slices, paths.checkpoints, paths.validation, paths.features) == []
    assert asked == [] and recorded.read_bytes() == before
    assert evaluate.run(params, "MLP-S", paths.slices, paths.checkpoints, paths.scores, paths.features) == []
    monkeypatch.undo()

    try:  # another machine's record: resolved here (the same environment on this machine), nothing trained
        recorded.write_text(before.decode().replace(environment.environment_probe(params, "MLP-S"), "0123456789abcdef"))
        assert train.run(params, "MLP-S", paths.slices, paths.checkpoints, paths.validation, paths.features) == []
        assert recorded.read_bytes() == before
    finally:
        recorded.write_bytes(before)


def test_evaluate_starts_its_workers_before_planning_when_a_trained_unit_was_never_scored(
        tiny_run, tmp_path, monkeypatch, mlflow_store):
    """A checkpoint without a score doc is work for sure: the worker server's imports (torch, most
    of a worker's start) run while the stage plans, and the cells come out the same."""
    import dataclasses
    import json
    import shutil

    from driftmatrix.stages import evaluate, train
    from driftmatrix.units import plan as plans

    params, paths = tiny_run.params, tiny_run.paths
    shutil.copytree(paths.checkpoints / "MLP-S", tmp_path / "checkpoints" / "MLP-S")
    params = dataclasses.replace(params, tracking=dataclasses.replace(
        params.tracking, uri=mlflow_store, artifact_root=str(tmp_path / "mlruns"), log_models=False, register=False))
    calls = []
    monkeypatch.setattr(train, "start_workers", lambda *a, **k: calls.append("workers") or False)  # scored here
    real = plans.model_plan
    monkeypatch.setattr(plans, "model_plan", lambda *a, **k: calls.append("plan") or real(*a, **k))
    written = evaluate.run(params, "MLP-S", paths.slices, tmp_path / "checkpoints", tmp_path / "scores", paths.features)
    assert calls[:2] == ["workers", "plan"] and len(written) == len(list((paths.scores / "MLP-S").glob("*.json"))) - 1
    for doc in (paths.scores / "MLP-S").glob("*.json"):
        if doc.name != "environment.json":
            ours = json.loads((tmp_path / "scores" / "MLP-S" / doc.name).read_text())["cells"]
            assert {k: c["value"] for k, c in ours.items()} == {k: c["value"] for k, c in json.loads(doc.read_text())["cells"].items()}


def test_the_environment_probe_covers_what_the_resolution_reads(tmp_path, monkeypatch):
    from driftmatrix.units import environment

    probe = environment.probe_digest("auto", "auto", 2, False)
    assert probe is not None  # CPU-only CI; a GPU machine has a device file and gets None below anyway
    assert len({probe, environment.probe_digest("fp32", "auto", 2, False), environment.probe_digest("auto", "cpu", 2, False),
                environment.probe_digest("auto", "auto", 1, False), environment.probe_digest("auto", "auto", 2, True)}) == 5
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert environment.probe_digest("auto", "auto", 2, False) != probe
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    monkeypatch.setattr(environment, "library_versions", lambda: {"torch": "9.9", "numpy": "2.4.6"})
    assert environment.probe_digest("auto", "auto", 2, False) != probe
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: A\nflags\t\t: fpu avx2\n\nprocessor\t: 1\nmodel name\t: A\n"
                       "flags\t\t: fpu avx2\n")
    monkeypatch.setattr("driftmatrix.learn.precision.CPUINFO", cpuinfo)
    one = environment.probe_digest("auto", "auto", 2, False)
    cpuinfo.write_text(cpuinfo.read_text().replace("avx2", "avx2 amx_bf16"))
    assert one is not None and environment.probe_digest("auto", "auto", 2, False) != one
    monkeypatch.setattr("driftmatrix.learn.precision.CPUINFO", tmp_path / "missing")
    assert environment.probe_digest("auto", "auto", 2, False) is None  # unknown CPU: torch is asked
    gpu = tmp_path / "nvidia0"
    gpu.touch()
    monkeypatch.setattr(environment, "GPU_DEVICE_FILES", (str(gpu),))
    monkeypatch.setattr("driftmatrix.learn.precision.CPUINFO", cpuinfo)
    assert environment.probe_digest("auto", "auto", 2, False) is None  # a GPU: torch is asked
