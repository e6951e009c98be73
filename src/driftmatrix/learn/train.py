"""Train stage: a fresh model per unit (model, cutoff i, seed) on the train splits of its window.

The plan (``driftmatrix.units.plan``) names the units of the current configuration by what made
their numbers: data, settings, code and environment (``driftmatrix.units.provenance``); a unit whose
checkpoint folder is complete is done. The driver resolves the environment once and records it
beside the checkpoints; workers (this process, or Ray tasks through ``driftmatrix.runtime.executor``)
check that they compute the key they were handed, train and return weights; only this driver
writes checkpoints (``driftmatrix.units.store``), so a kill at any moment loses at most the
units in flight. MLflow is the evaluate stage's business: this module never imports it.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from driftmatrix.units.store import CheckpointStore
from driftmatrix.config import ConfigError, Params, TrainConfig, build, evaluation_metric
from driftmatrix.learn.precision import resolve_device
from driftmatrix.units.provenance import Environment
from driftmatrix.units.plan import ModelPlan, Unit, plan_model, slice_hashes

log = logging.getLogger(__name__)


def effective_config(params: Params, model: str) -> TrainConfig:
    """``train`` < the model spec's own defaults (e.g. lr 1e-4 for frozen heads) < ``models.<name>``.

    ``precision`` and ``device`` stay as asked (``auto`` included): the train stage resolves them
    once into the model's :class:`~driftmatrix.units.provenance.Environment`."""
    from driftmatrix.models.registry import get

    from driftmatrix.units.plan import parse_window

    from driftmatrix.models.custom import training_overrides

    spec = get(model)
    merged = {**asdict(params.train), **dict(spec.train_defaults), **training_overrides(params.models.get(model))}
    cfg = build(TrainConfig, merged, f"models.{model}")
    parse_window(cfg.window, f"models.{model}.window")  # a clear error before any work
    repeated = sorted({s for s in cfg.seeds if list(cfg.seeds).count(s) > 1})
    if repeated:
        raise ConfigError(f"params.yaml: models.{model}.seeds (or train.seeds): seed {repeated[0]} is listed "
                          f"twice; each seed is one run of every cutoff")
    return cfg


def model_options(params: Params, model: str) -> dict[str, Any]:
    """The estimator options of ``models.<model>`` (``models.custom.OPTIONS``: estimator, params,
    encoding, trusted); empty for the torch models."""
    from driftmatrix.models.custom import options_of

    return options_of(params.models.get(model))


def resolve_environment(params: Params, model: str) -> Environment:
    """This model's environment, resolved once by the driver of the train stage."""
    from driftmatrix.runtime.executor import runtime_config, unit_threads
    from driftmatrix.units.provenance import resolve_environment as resolve

    cfg, runtime = effective_config(params, model), runtime_config(params)
    res = runtime.resources_for(model)
    return resolve(cfg.precision, cfg.device, unit_threads(res),
                   remote_gpus=runtime.executor == "ray" and res.num_gpus > 0)


def recorded_environment(params: Params, model: str, checkpoints_dir: str | Path,
                         resolve_if_missing: bool = False) -> Environment:
    """The environment the train stage recorded for ``model``; before any training, this machine's
    (``resolve_if_missing``) or a one-line error."""
    from driftmatrix.data.table import DataError

    raw = CheckpointStore(checkpoints_dir, model).environment()
    if raw is not None:
        return Environment.from_dict(raw)
    if resolve_if_missing:
        return resolve_environment(params, model)
    raise DataError(f"{Path(checkpoints_dir) / model}: no recorded environment; run `driftmatrix train -m {model}` "
                    f"first")


