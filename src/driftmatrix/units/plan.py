"""Units of work and drift-matrix cells, keyed by exactly what they read (pure; no I/O).

A **unit** is one (dataset, model, cutoff, seed) training job; its key hashes the model's identity,
the settings that change its numbers (:data:`UNIT_SETTINGS`), its seed, the content hashes of its
window's slices, its code digest and environment. So appending a slice changes no earlier unit,
adding a seed adds only its units, and late rows in slice j change exactly the units whose window
holds j. A **cell** M[i, j] adds slice j's hash, its evaluation set and its scoring. The **plan** of
a model, every unit and cell of the current configuration, is what the train, evaluate, status and
matrices stages agree on; whatever else is on disk is stale."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from driftmatrix.config import (ConfigError, Params, TrainConfig, Window, effective_config, evaluation_metric,
                                fingerprint, metric_for, model_options, parse_window)
from driftmatrix.units.environment import Environment, model_libraries, recorded_environment

#: TrainConfig fields that change a trained model's numbers (and so its key). Precision and device
#: enter resolved, through the environment; the window through the slices it spans.
UNIT_SETTINGS = ("epochs", "batch_size", "lr", "weight_decay", "grad_clip", "optimizer", "dropout")
#: Bump when the key's own recipe changes (code changes are keyed by digest). 4: the code digest
#: covers the definitions a unit reaches (provenance.reach), no longer whole modules.
UNIT_FORMAT = 4


def unit_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The part of a model's training config that its key depends on."""
    return {name: getattr(cfg, name) for name in UNIT_SETTINGS}


@dataclass(frozen=True)
class Unit:
    dataset: str
    model: str
    family: str
    seed: int
    cutoff_index: int
    cutoff: str
    window: tuple[int, ...]  # slice indices it trains on
    key: str

    @property
    def slot(self) -> tuple[str, str, int]:
        """What a redone unit replaces: the same model, cutoff label and seed."""
        return self.model, self.cutoff, self.seed

    def tags(self) -> dict[str, str]:
        return {"kind": "cutoff", "dataset": self.dataset, "model": self.model, "family": self.family,
                "cutoff": self.cutoff, "cutoff_index": str(self.cutoff_index), "seed": str(self.seed),
                "unit_key": self.key}


@dataclass(frozen=True)
class Cell:
    unit_key: str
    j: int
    label: str
    evalset: str  # "test" (j <= cutoff) or "all" (j > cutoff)
    key: str


def evalset(cutoff: int, j: int) -> str:
    return "test" if j <= cutoff else "all"


def cell_key(unit_key: str, slice_hash: str, which: str, scoring: Mapping[str, Any] | None = None) -> str:
    return fingerprint("cell", unit_key, slice_hash, which, dict(scoring or {}))


@dataclass(frozen=True)
class ModelPlan:
    """Every unit and cell of one model under the current configuration."""

    model: str
    seeds: tuple[int, ...]
    labels: tuple[str, ...]
    window: Window
    units: tuple[Unit, ...]  # seed-major, then cutoff
    code: str = ""  # digest of the training path's code
    env: Mapping[str, Any] | None = None  # the keyed environment (provenance.Environment.keyed)
    scoring: Mapping[str, Any] | None = None  # metric, score format and scoring code of every cell

    def unit(self, seed: int, cutoff: int) -> Unit:
        return self.units[self.seeds.index(seed) * len(self.labels) + cutoff]

    def cells(self, unit: Unit, slice_hashes: Sequence[str]) -> list[Cell]:
        return [Cell(unit.key, j, self.labels[j], evalset(unit.cutoff_index, j),
                     cell_key(unit.key, h, evalset(unit.cutoff_index, j), self.scoring))
                for j, h in enumerate(slice_hashes)]


