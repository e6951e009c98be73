import pytest
import torch

from driftmatrix.models.dropout import MaskDropout, keep_mask


def test_keep_mask_drops_p_of_the_elements_independently():
    torch.manual_seed(0)
    mask = keep_mask(torch.Size([2_000, 1_001]), 0.1)  # an odd size: the last word is cut
    assert mask.dtype == torch.bool and mask.shape == (2_000, 1_001)
    dropped = 1 - mask.float().mean().item()
    assert abs(dropped - 6554 / 65536) < 0.0012  # 5 binomial standard deviations
    # neighbours within one 64-bit word are independent: P(both dropped) = p^2
    both = (~mask[:, 0:1000:2] & ~mask[:, 1:1001:2]).float().mean().item()
    assert abs(both - 0.01) < 0.001


def test_mask_dropout_scales_kept_elements_and_is_the_identity_in_eval():
    layer = MaskDropout(0.25)
    x = torch.full((400, 500), 2.0, requires_grad=True)
    torch.manual_seed(1)
    y = layer(x)
    kept = y != 0
    assert torch.all(y[kept] == 2.0 / 0.75)
    assert abs(kept.float().mean().item() - 0.75) < 0.005
    y.sum().backward()
    assert torch.equal(x.grad, kept.float() / 0.75)
    torch.manual_seed(1)
    assert torch.equal(layer(x), y)  # the default generator's seed fixes the mask
    layer.eval()
    assert layer(x) is x
    assert MaskDropout(0.0)(x) is x
    with pytest.raises(ValueError, match="dropout probability"):
        MaskDropout(1.0)


def test_mask_dropout_equals_selecting_the_scaled_input_forward_and_backward():
    """The multiplied-in float mask gives what selecting x / (1 - p) where kept, else 0, gives:
    the same values (a dropped negative element is -0.0, equal to 0.0) and the same gradients."""
    x = torch.randn(64, 65, 64, requires_grad=True)
    g = torch.randn(64, 65, 64)
    torch.manual_seed(3)
    y = MaskDropout(0.1)(x)
    y.backward(g)
    torch.manual_seed(3)
    keep = keep_mask(x.shape, 0.1)
    ref = torch.where(keep, x.detach() * (1.0 / 0.9), 0.0)
    assert torch.equal(y, ref)
    assert torch.equal(x.grad, torch.where(keep, g * (1.0 / 0.9), 0.0))