def planned_unit(params: Params, model: str, cutoff: str, seed: int | None = None,
                 slices_dir: str | Path = "outputs/slices", checkpoints_dir: str | Path = "outputs/checkpoints") -> Unit:
    """The current plan's unit of ``model`` trained up to ``cutoff`` with ``seed`` (default: the
    lowest), keyed with the environment the train stage recorded: what ``tracking.load_registered``
    loads."""
    from driftmatrix.data.slicing import read_manifest

    plan = model_plan(params, model, read_manifest(slices_dir), recorded_environment(params, model, checkpoints_dir))
    seed = min(plan.seeds) if seed is None else seed
    if cutoff not in plan.labels or seed not in plan.seeds:
        raise ConfigError(f"{model}: no unit up to {cutoff!r} with seed {seed} (cutoffs {list(plan.labels)}, "
                          f"seeds {list(plan.seeds)})")
    return plan.unit(seed, plan.labels.index(cutoff))


def cutoff_train_rows(slice_ids: np.ndarray, split: np.ndarray, cutoff: int) -> np.ndarray:
    """Row indices of D_<=i (the cumulative window): the train splits of slices 0..cutoff."""
    return window_train_rows(slice_ids, split, range(cutoff + 1))


def window_train_rows(slice_ids: np.ndarray, split: np.ndarray, window: Sequence[int]) -> np.ndarray:
    """Row indices a unit trains on: the train splits of the slices in its window (cumulative:
    slices 0..i, the paper's D_<=i)."""
    return np.flatnonzero(np.isin(slice_ids, np.asarray(window)) & (split == "train"))


def fit(model, inputs, targets, train_idx: np.ndarray, cfg: TrainConfig,
        loss_fn: Callable, seed: int, device, on_epoch: Callable[[int, float], None] | None = None) -> list[float]:
    """Train ``model`` in place for ``cfg.epochs`` epochs; returns the mean loss of each epoch.

    Shuffling uses its own generator seeded by the model seed, so the same seed gives the same
    model on CPU. A trailing batch of one row is skipped (BatchNorm cannot train on it).
    """
    import torch

    if cfg.precision not in ("fp32", "bf16"):
        raise ValueError(f"params.yaml: train.precision must be fp32 or bf16, got {cfg.precision!r}")
    from driftmatrix.learn.optim import make_optimizer

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
            y = targets[idx.to(targets.device)]
            if cfg.precision == "bf16":
                with autocast(device, cfg.precision):
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
    """The model inputs of ``rows`` of ``inputs`` (default: every row), ``batch_size`` rows at a time.

    Batches never mix rows across calls, so a slice predicted alone gives the same outputs as
    the same slice predicted with others when the caller predicts slice by slice.
    """
    import torch

    rows = torch.arange(len(inputs)) if rows is None else torch.as_tensor(rows, dtype=torch.long)
    return (inputs.batch(rows[start:start + batch_size]) for start in range(0, len(rows), batch_size))


def predict(model, inputs, batch_size: int = 1024, precision: str = "fp32",
            rows: np.ndarray | None = None, batches=None) -> np.ndarray:
    """Outputs of ``model`` for ``rows`` of ``inputs`` in batches (:func:`input_batches`), or for
    ``batches`` already made by it."""
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



