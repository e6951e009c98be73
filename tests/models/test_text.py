"""Text bodies and frozen heads: shapes, gradients, padding invariance, published sizes."""

from __future__ import annotations

import pytest
import torch

from driftmatrix.analysis.families import PAPER_FAMILIES
from driftmatrix.features.encoders import CATALOGUE
from driftmatrix.models import text
from driftmatrix.models.catalog import TEXT_SHAPES
from driftmatrix.models.catalog import REGISTRY

BODIES = sorted(TEXT_SHAPES)
HEADS = sorted(CATALOGUE)
# Authors' roster (protocol section 9) on 768-d RoBERTa states: (1 output Amazon, 7 outputs arXiv).
# Their TX models had no positional embeddings; ours add max_len x width (counted separately).
PUBLISHED = {"TX-S": (83e3, 83e3), "TextCNN-S": (88e3, 89e3), "FFN-S": (99e3, 99e3), "BiGRU-S": (99e3, 100e3),
             "FFN-M": (394e3, 397e3), "TextCNN-M": (461e3, 462e3), "TX-M": (493e3, 493e3),
             "BiLSTM-M": (536e3, 537e3), "FFN-L": (1.6e6, None), "TX-L": (1.9e6, None),
             "TextCNN-L": (1.9e6, None), "BiLSTM-Attn-L": (2.2e6, None)}
DIM, MAX_LEN = 16, 12


def tiny_batch(seed: int = 0):
    """Four documents of 12, 7, 3 and 1 tokens (masks), padded to 12 with random values."""
    gen = torch.Generator().manual_seed(seed)
    states = torch.randn(4, MAX_LEN, DIM, generator=gen)
    lengths = torch.tensor([12, 7, 3, 1])
    mask = torch.arange(MAX_LEN)[None] < lengths[:, None]
    return states, mask


def params_of(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", BODIES)
@pytest.mark.parametrize("outputs", [1, 7])
def test_bodies_forward_backward_on_a_masked_batch(name, outputs):
    spec = REGISTRY[name]
    torch.manual_seed(0)
    model = spec.build(outputs, {"dim": DIM, "max_len": MAX_LEN})
    states, mask = tiny_batch()
    states.requires_grad_(True)
    out = model(states, mask)
    assert out.shape == (4, outputs) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    grad = states.grad
    assert grad[~mask].abs().max() == 0, "gradient reached padded positions"
    assert grad[mask].abs().sum() > 0


@pytest.mark.parametrize("name", BODIES)
def test_padded_positions_change_nothing(name):
    torch.manual_seed(0)
    model = REGISTRY[name].build(3, {"dim": DIM, "max_len": MAX_LEN}).eval()
    states, mask = tiny_batch()
    noisy = states.clone()
    noisy[~mask] = 1e3 * torch.randn(int((~mask).sum()), DIM)
    with torch.no_grad():
        ref = model(states, mask)
        assert torch.allclose(model(noisy, mask), ref, rtol=0, atol=1e-5)
        # cutting the batch to its longest document (what the cache reader does) changes nothing
        one = model(states[1:2, :7], mask[1:2, :7])
        assert torch.allclose(one, ref[1:2], rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", BODIES)
def test_bodies_match_the_published_sizes(name):
    spec = REGISTRY[name]
    assert spec.modality == "text" and spec.inputs == "token_states" and spec.encoder == "RoBERTa"
    assert spec.family == PAPER_FAMILIES[name]
    assert dict(spec.train_defaults) == {"optimizer": "adamw", "weight_decay": 0.01, "grad_clip": 1.0, "lr": 5e-4}
    for outputs, published in zip((1, 7), PUBLISHED[name]):
        model = spec.build(outputs, {"dim": 768, "max_len": 128})
        n = params_of(model)
        if isinstance(model, text.TextTransformer):
            assert model.pos.numel() == 128 * model.proj.out_features
            n -= model.pos.numel()
        if published:
            assert abs(n - published) / published < 0.03, (outputs, n)


def test_transformer_positions_are_learned_and_bounded():
    model = REGISTRY["TX-S"].build(1, {"dim": DIM, "max_len": 4})
    assert model.pos.requires_grad
    states, mask = tiny_batch()
    with pytest.raises(ValueError, match="4 learned positions"):
        model(states, mask)


@pytest.mark.parametrize("name", HEADS)
def test_frozen_heads_read_pooled_features(name):
    spec = REGISTRY[name]
    assert spec.inputs == "pooled" and spec.encoder == name and spec.family == PAPER_FAMILIES.get(name, "Transfer")
    dim = 384 if name == "MiniLM-L6" else 768
    head = spec.build(7, {"dim": dim})
    assert params_of(head) == dim * 7 + 7
    x = torch.randn(5, dim, requires_grad=True)
    out = head(x)
    assert out.shape == (5, 7)
    out.sum().backward()
    assert x.grad.abs().sum() > 0
    if spec.modality == "image":
        assert spec.train_defaults["lr"] == 1e-4
    else:
        assert spec.train_defaults["optimizer"] == "adamw"


def test_head_sizes_match_the_published_ones():
    assert params_of(REGISTRY["RoBERTa"].build(1, {"dim": 768})) == 769  # Amazon
    assert params_of(REGISTRY["MiniLM-L6"].build(7, {"dim": 384})) == 2695  # arXiv, "3k"
    assert params_of(REGISTRY["DINOv2-S"].build(2, {"dim": 384})) == 770  # Yearbook
    assert params_of(REGISTRY["ResNet50-IN"].build(2, {"dim": 2048})) == 4098  # "4k"
