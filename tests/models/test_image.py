import pytest
import torch

from driftmatrix.models.registry import REGISTRY, family_of

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
    with pytest.raises(KeyError, match="CNN-S"):
        REGISTRY["CNN-XL"]


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
