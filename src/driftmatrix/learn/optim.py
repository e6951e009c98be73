"""Adam and AdamW steps, numerically identical to ``torch.optim.Adam`` / ``AdamW`` (default
settings, CPU single-tensor path), without ``torch.optim``: its first use imports
``torch._dynamo`` (about 1.6 s a process) and its per-step machinery costs more than a small
model's update (tests/learn/test_optim.py checks the weights bit for bit)."""

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
        """One update of every parameter with a gradient, as ``_foreach`` ops (seven dispatches a
        step); each runs torch.optim's single-tensor kernel, so the weights are the same bit for
        bit."""
        import torch

        self.steps += 1
        lr, wd, beta1, beta2 = self.lr, self.weight_decay, self.beta1, self.beta2
        step_size = lr / (1 - beta1 ** self.steps)
        bias_correction2_sqrt = (1 - beta2 ** self.steps) ** 0.5
        live = [k for k, p in enumerate(self.params) if p.grad is not None]
        if not live:
            return
        params = [self.params[k] for k in live]
        grads = [p.grad for p in params]
        m, v = [self.exp_avg[k] for k in live], [self.exp_avg_sq[k] for k in live]
        with torch.no_grad():
            if wd != 0:
                if self.decoupled:
                    torch._foreach_mul_(params, 1 - lr * wd)
                else:
                    grads = torch._foreach_add(grads, params, alpha=wd)
            torch._foreach_lerp_(m, grads, 1 - beta1)
            torch._foreach_mul_(v, beta2)
            torch._foreach_addcmul_(v, grads, grads, value=1 - beta2)
            denom = torch._foreach_sqrt(v)
            torch._foreach_div_(denom, bias_correction2_sqrt)
            torch._foreach_add_(denom, self.eps)
            torch._foreach_addcdiv_(params, m, denom, value=-step_size)


def make_optimizer(name: str, params: Sequence, lr: float, weight_decay: float) -> Adam:
    """``adam`` or ``adamw`` (params.yaml ``train.optimizer``)."""
    if name not in ("adam", "adamw"):
        raise ValueError(f"params.yaml: train.optimizer must be adam or adamw, got {name!r}")
    return Adam(params, lr=lr, weight_decay=weight_decay, decoupled=name == "adamw")
