"""Train stage: a fresh model per (cutoff i, seed) on the train splits of slices 1..i.

Work is resumable: each finished unit leaves a checkpoint plus a JSON sidecar holding the key of
its configuration; a re-run skips units whose sidecar matches, and redoes (without duplicating
its MLflow run) a unit that was killed half-way.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable

import numpy as np

from driftmatrix.config import Params, TrainConfig, build, fingerprint

log = logging.getLogger(__name__)


def resolve_device(name: str = "auto"):
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def effective_config(params: Params, model: str) -> TrainConfig:
    """``train`` < the model spec's own defaults (e.g. lr 1e-4 for frozen heads) < ``models.<name>``."""
    from driftmatrix.models.registry import get

    spec = get(model)
    merged = {**asdict(params.train), **dict(spec.train_defaults), **dict(params.models.get(model) or {})}
    return build(TrainConfig, merged, f"models.{model}")


def cutoff_train_rows(slice_ids: np.ndarray, split: np.ndarray, cutoff: int) -> np.ndarray:
    """Row indices of D_<=i: the train splits of slices 0..cutoff."""
    return np.flatnonzero((slice_ids <= cutoff) & (split == "train"))


def unit_paths(out_dir: str | Path, model: str, seed: int, cutoff: int) -> tuple[Path, Path]:
    base = Path(out_dir) / model / f"seed{seed}" / f"cutoff{cutoff:03d}"
    return base.with_suffix(".pt"), base.with_suffix(".json")


