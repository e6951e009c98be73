"""Adam and AdamW steps, numerically identical to ``torch.optim.Adam`` / ``AdamW`` (default
settings, CPU single-tensor path), without ``torch.optim``.

Why not ``torch.optim``: its first use imports ``torch._dynamo`` (about 1.6 s a process here),
and its per-step machinery (hooks, profiler ranges, dynamo guards) costs more than the update of
a small model. A drift-matrix study trains thousands of small units, mostly in short processes;
``tests/test_optim.py`` checks the weights against ``torch.optim`` bit for bit.
"""

from __future__ import annotations

from typing import Sequence


class Adam:
    """``torch.optim.Adam(params, lr, betas, eps, weight_decay)``; ``decoupled=True`` is AdamW."""

    def __init__(self, params: Sequence, lr: float, weight_decay: float = 0.0, betas=(0.9, 0.999),
                 eps: float = 1e-8, decoupled: bool = False):
        import torch

        self.params = [p for p in params if p.requires_grad]
        self.lr, self.weight_decay, self.eps, self.decoupled = float(lr), float(weight_decay), float(eps), decoupled
        self.beta1, self.beta2 = (float(b) for b in betas)
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        import torch

        self.steps += 1
        lr, wd, beta1, beta2 = self.lr, self.weight_decay, self.beta1, self.beta2
        step_size = lr / (1 - beta1 ** self.steps)
        bias_correction2_sqrt = (1 - beta2 ** self.steps) ** 0.5
        with torch.no_grad():
            for p, m, v in zip(self.params, self.exp_avg, self.exp_avg_sq):
                grad = p.grad
                if grad is None:
                    continue
                if wd != 0:
                    if self.decoupled:
                        p.mul_(1 - lr * wd)
                    else:
                        grad = grad.add(p, alpha=wd)
                m.lerp_(grad, 1 - beta1)
                v.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
                denom = (v.sqrt() / bias_correction2_sqrt).add_(self.eps)
                p.addcdiv_(m, denom, value=-step_size)


def make_optimizer(name: str, params: Sequence, lr: float, weight_decay: float) -> Adam:
    """``adam`` or ``adamw`` (params.yaml ``train.optimizer``)."""
    if name not in ("adam", "adamw"):
        raise ValueError(f"params.yaml: train.optimizer must be adam or adamw, got {name!r}")
    return Adam(params, lr=lr, weight_decay=weight_decay, decoupled=name == "adamw")
