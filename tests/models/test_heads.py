"""Output priors: the loss-minimising constant per task, written into every registry model's output
bias, and the Prior baseline that outputs exactly that constant."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from driftmatrix.config import TrainConfig
from driftmatrix.features.inputs import PixelInputs, RowCountInputs
from driftmatrix.models.catalog import IMAGE_SHAPES, TEXT_SHAPES
from driftmatrix.models.heads import Prior, init_output_bias, output_bias, prior_bias
from driftmatrix.models.catalog import REGISTRY, get, is_baseline
from driftmatrix.learn.tasks import make_loss
from driftmatrix.learn.fit import fit, predict

DIM, MAX_LEN, B = 16, 8, 3
RNG = np.random.default_rng(0)
TARGETS = {  # task -> (outputs, training targets with every class / level / category present)
    "binary": (2, np.array([0, 0, 0, 1, 1, 0, 0, 0], np.int64)),
    "multiclass": (3, np.array([0, 1, 2, 2, 2, 2, 1, 2], np.int64)),
    "regression": (1, np.array([5, 5, 5, 5, 5, 5, 4, 4, 3, 2, 1, 5], np.float32)),
    "multilabel": (4, (RNG.random((40, 4)) < [0.1, 0.3, 0.5, 0.8]).astype(np.float32)),
}


def batch_for(inputs: str, dim: int = DIM) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(1)
    if inputs == "pixels":
        return (torch.rand(B, 3, 32, 32, generator=gen) * 2 - 1,)
    if inputs == "token_states":
        return torch.randn(B, MAX_LEN, dim, generator=gen), torch.arange(MAX_LEN)[None] < torch.tensor([[8], [5], [1]])
    if inputs == "pooled":
        return (torch.randn(B, dim, generator=gen),)
    return (torch.arange(B),)


def test_priors_by_hand():
    binary = prior_bias("binary", np.array([0, 0, 0, 1]), 2)
    assert binary == pytest.approx(np.log([0.75, 0.25]))  # log class shares; argmax = majority
    assert binary[1] - binary[0] == pytest.approx(math.log(1 / 3))  # the log-odds of class 1
    assert prior_bias("multiclass", np.array([0, 0, 2]), 3) == pytest.approx(np.log([2 / 3, 0.5 / 3, 1 / 3]))
    # regression: the loss-weighted mean = mean of the levels present (plain mean would be 25/6)
    assert prior_bias("regression", np.array([5, 5, 5, 5, 4, 1.0]), 1) == pytest.approx([10 / 3])
    # continuous targets: levels by rounding; weights 3/2 (level 0, two rows) and 3 (level 3)
    assert prior_bias("regression", np.array([0.2, 0.4, 3.0]), 1) == pytest.approx([(1.5 * 0.6 + 3 * 3.0) / 6])
    y = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0]], np.float32)
    # pos_weight neg/pos balances categories with positives (logit 0); none yet: log(0.5 / 4)
    assert prior_bias("multilabel", y, 3) == pytest.approx([0.0, 0.0, math.log(0.5 / 4)])


@pytest.mark.parametrize("task", sorted(TARGETS))
def test_prior_minimises_the_cutoffs_training_loss_over_constant_outputs(task):
    k, y = TARGETS[task]
    const = torch.tensor(prior_bias(task, y, k), dtype=torch.float32, requires_grad=True)
    loss = make_loss(task, y)(const.expand(len(y), k), torch.as_tensor(y))
    (grad,) = torch.autograd.grad(loss, const)
    assert grad.abs().max().item() < 1e-5
    for delta in (-0.3, 0.3):  # and a minimum: moving one output raises the loss
        shift = torch.zeros(k)
        shift[-1] = delta
        moved = make_loss(task, y)((const.detach() + shift).expand(len(y), k), torch.as_tensor(y))
        assert moved.item() > loss.item()


@pytest.mark.parametrize("name", sorted(n for n in REGISTRY if REGISTRY[n].inputs != "table"))
def test_every_registry_model_has_one_output_bias_of_its_output_width(name):
    """Every torch network (tabular models are fitted by their library; MLP-Tab's network starts
    at its window's prior through init_output_bias in models.tabular)."""
    model = get(name).build(5, {"dim": DIM, "max_len": MAX_LEN})
    assert output_bias(model).shape == (5,)


# every trained architecture, a frozen image and a frozen text head, and the baseline
ONE_PER_SHAPE = sorted(IMAGE_SHAPES) + sorted(TEXT_SHAPES) + ["DINOv2-S", "RoBERTa", "Prior"]


@pytest.mark.parametrize("name", ONE_PER_SHAPE)
@pytest.mark.parametrize("task", ["binary", "regression", "multilabel"])
def test_init_output_bias_sets_the_layer_that_makes_the_output(name, task):
    k, y = TARGETS[task]
    spec = get(name)
    torch.manual_seed(0)
    model = spec.build(k, {"dim": DIM, "max_len": MAX_LEN})
    prior = init_output_bias(model, task, y)
    bias = output_bias(model)
    np.testing.assert_allclose(bias.detach().numpy(), prior_bias(task, y, k), rtol=1e-6)
    with torch.no_grad():  # with the owning layer's weight at 0, the model outputs exactly the prior
        for module in model.modules():
            if getattr(module, "bias", None) is bias:
                module.weight.zero_()
        out = model.eval()(*batch_for(spec.inputs))
    np.testing.assert_allclose(out.numpy(), np.broadcast_to(prior, (B, k)), rtol=1e-5, atol=1e-6)


def test_prior_is_a_registered_zero_epoch_baseline_reading_no_inputs():
    spec = get("Prior")
    assert (spec.family, spec.inputs, spec.modality) == ("Baseline", "none", "any")
    assert spec.train_defaults == {"epochs": 0} and is_baseline("Prior") and not is_baseline("FFN-S")
    assert sum(p.numel() for p in spec.build(7, {}).parameters()) == 7


@pytest.mark.parametrize("task", sorted(TARGETS))
def test_prior_outputs_the_prior_for_pixel_text_and_no_inputs_after_a_zero_epoch_fit(task):
    k, y = TARGETS[task]
    model = get("Prior").build(k, {})
    prior = init_output_bias(model, task, y)
    cfg = TrainConfig(epochs=0, batch_size=4)
    targets = torch.as_tensor(y)
    fit(model, RowCountInputs(len(y)), targets, np.arange(len(y)), cfg, make_loss(task, y), 0, "cpu")
    expected = np.broadcast_to(prior, (len(y), k))
    np.testing.assert_allclose(predict(model, RowCountInputs(len(y)), batch_size=3), expected, rtol=1e-6)
    pixels = PixelInputs(np.zeros((len(y), 32, 32, 3), np.uint8))
    np.testing.assert_allclose(predict(model, pixels, batch_size=5), expected, rtol=1e-6)
    with torch.inference_mode():
        out = model(*batch_for("token_states"))
    assert out.shape == (B, k) and not out.requires_grad


def test_prior_trained_by_gradient_descent_moves_toward_the_same_constant():
    y = TARGETS["regression"][1]
    model = Prior(1)
    cfg = TrainConfig(epochs=300, batch_size=len(y), lr=0.05)
    fit(model, RowCountInputs(len(y)), torch.as_tensor(y), np.arange(len(y)), cfg, make_loss("regression", y), 0, "cpu")
    assert model.output_bias.item() == pytest.approx(prior_bias("regression", y, 1)[0], abs=0.05)


def test_prior_rejects_targets_that_do_not_fit_the_outputs():
    with pytest.raises(ValueError, match="class 2"):
        prior_bias("binary", np.array([0, 1, 2]), 2)
    with pytest.raises(ValueError, match="3 categories"):
        prior_bias("multilabel", np.zeros((4, 3)), 7)
    with pytest.raises(ValueError, match="no training rows"):
        prior_bias("regression", np.zeros(0), 1)
