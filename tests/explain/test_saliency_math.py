"""Gradient saliency and concentration scores on hand-made models and maps (no training)."""

import numpy as np
import pytest
import torch
from torch import nn

from driftmatrix.explain import concentration as conc
from driftmatrix.explain.adapters import encoder_prepare
from driftmatrix.explain.saliency import mean_saliency, minmax_per_image, saliency_maps


class Linear2(nn.Module):
    """Two logits, each a weighted sum of the pixels: d logit_k / dx = w_k exactly."""

    def __init__(self, w: torch.Tensor):
        super().__init__()
        self.w = nn.Parameter(w, requires_grad=False)  # frozen: input gradients must still flow

    def forward(self, x):
        return torch.einsum("bchw,kchw->bk", x, self.w)


def _weights():
    w = torch.zeros(2, 3, 4, 4)
    w[0, 0, 1, 1] = 2.0   # class 0 reads pixel (1, 1) of the red channel
    w[0, 2, 3, 0] = -1.0  # and, negatively, (3, 0) of blue
    w[1, 1, 2, 3] = 4.0   # class 1 reads (2, 3) of green only
    return w


def test_gradient_of_the_predicted_logit_max_over_channels_minmax():
    model = Linear2(_weights())
    x = torch.zeros(2, 3, 4, 4)
    x[0, 0, 1, 1] = 1.0   # image 0: logit0 = 2 > 0 -> class 0
    x[1, 1, 2, 3] = 1.0   # image 1: logit1 = 4 > 0 -> class 1
    maps = saliency_maps(model, x)
    expect0 = torch.zeros(4, 4)
    expect0[1, 1], expect0[3, 0] = 1.0, 0.5  # |2| and |-1|, scaled by the max 2
    expect1 = torch.zeros(4, 4)
    expect1[2, 3] = 1.0
    assert torch.allclose(maps[0], expect0) and torch.allclose(maps[1], expect1)
    assert model.w.grad is None  # parameters untouched


def test_maps_do_not_depend_on_the_batch_and_mean_is_their_average():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 3)).eval()
    x = torch.randn(5, 3, 6, 6)
    together = saliency_maps(model, x)
    alone = torch.stack([saliency_maps(model, x[k:k + 1])[0] for k in range(5)])
    assert torch.allclose(together, alone, atol=1e-6)
    assert together.amin(dim=(1, 2)).eq(0).all() and torch.allclose(together.amax(dim=(1, 2)), torch.ones(5))
    summary = mean_saliency(model, [x[:2], x[2:]], per_image={"top": lambda m: torch.ones(len(m))})
    assert summary.n_images == 5 and summary.per_image["top"] == pytest.approx(1.0)
    assert torch.allclose(summary.mean_map, together.mean(dim=0), atol=1e-6)
    assert torch.allclose(summary.mean_image, x.mean(dim=0), atol=1e-6)


def test_prepare_is_differentiated_through_a_frozen_backbone():
    """A frozen-encoder model: pixels -> resize -> frozen conv backbone -> pooled -> head."""
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    for p in backbone.parameters():
        p.requires_grad_(False)

    class FakeEncoder:
        mean, std = (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)

        def _forward(self, x):
            return backbone(x)

    head = nn.Linear(8, 2)
    x = torch.rand(3, 3, 8, 8) * 2 - 1
    maps = saliency_maps(head, x, encoder_prepare(FakeEncoder(), size=16))
    assert maps.shape == (3, 8, 8) and torch.isfinite(maps).all() and (maps.amax(dim=(1, 2)) == 1).all()


def test_minmax_of_a_constant_map_is_zero():
    assert torch.equal(minmax_per_image(torch.full((1, 3, 3), 7.0)), torch.zeros(1, 3, 3))


def test_concentration_scores_on_known_maps():
    uniform = np.ones((20, 20))
    spike = np.zeros((20, 20))
    spike[4, 7] = 3.0
    two = np.zeros((20, 20))
    two[0, 0] = two[5, 5] = 1.0
    assert conc.top_share(uniform) == pytest.approx(20 / 400)  # top 5% of 400 pixels = 20
    assert conc.normalised_entropy(uniform) == pytest.approx(1.0)
    assert conc.top_share(spike) == pytest.approx(1.0) and conc.normalised_entropy(spike) == pytest.approx(0.0)
    assert conc.normalised_entropy(two) == pytest.approx(np.log(2) / np.log(400))
    stack = np.stack([uniform, spike])
    assert np.allclose(conc.top_share(stack), [0.05, 1.0])
    assert conc.region_share(spike, slice(0, 5), slice(5, 10)) == pytest.approx(1.0)
    assert conc.region_share(uniform, slice(0, 10), slice(0, 20)) == pytest.approx(0.5)
    assert np.isnan(conc.top_share(np.zeros((3, 3))))
    with pytest.raises(ValueError):
        conc.top_share(-uniform)


def test_pooling_rewards_a_compact_region_over_speckle():
    """Isolated bright pixels win at pixel level; summed over 2x2 cells a compact blob wins."""
    speckle = np.full((32, 32), 0.1)
    speckle[::4, ::4] = 1.0            # 64 isolated pixels, one per 4x4 cell
    blob = np.full((32, 32), 0.1)
    blob[12:20, 12:20] = 0.8           # one compact 8x8 region
    assert conc.top_share(speckle) > conc.top_share(blob)
    assert conc.top_share(conc.pool(speckle, 2)) < conc.top_share(conc.pool(blob, 2))
    assert conc.scores(blob, 2)["entropy"] < conc.scores(speckle, 2)["entropy"]
    assert conc.pool(np.arange(16.0).reshape(4, 4), 2).tolist() == [[10.0, 18.0], [42.0, 50.0]]
    assert conc.pool(blob, 1) is not None and conc.pool(np.ones((5, 5)), 2).shape == (2, 2)


def test_frozen_effnet_prepare_matches_the_feature_cache_and_passes_gradients():
    """The offline EffNet-L0 backbone: the differentiable path gives the cached features, and the
    gradient of a linear head reaches the 32x32 portrait through the frozen backbone."""
    from driftmatrix.features import encoders
    from driftmatrix.features.inputs import normalise

    enc = encoders.load("EffNet-L0", device="cpu")
    images = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3), dtype=np.uint8)
    pixels = normalise(torch.from_numpy(images).permute(0, 3, 1, 2))
    prepare = encoder_prepare(enc)
    with torch.no_grad():
        np.testing.assert_allclose(prepare(pixels)[0].numpy(), enc.encode(images), rtol=1e-3, atol=1e-3)
    torch.manual_seed(0)
    head = nn.Linear(enc.dim, 2)
    maps = saliency_maps(head, pixels, prepare)
    assert maps.shape == (2, 32, 32) and torch.isfinite(maps).all() and (maps.amax(dim=(1, 2)) == 1).all()
    assert all(p.grad is None for p in enc.model.parameters())
