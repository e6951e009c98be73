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
