import pytest
import torch

from driftmatrix.models.catalog import REGISTRY, family_of

# Authors' roster (protocol section 9), 2 outputs.
PUBLISHED = {"ViT-S": 75e3, "CNN-S": 94e3, "ResNet-S": 98e3, "MLP-S": 98e3, "ResNet-M": 400e3,
             "MLP-M": 410e3, "CNN-M": 542e3, "ViT-M": 545e3, "MLP-L": 2.1e6, "ResNet-L": 2.1e6,
             "CNN-L": 2.1e6, "ViT-L": 2.2e6}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_image_models_match_published_size_and_train(name):
    spec = REGISTRY[name]
    assert spec.family == name.split("-")[0] == family_of(name)
    model = spec.build(2, {})
    n = sum(p.numel() for p in model.parameters())
    assert abs(n - PUBLISHED[name]) / PUBLISHED[name] < 0.03, n
    x = torch.randn(3, 3, 32, 32, requires_grad=True)
    out = model(x)
    assert out.shape == (3, 2)
    out.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_unknown_model_names_the_known_ones():
    from driftmatrix.errors import ConfigError
    from driftmatrix.models.catalog import get

    with pytest.raises(ConfigError, match="CNN-S"):
        get("CNN-XL")


def test_cnn_pools_before_its_relu_with_the_same_outputs_and_gradients_bit_for_bit():
    """ReLU after max-pool (cheaper) must equal the textbook conv-BN-ReLU-pool block exactly."""
    from torch import nn

    torch.manual_seed(0)
    ours = REGISTRY["CNN-S"].build(2, {})
    layers = list(ours.features)
    assert isinstance(layers[2], nn.MaxPool2d) and isinstance(layers[3], nn.ReLU)
    textbook = REGISTRY["CNN-S"].build(2, {})
    textbook.load_state_dict(ours.state_dict())  # parameter names are those of the textbook order
    swapped = []
    for i in range(0, len(layers), 4):
        conv, bn, pool, relu = textbook.features[i:i + 4]
        swapped += [conv, bn, nn.ReLU(), pool]
    textbook.features = nn.Sequential(*swapped)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(16, 3, 32, 32, generator=gen)
    x[:, :, :4] = -1.0  # windows of only negative values and ties
    for model in (ours, textbook):
        model.train()
        model(x).square().sum().backward()
    assert torch.equal(ours(x), textbook(x))
    for (name, a), b in zip(ours.named_parameters(), textbook.parameters()):
        assert a.grad is not None and a.grad.abs().sum() > 0, name
        assert torch.equal(a.grad, b.grad), name


def test_vit_block_computes_what_torch_encoder_layer_computes():
    """Same arithmetic and initialisation as nn.TransformerEncoderLayer (pre-norm, gelu); only the
    dropout masks are drawn differently (tests/models/test_dropout.py)."""
    from driftmatrix.models.image import EncoderBlock

    torch.manual_seed(0)
    ours = EncoderBlock(64, 4, 128, 0.1).eval()
    ref = torch.nn.TransformerEncoderLayer(64, 4, 128, 0.1, activation="gelu", batch_first=True,
                                           norm_first=True).eval()
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(ours.qkv.weight)
        ref.self_attn.in_proj_bias.copy_(ours.qkv.bias)
        for a, b in ((ref.self_attn.out_proj, ours.proj), (ref.linear1, ours.fc1), (ref.linear2, ours.fc2),
                     (ref.norm1, ours.norm1), (ref.norm2, ours.norm2)):
            a.weight.copy_(b.weight)
            a.bias.copy_(b.bias)
    x = torch.randn(5, 65, 64)
    torch.testing.assert_close(ours(x), ref(x), rtol=1e-5, atol=1e-5)
    assert torch.count_nonzero(ours.qkv.bias) == torch.count_nonzero(ours.proj.bias) == 0
    assert ours.qkv.weight.abs().max() <= (6 / (64 + 192)) ** 0.5  # xavier-uniform bound, as torch's


