"""Train stage: a fresh model per unit (model, cutoff i, seed) on the train splits of its window.

Workers check that they compute the key they were handed, train and return weights; only this driver
writes checkpoints, so a kill at any moment loses at most the units in flight."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

from driftmatrix.config import ConfigError, Params, model_options
from driftmatrix.units.environment import environment_probe, probed_environment, resolve_environment
from driftmatrix.data.table import read_manifest
from driftmatrix.units.experiment import Experiment, ExperimentRecipe, train_task, training_data, unit_record
from driftmatrix.units.plan import Unit, model_plan
from driftmatrix.units.store import CheckpointStore, refuse_replaced_weights

log = logging.getLogger(__name__)


def train_units(exp: Experiment, store: CheckpointStore, units: Sequence[Unit], executor=None,
                recipe: ExperimentRecipe | None = None, tags: Mapping[str, str] = ()) -> list[dict[str, Any]]:
    """Train ``units`` through the executor and write each checkpoint as it arrives."""
    from driftmatrix.config import runtime_config
    from driftmatrix.models.tabular import UntrustedModel
    from driftmatrix.runtime.executor import make_executor

    executor = executor or make_executor(runtime_config(exp.params))
    description, done = exp.description(), []
    try:
        for unit, result in executor.map(train_task, recipe, units, model=exp.spec.name, context=exp,
                                         label="train"):
            record = unit_record(exp, unit, result, training_data(exp, unit), tags)
            done.append(store.write(unit.key, result["state"], description, record))
            log.info("%s seed %d cutoff %s: %d rows, %s, %.1f s", unit.model, unit.seed, unit.cutoff,
                     result["train_rows"], result["fit"], result["seconds"])
    except UntrustedModel as exc:  # a setting, found when the first unit is fitted (in a worker, too)
        raise ConfigError(f"params.yaml: models.{exp.spec.name}: {exc}") from None
    return done


def largest_first(units: Sequence[Unit], manifest: Mapping[str, Any]) -> list[Unit]:
    """``units`` by training rows, most first (ties in plan order): side by side in workers, the
    small units fill in at the end instead of one large unit finishing alone."""
    return sorted(units, key=lambda u: -sum(manifest["slices"][k]["n_train"] for k in u.window))


#: What an :class:`Experiment` and a unit import, preloaded by the local worker server.
WORKER_MODULES = ("driftmatrix.stages.train", "driftmatrix.data.slicing", "driftmatrix.features.inputs",
                  "driftmatrix.models.image", "driftmatrix.learn.tasks", "driftmatrix.learn.optim")


#: What a tabular model's units import besides (the worker server preloads them for table models).
TABULAR_MODULES = ("driftmatrix.models.tabular", "driftmatrix.features.table", "sklearn.compose", "sklearn.ensemble",
                   "sklearn.linear_model", "skops.io", "lightgbm", "threadpoolctl")


def start_workers(params: Params, model: str, preload: Sequence[str] = WORKER_MODULES) -> bool:
    """Start the local worker server before this stage's own imports (``executor.start_worker_server``)."""
    from driftmatrix.runtime.executor import start_worker_server
    from driftmatrix.config import runtime_config
    from driftmatrix.models.catalog import get

    if get(model).inputs == "table":  # scikit-learn and friends load once, in the server workers fork from
        preload = (*preload, *TABULAR_MODULES)
    return start_worker_server(runtime_config(params), model, preload)


def run(params: Params, model: str, slices_dir: str | Path, out_dir: str | Path,
        validation_dir: str | Path = "outputs/validation",
        features_dir: str | Path = "outputs/features") -> list[dict[str, Any]]:
    """Train every unit of ``model``'s plan not done yet (no MLflow: the evaluate stage makes the runs)."""
    from driftmatrix.units.code import undeclared

    missing = undeclared(model_options(params, model).get("estimator", ""))
    if missing:
        raise ConfigError(f"params.yaml: models.{model}.estimator: its code in {missing[0]} is no dependency of "
                          f"dvc.yaml's train stage, so `dvc repro` would not retrain {model} when it changes: "
                          "move the module to src/custom_models/ or add its path to the stage's deps")
    store = CheckpointStore(out_dir, model)
    probe = environment_probe(params, model)
    env = probed_environment(store.environment(), probe)
    if env is None:  # torch resolves it: the worker server's own imports start first, alongside
        start_workers(params, model)
        env = resolve_environment(params, model)
    manifest = read_manifest(slices_dir)  # the plan needs no rows (nor pandas) yet
    plan = model_plan(params, model, manifest, env)
    store.write_environment({**env.to_dict(), "probe": probe or ""})
    todo = largest_first([u for u in plan.units if not store.done(u.key)], manifest)
    waiting = {u.key for u in todo}
    refuse_replaced_weights(store, [u for u in plan.units if u.key not in waiting])  # before DVC saves them
    log.info("%s: %d units in the plan (%s window), %d done, %d to train", model, len(plan.units),
             plan.window.name, len(plan.units) - len(todo), len(todo))
    if not todo:  # nothing to train: no inputs, no executor, no workers (and no torch, see probe_digest)
        return []
    start_workers(params, model)  # once per process (a second call finds it running); unused on a GPU
    exp = Experiment(params, model, slices_dir, features_dir, env)
    if exp.spec.inputs == "table":
        from driftmatrix.models.tabular import capped_features

        cat = exp.inputs.cat.numpy()
        for line in capped_features(exp.spec.build.cls, exp.info["options"], exp.meta.categorical, cat):
            log.warning("%s: %s", model, line)
    from driftmatrix.audit.gate import overridden_checks

    overrides = overridden_checks(validation_dir)
    tags = {"validation_override": "; ".join(overrides)} if overrides else {}
    return train_units(exp, store, todo, recipe=ExperimentRecipe.of(params, model, slices_dir, features_dir, env),
                       tags=tags)
