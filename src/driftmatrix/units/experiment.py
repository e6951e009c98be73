"""One model's experiment: its plan, slices, targets and inputs (:class:`Experiment`), and what a
worker does with a unit: check its key, train it (:func:`train_task`) or score its cells
(:func:`score_task`), returning numbers and writing nothing. :class:`ExperimentRecipe` is the
small picklable description a worker builds it from."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from driftmatrix.config import ConfigError, Params, effective_config, evaluation_metric, model_options
from driftmatrix.learn.fit import fit, window_train_rows
from driftmatrix.learn.precision import resolve_device
from driftmatrix.learn.score import EvalBatches, eval_mask, score_cell
from driftmatrix.models.spec import TABULAR_FORMAT, TORCH_FORMAT
from driftmatrix.units.environment import Environment, hardware, library_versions, resolve_environment, where
from driftmatrix.units.plan import Cell, ModelPlan, Unit, model_plan
from driftmatrix.units.store import CheckpointStore


class ExperimentInfo:
    """A model's experiment as a stage knows it without torch; :class:`Experiment` adds inputs and device."""

    def __init__(self, params: Params, model: str, slices_dir: str | Path, env: Environment):
        from driftmatrix.data.table import DatasetMeta
        from driftmatrix.models.catalog import get
        from driftmatrix.data.slicing import load_slices
        from driftmatrix.learn.tasks import targets_array
        from driftmatrix.config import metric_for

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
    """:class:`ExperimentInfo` plus the targets and inputs on the device: what stages compute with."""

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
        return {"format": TABULAR_FORMAT if self.spec.inputs == "table" else TORCH_FORMAT, "model": self.spec.name,
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
    """Raise unless this process computes ``unit`` under the key it was handed (code, data, environment)."""
    import torch

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
    """Worker side of one unit: check its key, train, return weights, numbers and hardware (no writes)."""
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
    """The sidecar of a finished unit, what its MLflow run is later made from (``tags``: extra tags)."""
    params = {**asdict(exp.cfg), "model": unit.model, "family": unit.family, "inputs": exp.spec.inputs,
              "encoder": exp.spec.encoder or "", "task": exp.meta.task, "split_seed": exp.manifest["split_seed"],
              "test_fraction": exp.manifest["test_fraction"], "device": str(exp.device),
              "window": exp.plan.window.name}
    params.pop("seeds")
    return {"unit": asdict(unit), "window": exp.plan.window.name, "params": params, "data": dict(data),
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


def score_task(exp, item: tuple[Unit, list[Cell], str]) -> dict[str, dict[str, Any]]:
    """Worker side: check the cells' keys, load one checkpoint and score the cells on their own rows."""
    from driftmatrix.learn.fit import predict
    from driftmatrix.units.plan import slice_hashes

    unit, cells, checkpoints_dir = item
    ours = {c.key for c in exp.plan.cells(unit, slice_hashes(exp.manifest))}
    if any(c.key not in ours for c in cells):
        raise RuntimeError(f"{unit.model} seed {unit.seed} cutoff {unit.cutoff}: this worker's code, data or "
                           f"environment keys the cells of unit {unit.key} differently from the driver")
    model = exp.load_unit(CheckpointStore(checkpoints_dir, unit.model), unit.key)
    categories = tuple(c.removeprefix("label_") for c in exp.meta.label_columns)
    if exp.eval_batches is None:  # each executor's own context keeps its own
        exp.eval_batches = EvalBatches(exp.inputs, exp.cfg.eval_batch_size)
    out = {}
    for cell in cells:
        rows = np.flatnonzero(eval_mask(exp.slice_ids, exp.split, unit.cutoff_index, cell.j))
        outputs = predict(model, exp.inputs, precision=exp.cfg.precision,
                          batches=exp.eval_batches.get(cell.j, cell.evalset, rows))
        out[cell.key] = {"slice": cell.label, "j": cell.j, "evalset": cell.evalset,
                         **score_cell(outputs, exp.targets_np[rows], exp.meta.task, categories,
                                     per_row=cell.evalset == "test", metric=exp.metric.key)}
    return out