def test_vit_starts_from_the_weights_torch_encoder_layers_would_have():
    """Same seed, same initial weights as the torch.nn.TransformerEncoder ViT this replaced
    (including its quirk: every layer starts as a copy of the first)."""
    from driftmatrix.models.image import ViT

    torch.manual_seed(3)
    patch = torch.nn.Conv2d(3, 64, 4, 4)
    cls, pos = torch.zeros(1, 1, 64), torch.zeros(1, 65, 64)
    torch.nn.init.trunc_normal_(pos, std=0.02)
    torch.nn.init.trunc_normal_(cls, std=0.02)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, 0.1, activation="gelu", batch_first=True, norm_first=True)
    ref = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    norm, head = torch.nn.LayerNorm(64), torch.nn.Linear(64, 2)
    torch.manual_seed(3)
    ours = ViT(64, 2, 4, 2.0, 2)
    assert torch.equal(ours.patch_embed.weight, patch.weight) and torch.equal(ours.pos_embed, pos)
    assert torch.equal(ours.cls_token, cls) and torch.equal(ours.head.weight, head.weight)
    for block, torch_layer in zip(ours.blocks, ref.layers):
        assert torch.equal(block.qkv.weight, torch_layer.self_attn.in_proj_weight)
        assert torch.equal(block.proj.weight, torch_layer.self_attn.out_proj.weight)
        assert torch.equal(block.fc1.weight, torch_layer.linear1.weight)
        assert torch.equal(block.fc2.bias, torch_layer.linear2.bias)
    assert torch.equal(ours.blocks[0].fc1.weight, ours.blocks[1].fc1.weight)


def test_an_uninitialised_linear_is_skip_inits_and_building_a_vit_imports_no_sympy():
    """The attention projection is left uninitialised as ``nn.utils.skip_init`` leaves it (no draw
    from the RNG, the same shapes, dtypes and trainable parameters), without its ``to_empty``,
    which imports sympy the first time a process builds a ViT."""
    import subprocess
    import sys

    from driftmatrix.models.image import uninitialised_linear

    torch.manual_seed(5)
    ref = torch.nn.utils.skip_init(torch.nn.Linear, 8, 24)
    ref_next = torch.rand(3)
    torch.manual_seed(5)
    ours = uninitialised_linear(8, 24)
    assert torch.equal(torch.rand(3), ref_next)
    for mine, theirs in zip(ours.parameters(), ref.parameters(), strict=True):
        assert (mine.shape, mine.dtype, mine.device, mine.requires_grad) == \
               (theirs.shape, theirs.dtype, theirs.device, theirs.requires_grad)
    assert ours(torch.zeros(2, 8)).shape == (2, 24)
    code = ("import sys; from driftmatrix.models.image import ViT; ViT(64, 2, 4, 2.0, 2); "
            "print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr


def test_a_model_revision_rekeys_only_that_models_units(monkeypatch):
    """ViT's MaskDropout blocks (revision 1) change its numbers, so its units are redone; a model
    at revision 0 keeps the key it always had (no "revision" in its identity)."""
    import dataclasses

    from driftmatrix.config import parse_params
    from driftmatrix.models import catalog as registry
    from driftmatrix.units.environment import Environment
    from driftmatrix.units.plan import model_plan

    env = Environment("fp32", "cpu", 1)
    params = parse_params({"dataset": {"name": "toy"}, "models": {"ViT-S": {}, "CNN-S": {}}})
    manifest = {"dataset": {"name": "toy", "task": "binary", "input_kind": "image", "class_names": ["F", "M"]},
                "slices": [{"index": 0, "label": "2000", "hash": "h0"}, {"index": 1, "label": "2001", "hash": "h1"}]}
    assert REGISTRY["ViT-S"].revision == 1 and REGISTRY["CNN-S"].revision == 0
    before = {m: [u.key for u in model_plan(params, m, manifest, env).units] for m in ("ViT-S", "CNN-S")}
    specs = dict(registry.REGISTRY)
    monkeypatch.setitem(registry.REGISTRY, "ViT-S", dataclasses.replace(specs["ViT-S"], revision=0))
    monkeypatch.setitem(registry.REGISTRY, "CNN-S", dataclasses.replace(specs["CNN-S"], revision=0))
    after = {m: [u.key for u in model_plan(params, m, manifest, env).units] for m in ("ViT-S", "CNN-S")}
    assert len(before["ViT-S"]) == 4 and not set(before["ViT-S"]) & set(after["ViT-S"])
    assert before["CNN-S"] == after["CNN-S"]
