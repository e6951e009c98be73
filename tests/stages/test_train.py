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