def model_plan(params: Params, model: str, manifest: Mapping[str, Any], env: Environment) -> ModelPlan:
    """Every unit of ``model`` under ``params``, the slices ``manifest`` and the environment ``env``
    (no data loaded): what the train, evaluate, status and matrices stages agree on; keyed by the
    code it runs as this checkout holds it (``provenance.unit_code``, ``provenance.SCORE_ROOTS``)."""
    from driftmatrix.data.table import DatasetMeta
    from driftmatrix.features.cache import encoder_identity
    from driftmatrix.models.registry import get
    from driftmatrix.units.provenance import SCORE_FORMAT, SCORE_ROOTS, code_key, unit_code
    from driftmatrix.learn.tasks import metric_for

    spec, meta = get(model), DatasetMeta.from_dict(manifest["dataset"])
    metric = metric_for(meta.task, evaluation_metric(params))
    scoring = {"metric": metric.key, "format": SCORE_FORMAT, "code": code_key(SCORE_ROOTS)}
    identity = {"model": spec.name, "family": spec.family, "inputs": spec.inputs, "encoder": spec.encoder or "",
                "description": spec.description, "task": meta.task, "outputs": meta.num_outputs,
                "features": encoder_identity(spec.inputs, spec.encoder, params.extra.get("embed"))}
    if spec.revision:
        identity["revision"] = spec.revision
    if spec.inputs == "table":  # its estimator's options and the libraries that compute it
        from driftmatrix.models.custom import library_versions

        options = model_options(params, model)
        identity["tabular"] = {"features": {"numeric": list(meta.numeric), "categorical": list(meta.categorical)},
                               "options": options, "libraries": library_versions(spec.build.cls, options)}
    slice_hashes(manifest)  # a clear error for slices written before content hashes existed
    return plan_model(params.dataset.name, model, spec.family, identity, effective_config(params, model),
                      manifest["slices"], code=unit_code(spec.build, model_options(params, model).get("estimator", "")),
                      env=env.keyed(), scoring=scoring)


class ExperimentInfo:
    """What a stage process knows of one model's experiment without torch: config, slices (rows,
    labels, targets), metric and plan. Enough to plan, record and track; :class:`Experiment` adds
    the inputs and the device for computing."""

    def __init__(self, params: Params, model: str, slices_dir: str | Path, env: Environment):
        from driftmatrix.data.table import DatasetMeta
        from driftmatrix.models.registry import get
        from driftmatrix.data.slicing import load_slices
        from driftmatrix.learn.tasks import metric_for, targets_array

        self.params, self.env = params, env
        self.spec = get(model)
        self.cfg = replace(effective_config(params, model), precision=env.precision)
        rows, self.manifest, _ = load_slices(slices_dir)
        self.meta = DatasetMeta.from_dict(self.manifest["dataset"])
        self.metric = metric_for(self.meta.task, evaluation_metric(params))
        self.slice_ids = rows["slice"].to_numpy()
        self.split = rows["split"].to_numpy()
        self.labels = [s["label"] for s in self.manifest["slices"]]
        self.targets_np = targets_array(rows, self.meta)
        self.dataset = params.dataset.name
        self.plan = self.make_plan()

    def make_plan(self) -> ModelPlan:
        return model_plan(self.params, self.spec.name, self.manifest, self.env)


