"""MLflow at the edge: store setup, one run per (model, cutoff, seed), registry with cutoff aliases.

The default store is a sqlite file plus ``mlruns/`` for artifacts in the repository (both
git-ignored); ``MLFLOW_TRACKING_URI`` points it anywhere else. Runs are found again by their
tags, so a re-run skips finished work and replaces a run that was killed half-way.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from driftmatrix.config import TrackingConfig

log = logging.getLogger(__name__)

#: Requirements written with every logged model (avoids MLflow's slow inference, 5-12 s a call).
MODEL_REQUIREMENTS = ["torch==2.14.1", "numpy"]


def tracking_uri(cfg: TrackingConfig) -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or cfg.uri


def configure(cfg: TrackingConfig) -> str:
    """Point MLflow at the configured store and experiment; returns the experiment id."""
    import mlflow

    uri = tracking_uri(cfg)
    mlflow.set_tracking_uri(uri)
    exp = mlflow.get_experiment_by_name(cfg.experiment)
    if exp is None:
        location = None
        if uri.startswith("sqlite:") and not os.environ.get("MLFLOW_TRACKING_URI"):
            location = Path(cfg.artifact_root).resolve().as_uri()
        elif uri.startswith("sqlite:///"):  # a temporary store: artifacts beside its database
            location = (Path(uri.removeprefix("sqlite:///")).resolve().parent / "mlruns").as_uri()
        exp_id = mlflow.create_experiment(cfg.experiment, artifact_location=location)
    else:
        exp_id = exp.experiment_id
    mlflow.set_experiment(experiment_id=exp_id)
    return exp_id


def run_name(model: str, cutoff: str, seed: int) -> str:
    return f"{model} · cutoff {cutoff} · seed {seed}"


def registered_name(dataset: str, model: str) -> str:
    return f"{dataset}.{model}"


def alias_for(cutoff: str, seed: int | None = None) -> str:
    """Registry alias of a cutoff (``cutoff-1950``), optionally per seed (``cutoff-1950-seed-1``)."""
    base = "cutoff-" + re.sub(r"[^0-9A-Za-z_-]+", "_", cutoff)
    return base if seed is None else f"{base}-seed-{seed}"


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@dataclass(frozen=True)
class UnitKey:
    """Identity of one unit of work, as MLflow tags."""

    dataset: str
    model: str
    family: str
    cutoff: str
    cutoff_index: int
    seed: int
    config_key: str

    def tags(self) -> dict[str, str]:
        return {"kind": "cutoff", "dataset": self.dataset, "model": self.model, "family": self.family,
                "cutoff": self.cutoff, "cutoff_index": str(self.cutoff_index), "seed": str(self.seed),
                "config_key": self.config_key}

    def filter(self) -> str:
        t = self.tags()
        return " and ".join(f"tags.{k} = '{t[k]}'" for k in ("kind", "dataset", "model", "cutoff_index",
                                                            "seed", "config_key"))


def finished_run(exp_id: str, key: UnitKey) -> str | None:
    """Id of the FINISHED run of this unit; deletes RUNNING/FAILED leftovers of killed runs."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    runs = client.search_runs([exp_id], filter_string=key.filter())
    keep = next((r for r in runs if r.info.status == "FINISHED"), None)
    for r in runs:
        if r is not keep:
            log.info("removing unfinished or duplicate run %s (%s)", r.info.run_id, r.info.status)
            client.delete_run(r.info.run_id)
    return keep.info.run_id if keep else None


def delete_unit_runs(exp_id: str, key: UnitKey) -> int:
    """Delete every run of this unit (its checkpoint is gone or stale); returns how many."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    runs = client.search_runs([exp_id], filter_string=key.filter())
    for r in runs:
        client.delete_run(r.info.run_id)
    return len(runs)


def start_unit_run(exp_id: str, key: UnitKey, params: Mapping[str, Any], extra_tags: Mapping[str, str] = ()):
    """Start the MLflow run of one unit with its name, tags and params (a context manager)."""
    import mlflow

    tags = {**key.tags(), "git_commit": git_commit(), **dict(extra_tags)}
    run = mlflow.start_run(experiment_id=exp_id, run_name=run_name(key.model, key.cutoff, key.seed), tags=tags)
    mlflow.log_params({k: (str(v) if isinstance(v, (list, tuple, dict)) else v) for k, v in params.items()})
    return run


def log_row(run_id: str, metrics: Mapping[str, float], files: Iterable[Path]) -> None:
    """Attach a scored drift-matrix row to its finished run (no run re-opening: one batch call)."""
    import time

    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    client = MlflowClient()
    now = int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()])
    for f in files:
        client.log_artifact(run_id, str(f), artifact_path="drift_row")


def log_epoch_losses(losses: Iterable[float]) -> None:
    import mlflow

    for epoch, loss in enumerate(losses):
        mlflow.log_metric("train_loss", float(loss), step=epoch)


@contextlib.contextmanager
def quiet_mlflow():
    """Silence MLflow's per-call notices (pickle-format warning, "Created version ..." lines)."""
    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logger.setLevel(level)


def log_and_register_model(model: Any, key: UnitKey, register: bool) -> str | None:
    """Log the torch model in the active run; register it as a version tagged with cutoff and seed.

    Aliases: ``cutoff-<label>-seed-<s>`` for every seed and ``cutoff-<label>`` for the lowest seed
    logged so far, so "the CNN-S trained through 1950" loads by name.
    """
    import mlflow
    from mlflow.tracking import MlflowClient

    name = registered_name(key.dataset, key.model) if register else None
    with quiet_mlflow():  # one line per unit is ours; MLflow's per-call chatter is not
        info = mlflow.pytorch.log_model(model, name="model", pip_requirements=MODEL_REQUIREMENTS,
                                        serialization_format="pickle", registered_model_name=name)
    if not register:
        return None
    client = MlflowClient()
    run_id = mlflow.active_run().info.run_id
    versions = client.search_model_versions(f"name = '{name}' and run_id = '{run_id}'")
    version = str(versions[0].version) if versions else str(info.registered_model_version)
    for k, v in {"cutoff": key.cutoff, "cutoff_index": str(key.cutoff_index), "seed": str(key.seed),
                 "config_key": key.config_key}.items():
        client.set_model_version_tag(name, version, k, v)
    client.set_registered_model_alias(name, alias_for(key.cutoff, key.seed), version)
    try:
        current = client.get_model_version_by_alias(name, alias_for(key.cutoff))
        current_seed = int(current.tags.get("seed", 10**9))
    except Exception:  # alias not set yet
        current_seed = 10**9
    if key.seed <= current_seed:
        client.set_registered_model_alias(name, alias_for(key.cutoff), version)
    return version


def load_registered(dataset: str, model: str, cutoff: str, seed: int | None = None) -> Any:
    """Load a registered model by its cutoff alias (``models:/<dataset>.<model>@cutoff-<label>``)."""
    import mlflow

    return mlflow.pytorch.load_model(f"models:/{registered_name(dataset, model)}@{alias_for(cutoff, seed)}")
