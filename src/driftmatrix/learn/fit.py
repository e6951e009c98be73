"""The training loop and the forward pass: a unit's rows, its epochs, its outputs in batches."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from driftmatrix.config import TrainConfig



def cutoff_train_rows(slice_ids: np.ndarray, split: np.ndarray, cutoff: int) -> np.ndarray:
    """Row indices of D_<=i (the cumulative window): the train splits of slices 0..cutoff."""
    return window_train_rows(slice_ids, split, range(cutoff + 1))


def window_train_rows(slice_ids: np.ndarray, split: np.ndarray, window: Sequence[int]) -> np.ndarray:
    """Row indices a unit trains on: the train splits of its window's slices (the paper's D_<=i)."""
    return np.flatnonzero(np.isin(slice_ids, np.asarray(window)) & (split == "train"))


def fit(model, inputs, targets, train_idx: np.ndarray, cfg: TrainConfig,
        loss_fn: Callable, seed: int, device, on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """Train ``model`` in place for ``cfg.epochs`` epochs; returns each epoch's mean loss. Shuffling
    uses its own generator seeded by the model seed; a trailing batch of one row is skipped
    (BatchNorm)."""
    import torch

    from driftmatrix.learn.optim import make_optimizer
    from driftmatrix.learn.precision import resolve_precision

    precision = resolve_precision(cfg.precision, device)

    gen = torch.Generator().manual_seed(seed)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = make_optimizer(cfg.optimizer, trainable, cfg.lr, cfg.weight_decay)
    idx_all = torch.as_tensor(train_idx, dtype=torch.long)
    losses = []
    model.train()
    for epoch in range(cfg.epochs):
        order = idx_all[torch.randperm(len(idx_all), generator=gen)]
        total, count = torch.zeros((), device=device), 0
        for start in range(0, len(order), cfg.batch_size):
            idx = order[start:start + cfg.batch_size]
            if len(idx) < 2 and len(order) > 1:
                continue
            batch = inputs.batch(idx)
            y = torch.index_select(targets, 0, idx.to(targets.device))
            if precision == "bf16":
                with autocast(device, precision):
                    out = model(*batch).float()
            else:
                out = model(*batch)
            loss = loss_fn(out, y)
            optimizer.zero_grad()
            loss.backward()
            if cfg.grad_clip:
                torch.nn.utils.clip_grad_norm_(trainable, cfg.grad_clip)
            optimizer.step()
            total += loss.detach() * len(idx)
            count += len(idx)
        losses.append(float(total) / max(count, 1))
        if on_epoch:
            on_epoch(epoch, losses[-1])
    return losses


def autocast(device, precision: str):
    """bf16 mixed precision when asked for (weights and losses stay fp32), else a no-op."""
    import torch

    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16, enabled=precision == "bf16")


def input_batches(inputs, batch_size: int, rows: np.ndarray | None = None):
    """The model inputs of ``rows`` of ``inputs``, ``batch_size`` rows at a time; batches never mix
    rows across calls, so a slice predicted alone gives the same outputs as with others."""
    import torch

    rows = torch.arange(len(inputs)) if rows is None else torch.as_tensor(rows, dtype=torch.long)
    return (inputs.batch(rows[start:start + batch_size]) for start in range(0, len(rows), batch_size))


def predict(model, inputs, batch_size: int = 1024, precision: str = "fp32",
            rows: np.ndarray | None = None, batches=None) -> np.ndarray:
    """Outputs of ``model`` for ``rows`` of ``inputs`` in batches, or for ``batches`` already made."""
    import torch

    model.eval()
    if not isinstance(model, torch.nn.Module):  # a tabular model (models.tabular): computes on the CPU
        outs = [model(*batch) for batch in (input_batches(inputs, batch_size, rows) if batches is None else batches)]
        return torch.cat(outs).numpy() if outs else np.zeros((0, 0), dtype=np.float32)
    device = next(model.parameters()).device
    outs = []
    with torch.inference_mode(), autocast(device, precision):
        for batch in input_batches(inputs, batch_size, rows) if batches is None else batches:
            outs.append(model(*batch).float().cpu())
    if not outs:
        return np.zeros((0, 0), dtype=np.float32)
    return torch.cat(outs).numpy()