class Experiment(ExperimentInfo):
    """Everything one model's stages compute with: :class:`ExperimentInfo` plus the targets and
    inputs on the device."""

    def __init__(self, params: Params, model: str, slices_dir: str | Path,
                 features_dir: str | Path = "outputs/features", env: Environment | None = None):
        """``env``: the environment the driver resolved (default: resolve it here)."""
        import torch

        from driftmatrix.features.inputs import load_inputs

        env = env if env is not None else resolve_environment(params, model)
        super().__init__(params, model, slices_dir, env)
        asked = effective_config(params, model).device
        self.device = resolve_device(asked if asked != "auto" else env.device)
        if self.device.type != env.device:
            raise ConfigError(f"models.{model}: units are keyed for {env.device} but this process computes on "
                              f"{self.device.type}")
        self.targets = torch.as_tensor(self.targets_np.copy()).to(self.device)
        self.inputs = load_inputs(self.spec.inputs, slices_dir, features_dir, self.spec.encoder,
                                  params.extra.get("embed")).to(self.device)
        if self.spec.inputs == "pixels":  # a flattening model gains nothing from channels-last batches
            self.inputs.channels_last = self.spec.family != "MLP"
        self.info = dict(getattr(self.inputs, "info", {}))
        if self.spec.inputs == "table":  # what a tabular model is built from (and rebuilt from model.json)
            self.info.update(kind=self.spec.build.cls, task=self.meta.task, options=model_options(params, model))
        self.eval_batches = None  # evaluation.EvalBatches, made by the first scored checkpoint

    def new_model(self, seed: int):
        import torch

        torch.manual_seed(seed)
        kwargs = {"dropout": self.cfg.dropout} if self.cfg.dropout is not None else {}
        model = self.spec.build(self.meta.num_outputs, self.info, **kwargs).to(self.device)
        if self.spec.inputs == "pixels" and getattr(self.inputs, "channels_last", True):  # as its batches
            model = model.to(memory_format=torch.channels_last)
        return model

    def description(self) -> dict[str, Any]:
        """How to rebuild this model's network (``model.json`` beside its weights)."""
        return {"format": "driftmatrix-tabular-1" if self.spec.inputs == "table" else "driftmatrix-safetensors-1", "model": self.spec.name,
                "num_outputs": self.meta.num_outputs, "info": self.info, "dropout": self.cfg.dropout,
                "inputs": self.spec.inputs, "task": self.meta.task}

    def load_unit(self, store: "CheckpointStore", key: str):
        model = self.new_model(0)
        model.load_state_dict(store.load_state(key, "cpu" if self.spec.inputs == "table" else self.device))
        return model

    def train_rows(self, unit: Unit) -> np.ndarray:
        return window_train_rows(self.slice_ids, self.split, unit.window)

    def train_unit(self, unit: Unit, on_epoch=None):
        """Fresh model of ``unit.seed`` trained on its window; returns (model, losses, rows)."""
        from driftmatrix.models.heads import init_output_bias
        from driftmatrix.learn.tasks import make_loss

        rows = self.train_rows(unit)
        if self.spec.inputs == "table":  # preprocessing and model fitted on the window's rows alone
            model = self.new_model(unit.seed)
            return model, model.fit(self.inputs, rows, self.targets_np, self.cfg, unit.seed, self.device,
                                    on_epoch, loop=fit), len(rows)
        loss_fn = make_loss(self.meta.task, self.targets_np[rows])
        model = self.new_model(unit.seed)
        init_output_bias(model, self.meta.task, self.targets_np[rows])  # start at the window's prior
        losses = fit(model, self.inputs, self.targets, rows, self.cfg, loss_fn, unit.seed, self.device, on_epoch)
        return model, losses, len(rows)


@dataclass(frozen=True)
class ExperimentRecipe:
    """A small, picklable description of an :class:`Experiment`: workers build it once each."""

    params_json: str
    model: str
    slices_dir: str
    features_dir: str
    env_json: str = ""  # the driver's resolved Environment ("": resolve in the worker, as tuning does)

    @classmethod
    def of(cls, params: Params, model: str, slices_dir, features_dir,
           env: Environment | None = None) -> "ExperimentRecipe":
        from driftmatrix.config import to_raw

        return cls(json.dumps(to_raw(params), sort_keys=True), model, str(Path(slices_dir).resolve()),
                   str(Path(features_dir).resolve()),
                   json.dumps(env.to_dict(), sort_keys=True) if env is not None else "")

    def build(self) -> Experiment:
        from driftmatrix.config import parse_params

        env = Environment.from_dict(json.loads(self.env_json)) if self.env_json else None
        return Experiment(parse_params(json.loads(self.params_json)), self.model, self.slices_dir,
                          self.features_dir, env)


def check_key(exp: Experiment, unit: Unit) -> None:
    """Raise unless this process computes ``unit`` under the key it was handed: the same code and
    data (its own plan gives the same key) and the same libraries, device and threads."""
    import torch

    from driftmatrix.units.provenance import library_versions

    here = Environment(exp.cfg.precision, exp.device.type,
                       torch.get_num_threads() if exp.device.type == "cpu" else None, library_versions())
    problems = exp.env.differences(here)
    ours = exp.plan.unit(unit.seed, unit.cutoff_index).key if unit.seed in exp.plan.seeds \
        and unit.cutoff_index < len(exp.plan.labels) else None
    if ours != unit.key:
        problems.append(f"its own plan (code, data, settings) keys this unit {ours}")
    if problems:
        raise RuntimeError(f"{unit.model} seed {unit.seed} cutoff {unit.cutoff}: this worker would not compute "
                           f"unit {unit.key} as keyed by the driver: " + "; ".join(problems))