def plan_model(dataset: str, model: str, family: str, identity: Mapping[str, Any], cfg: TrainConfig,
               slices: Sequence[Mapping[str, Any]], *, code: str = "", env: Mapping[str, Any] | None = None,
               scoring: Mapping[str, Any] | None = None) -> ModelPlan:
    """Units of ``model`` for every seed of ``cfg`` and every cutoff of the ``slices`` records;
    ``identity`` describes the model itself; ``code``, ``env``, ``scoring``: see
    :class:`ModelPlan`."""
    window = parse_window(cfg.window)
    hashes = [s["hash"] for s in slices]
    labels = tuple(str(s["label"]) for s in slices)
    settings = unit_settings(cfg)
    units = []
    for seed in cfg.seeds:
        for i in range(len(slices)):
            span = tuple(window.slices(i))
            key = fingerprint("unit", UNIT_FORMAT, dict(identity), settings, int(seed),
                              [hashes[k] for k in span], code, dict(env or {}))
            units.append(Unit(dataset, model, family, int(seed), i, labels[i], span, key))
    return ModelPlan(model, tuple(int(s) for s in cfg.seeds), labels, window, tuple(units), code,
                     dict(env or {}), dict(scoring or {}))


def slice_hashes(manifest: Mapping[str, Any], where: str = "outputs/slices/manifest.json") -> list[str]:
    missing = [s["label"] for s in manifest["slices"] if not s.get("hash")]
    if missing:
        raise ConfigError(f"{where}: slices {missing[:3]} have no content hash (re-run `driftmatrix slice`)")
    return [s["hash"] for s in manifest["slices"]]


def planned_unit(params: Params, model: str, cutoff: str, seed: int | None = None,
                 slices_dir: str | Path = "outputs/slices", checkpoints_dir: str | Path = "outputs/checkpoints") -> Unit:
    """The current plan's unit of ``model`` up to ``cutoff`` with ``seed`` (default: the lowest)."""
    from driftmatrix.data.table import read_manifest

    plan = model_plan(params, model, read_manifest(slices_dir), recorded_environment(params, model, checkpoints_dir))
    seed = min(plan.seeds) if seed is None else seed
    if cutoff not in plan.labels or seed not in plan.seeds:
        raise ConfigError(f"{model}: no unit up to {cutoff!r} with seed {seed} (cutoffs {list(plan.labels)}, "
                          f"seeds {list(plan.seeds)})")
    return plan.unit(seed, plan.labels.index(cutoff))


def model_plan(params: Params, model: str, manifest: Mapping[str, Any], env: Environment) -> ModelPlan:
    """Every unit of ``model`` under ``params``, ``manifest`` and ``env``, keyed by this checkout's code."""
    from driftmatrix.data.table import DatasetMeta
    from driftmatrix.features.cache import encoder_identity
    from driftmatrix.models.catalog import get
    from driftmatrix.units.code import SCORE_ROOTS, code_key, unit_code

    spec, meta = get(model), DatasetMeta.from_dict(manifest["dataset"])
    metric = metric_for(meta.task, evaluation_metric(params))
    scoring = {"metric": metric.key, "format": SCORE_FORMAT, "code": code_key(SCORE_ROOTS)}
    identity = {"model": spec.name, "family": spec.family, "inputs": spec.inputs, "encoder": spec.encoder or "",
                "description": spec.description, "task": meta.task, "outputs": meta.num_outputs,
                "features": encoder_identity(spec.inputs, spec.encoder, params.extra.get("embed"))}
    if spec.revision:
        identity["revision"] = spec.revision
    if spec.inputs == "table":  # its estimator's options and the libraries that compute it
        options = model_options(params, model)
        identity["tabular"] = {"features": {"numeric": list(meta.numeric), "categorical": list(meta.categorical)},
                               "options": options, "libraries": model_libraries(spec.build.cls, options)}
    slice_hashes(manifest)  # a clear error for slices written before content hashes existed
    return plan_model(params.dataset.name, model, spec.family, identity, effective_config(params, model),
                      manifest["slices"], code=unit_code(spec.build, model_options(params, model).get("estimator", "")),
                      env=env.keyed(), scoring=scoring)


#: Bump when a stored cell's format or meaning changes.
#: 2: cells carry forward-pass statistics (evaluation.forward_stats); 3: held-out cells (j <= i)
#: also carry each row's correctness (evaluation.row_correctness), for input-space IW.
SCORE_FORMAT = 3