def fit(model, inputs, targets, train_idx: np.ndarray, cfg: TrainConfig,
        loss_fn: Callable, seed: int, device, on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """Train ``model`` in place for ``cfg.epochs`` epochs; returns the mean loss of each epoch.

    Shuffling uses its own generator seeded by the model seed, so the same seed gives the same
    model on CPU. A trailing batch of one row is skipped (BatchNorm cannot train on it).
    """
    import torch

    if cfg.precision not in ("fp32", "bf16"):
        raise ValueError(f"params.yaml: train.precision must be fp32 or bf16, got {cfg.precision!r}")
    gen = torch.Generator().manual_seed(seed)
    opt_cls = torch.optim.AdamW if cfg.optimizer == "adamw" else torch.optim.Adam
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = opt_cls(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay)
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
            y = targets[idx.to(targets.device)]
            with autocast(device, cfg.precision):
                out = model(*batch)
            loss = loss_fn(out.float(), y)
            optimizer.zero_grad(set_to_none=True)
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


def predict(model, inputs, batch_size: int = 1024, precision: str = "fp32") -> np.ndarray:
    """Outputs of ``model`` for every row of ``inputs``: one pass, scored by every cell later."""
    import torch

    model.eval()
    device = next(model.parameters()).device
    outs = []
    with torch.inference_mode(), autocast(device, precision):
        for start in range(0, len(inputs), batch_size):
            idx = torch.arange(start, min(start + batch_size, len(inputs)))
            outs.append(model(*inputs.batch(idx)).float().cpu())
    return torch.cat(outs).numpy()


class Experiment:
    """Everything one (model) stage needs: slices, inputs on device, targets, config, tracking."""

    def __init__(self, params: Params, model: str, slices_dir: str | Path,
                 features_dir: str | Path = "outputs/features"):
        import torch

        from driftmatrix.data.table import DatasetMeta
        from driftmatrix.features.inputs import load_inputs
        from driftmatrix.models.registry import get
        from driftmatrix.slicing import load_slices
        from driftmatrix.tasks import metric_for, targets_array

        self.params = params
        self.spec = get(model)
        self.cfg = effective_config(params, model)
        self.device = resolve_device(self.cfg.device)
        rows, self.manifest, _ = load_slices(slices_dir)
        self.meta = DatasetMeta.from_dict(self.manifest["dataset"])
        self.metric = metric_for(self.meta.task)
        self.slice_ids = rows["slice"].to_numpy()
        self.split = rows["split"].to_numpy()
        self.labels = [s["label"] for s in self.manifest["slices"]]
        self.targets_np = targets_array(rows, self.meta)
        self.targets = torch.as_tensor(self.targets_np.copy()).to(self.device)
        self.inputs = load_inputs(self.spec.inputs, slices_dir, features_dir, self.spec.encoder,
                                  params.extra.get("embed")).to(self.device)
        self.info = dict(getattr(self.inputs, "info", {}))
        self.dataset = params.dataset.name

    def config_key(self, seed: int, cutoff: int) -> str:
        features = (self.info["cache"],) if "cache" in self.info else ()  # cached encoder features
        return fingerprint(self.spec.name, self.spec.description, self.cfg, self.manifest["data_version"],
                           seed, cutoff, self.labels[cutoff], *features)

    def unit_key(self, seed: int, cutoff: int):
        from driftmatrix.tracking import UnitKey

        return UnitKey(self.dataset, self.spec.name, self.spec.family, self.labels[cutoff], cutoff, seed,
                       self.config_key(seed, cutoff))

    def new_model(self, seed: int):
        import torch

        torch.manual_seed(seed)
        kwargs = {"dropout": self.cfg.dropout} if self.cfg.dropout is not None else {}
        model = self.spec.build(self.meta.num_outputs, self.info, **kwargs).to(self.device)
        if self.spec.inputs == "pixels":  # matches PixelInputs batches; faster convolutions on CPU
            model = model.to(memory_format=torch.channels_last)
        return model

    def load_model(self, ckpt: Path):
        import torch

        model = self.new_model(0)
        model.load_state_dict(torch.load(ckpt, map_location=self.device, weights_only=True))
        return model

    def train_unit(self, seed: int, cutoff: int, on_epoch=None):
        from driftmatrix.tasks import make_loss

        rows = cutoff_train_rows(self.slice_ids, self.split, cutoff)
        loss_fn = make_loss(self.meta.task, self.targets_np[rows])
        model = self.new_model(seed)
        losses = fit(model, self.inputs, self.targets, rows, self.cfg, loss_fn, seed, self.device, on_epoch)
        return model, losses, len(rows)


def run(params: Params, model: str, slices_dir: str | Path, out_dir: str | Path,
        validation_dir: str | Path = "outputs/validation",
        features_dir: str | Path = "outputs/features") -> list[dict[str, Any]]:
    """Train every (seed, cutoff) unit of ``model`` not yet done; log each as one MLflow run."""
    import mlflow
    import torch

    from driftmatrix import tracking
    from driftmatrix.audit.gate import overridden_checks

    exp = Experiment(params, model, slices_dir, features_dir)
    exp_id = tracking.configure(params.tracking)
    overrides = overridden_checks(validation_dir)
    K, seeds = len(exp.labels), exp.cfg.seeds
    done: list[dict[str, Any]] = []
    total, step = K * len(seeds), 0
    for seed in seeds:
        for i in range(K):
            step += 1
            ckpt, sidecar = unit_paths(out_dir, model, seed, i)
            key = exp.unit_key(seed, i)
            prefix = f"[{step}/{total}] {model} seed {seed} cutoff {exp.labels[i]}"
            finished = tracking.finished_run(exp_id, key)  # also clears half-finished leftovers
            if finished and ckpt.exists() and sidecar.exists() \
                    and json.loads(sidecar.read_text()).get("run_id") == finished:
                log.info("%s: done already, skipped", prefix)
                continue
            if finished:  # its checkpoint is missing or stale: redo the unit under a new run
                tracking.delete_unit_runs(exp_id, key)
            started = time.perf_counter()
            train_params = {**asdict(exp.cfg), "model": model, "family": exp.spec.family,
                            "inputs": exp.spec.inputs, "encoder": exp.spec.encoder or "",
                            "task": exp.meta.task, "split_seed": exp.manifest["split_seed"],
                            "test_fraction": exp.manifest["test_fraction"], "device": str(exp.device)}
            train_params.pop("seeds")
            extra = {"data_version": exp.manifest["data_version"]}
            if overrides:
                extra["validation_override"] = "; ".join(overrides)
            with tracking.start_unit_run(exp_id, key, train_params, extra):
                model_obj, losses, n_rows = exp.train_unit(seed, i)
                tracking.log_epoch_losses(losses)
                mlflow.log_metrics({"train_rows": n_rows, "train_seconds": time.perf_counter() - started})
                ckpt.parent.mkdir(parents=True, exist_ok=True)
                torch.save(model_obj.state_dict(), ckpt)
                if params.tracking.log_models:
                    tracking.log_and_register_model(model_obj.cpu(), key, params.tracking.register)
                run_id = mlflow.active_run().info.run_id
            record = {"config_key": key.config_key, "run_id": run_id, "model": model, "seed": seed,
                      "cutoff_index": i, "cutoff": exp.labels[i], "train_rows": n_rows, "losses": losses,
                      "seconds": round(time.perf_counter() - started, 3)}
            sidecar.write_text(json.dumps(record, indent=2))
            done.append(record)
            log.info("%s: %d rows, %d epochs, loss %.4f, %.1f s", prefix, n_rows, exp.cfg.epochs,
                     losses[-1] if losses else float("nan"), record["seconds"])
    return done