def train_task(exp: Experiment, unit: Unit) -> dict[str, Any]:
    """Worker side of one unit: check its key, train it and return its weights and numbers (writes
    nothing), with the hardware that computed it and where (host, Ray node)."""
    from driftmatrix.runtime.executor import where
    from driftmatrix.units.provenance import hardware

    check_key(exp, unit)
    started = time.time()
    model, losses, n_rows = exp.train_unit(unit)
    ended = time.time()
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    fitted = getattr(model, "fit_summary", "") or (f"{len(losses)} epochs, loss {losses[-1]:.4f}" if losses else
                                                   "no training: the window's prior")
    return {"state": state, "losses": losses, "train_rows": n_rows, "started": started, "ended": ended,
            "seconds": round(ended - started, 3), "hardware": hardware(exp.device), "node": where(), "fit": fitted}


def unit_record(exp: Experiment, unit: Unit, result: Mapping[str, Any], data: Mapping[str, Any],
                tags: Mapping[str, str] = ()) -> dict:
    """The sidecar of a finished unit: what MLflow's run is later made from (``tags``: extra run
    tags known only at training time, e.g. the validation checks a user overrode)."""
    from dataclasses import asdict as as_dict

    params = {**as_dict(exp.cfg), "model": unit.model, "family": unit.family, "inputs": exp.spec.inputs,
              "encoder": exp.spec.encoder or "", "task": exp.meta.task, "split_seed": exp.manifest["split_seed"],
              "test_fraction": exp.manifest["test_fraction"], "device": str(exp.device),
              "window": exp.plan.window.name}
    params.pop("seeds")
    return {"unit": as_dict(unit), "window": exp.plan.window.name, "params": params, "data": dict(data),
            "losses": result["losses"], "train_rows": result["train_rows"], "started": result["started"],
            "ended": result["ended"], "seconds": result["seconds"], "node": dict(result.get("node") or {}),
            "tags": {**dict(tags), **node_tags(result.get("node"))},
            "environment": {**exp.env.to_dict(), "hardware": result.get("hardware", exp.env.hardware)},
            "code_digest": exp.plan.code}


def node_tags(node: Mapping[str, str] | None) -> dict[str, str]:
    """Run tags of where a unit was trained: ``host`` and, on Ray, ``ray_node`` (the node id)."""
    return {k: str(v) for k, v in (node or {}).items() if k in ("host", "ray_node") and v}


def training_data(exp: Experiment, unit: Unit) -> dict[str, Any]:
    """The MLflow dataset input of a unit: its window's slices, by content hash, and the data
    version of the slices manifest (a declared input of the stage, unlike data.dvc)."""
    from driftmatrix.config import fingerprint

    hashes = [exp.manifest["slices"][k]["hash"] for k in unit.window]
    return {"name": f"{exp.dataset}[{exp.labels[unit.window[0]]}..{exp.labels[unit.window[-1]]}]",
            "digest": fingerprint(*hashes), "source": {"path": exp.params.dataset.path,
                                                       "data_version": exp.manifest["data_version"],
                                                       "slices": [exp.labels[k] for k in unit.window]}}


def train_units(exp: Experiment, store: CheckpointStore, units: Sequence[Unit], executor=None,
                recipe: ExperimentRecipe | None = None, tags: Mapping[str, str] = ()) -> list[dict[str, Any]]:
    """Train ``units`` through the executor and write each checkpoint as it arrives."""
    from driftmatrix.runtime.executor import make_executor, runtime_config

    executor = executor or make_executor(runtime_config(exp.params))
    description, done = exp.description(), []
    for unit, result in executor.map(train_task, recipe, units, model=exp.spec.name, context=exp,
                                     label="train"):
        record = unit_record(exp, unit, result, training_data(exp, unit), tags)
        done.append(store.write(unit.key, result["state"], description, record))
        log.info("%s seed %d cutoff %s: %d rows, %s, %.1f s", unit.model, unit.seed, unit.cutoff,
                 result["train_rows"], result["fit"], result["seconds"])
    return done


