"""driftmatrix.learn.optim must move weights exactly as torch.optim does (bit for bit, on CPU)."""

import pytest

torch = pytest.importorskip("torch")

from driftmatrix.learn.optim import make_optimizer  # noqa: E402


def _net(seed: int):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(12, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


@pytest.mark.parametrize("name,weight_decay", [("adam", 0.0), ("adam", 0.05), ("adamw", 0.01)])
def test_steps_equal_torch_optim(name, weight_decay):
    ours, ref = _net(0), _net(0)
    cls = torch.optim.AdamW if name == "adamw" else torch.optim.Adam
    opt_ref = cls(ref.parameters(), lr=3e-3, weight_decay=weight_decay)
    opt = make_optimizer(name, list(ours.parameters()), 3e-3, weight_decay)
    gen = torch.Generator().manual_seed(1)
    for _ in range(25):
        x, y = torch.randn(16, 12, generator=gen), torch.randint(0, 3, (16,), generator=gen)
        for net, o in ((ours, opt), (ref, opt_ref)):
            o.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            torch.nn.utils.clip_grad_norm_(list(net.parameters()), 0.5)
            o.step()
    start = _net(0)
    for a, b, s in zip(ours.parameters(), ref.parameters(), start.parameters()):
        assert not torch.equal(a, s)  # the weights moved
        assert torch.equal(a, b)


def test_frozen_parameters_are_left_alone():
    net = _net(0)
    net[0].weight.requires_grad_(False)
    before = net[0].weight.clone()
    opt = make_optimizer("adam", list(net.parameters()), 1e-2, 0.0)
    net(torch.randn(4, 12)).sum().backward()
    opt.step()
    assert torch.equal(net[0].weight, before)
    assert not torch.equal(net[2].weight, _net(0)[2].weight)


def test_unknown_optimizer_is_a_clear_error():
    with pytest.raises(ValueError, match="train.optimizer"):
        make_optimizer("sgd", list(_net(0).parameters()), 1e-3, 0.0)