def largest_first(units: Sequence[Unit], manifest: Mapping[str, Any]) -> list[Unit]:
    """``units`` by training rows, most first (ties in plan order): side by side in workers, the
    small units fill in at the end instead of one large unit finishing alone."""
    return sorted(units, key=lambda u: -sum(manifest["slices"][k]["n_train"] for k in u.window))


#: What an :class:`Experiment` and a unit import, preloaded by the local worker server.
WORKER_MODULES = ("driftmatrix.learn.train", "driftmatrix.data.slicing", "driftmatrix.features.inputs",
                  "driftmatrix.models.image", "driftmatrix.learn.tasks", "driftmatrix.learn.optim")


#: What a tabular model's units import besides (the worker server preloads them for table models).
TABULAR_MODULES = ("driftmatrix.models.tabular", "driftmatrix.features.table", "sklearn.compose", "sklearn.ensemble",
                   "sklearn.linear_model", "skops.io", "lightgbm", "threadpoolctl")


def start_workers(params: Params, model: str, preload: Sequence[str] = WORKER_MODULES) -> bool:
    """Start the local worker server before this stage's own imports (``executor.start_worker_server``)."""
    from driftmatrix.runtime.executor import runtime_config, start_worker_server
    from driftmatrix.models.registry import get

    if get(model).inputs == "table":  # scikit-learn and friends load once, in the server workers fork from
        preload = (*preload, *TABULAR_MODULES)
    return start_worker_server(runtime_config(params), model, preload)


def run(params: Params, model: str, slices_dir: str | Path, out_dir: str | Path,
        validation_dir: str | Path = "outputs/validation",
        features_dir: str | Path = "outputs/features") -> list[dict[str, Any]]:
    """Train every unit of ``model``'s plan that is not done, in the environment resolved here
    (recorded beside the checkpoints for the later stages).

    No MLflow here: the evaluate stage makes each unit's run from its checkpoint record together
    with its drift-matrix row, so this process never imports MLflow or opens its store.
    """
    from driftmatrix.audit.gate import overridden_checks
    from driftmatrix.units.provenance import undeclared

    missing = undeclared(model_options(params, model).get("estimator", ""))
    if missing:
        raise ConfigError(f"params.yaml: models.{model}.estimator: its code in {missing[0]} is no dependency of "
                          f"dvc.yaml's train stage, so `dvc repro` would not retrain {model} when it changes: "
                          "move the module to src/custom_models/ or add its path to the stage's deps")
    start_workers(params, model)  # before torch is imported here; unused if the units run on a GPU
    env = resolve_environment(params, model)
    exp = Experiment(params, model, slices_dir, features_dir, env)
    store = CheckpointStore(out_dir, model)
    store.write_environment(env.to_dict())
    if exp.spec.inputs == "table":
        from driftmatrix.models.tabular import capped_features

        cat = exp.inputs.cat.numpy()
        for line in capped_features(exp.spec.build.cls, exp.info["options"], exp.meta.categorical, cat):
            log.warning("%s: %s", model, line)
    todo = largest_first([u for u in exp.plan.units if not store.done(u.key)], exp.manifest)
    log.info("%s: %d units in the plan (%s window), %d done, %d to train", model, len(exp.plan.units),
             exp.plan.window.name, len(exp.plan.units) - len(todo), len(todo))
    overrides = overridden_checks(validation_dir)
    tags = {"validation_override": "; ".join(overrides)} if overrides else {}
    done = train_units(exp, store, todo, recipe=ExperimentRecipe.of(params, model, slices_dir, features_dir, env),
                       tags=tags)
    return done
