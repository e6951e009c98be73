"""One registry of named model variants (the paper's names), each with its family and inputs.

A spec says how to build the network (``build(num_outputs, info)``), which inputs it reads
(raw ``pixels``, cached ``token_states``, cached ``pooled`` encoder features, the features of a
``table`` (``models.tabular``), or ``none``: only
the batch size, for the ``Prior`` baseline of ``models.heads``) and any
optimiser defaults that differ from ``params.yaml: train`` (e.g. frozen-encoder heads use lr 1e-4
on images). ``models.catalog`` registers every variant without importing torch; :func:`get` imports
it lazily.
"""

from __future__ import annotations

import collections.abc
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from driftmatrix.models import custom

INPUTS = ("pixels", "token_states", "pooled", "table", "none")
# The module that registers every model when imported (torch-free: networks load when built).
MODEL_MODULES = ["driftmatrix.models.catalog"]
BASELINE_FAMILY = "Baseline"  # reference models (Prior): no learning; keep them out of cohort means


@dataclass(frozen=True)
class ModelSpec:
    name: str
    family: str
    modality: str  # image | text | any
    inputs: str  # one of INPUTS
    build: Callable[..., Any]  # build(num_outputs: int, info: Mapping) -> torch.nn.Module
    encoder: str | None = None  # for token_states / pooled: the feature-cache encoder key
    train_defaults: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"lr": 1e-4}
    description: str = ""
    # Bump when this model's code changes its numbers for the same settings: only its units
    # are redone (units.UNIT_FORMAT redoes every model's). 0 adds nothing to the unit key.
    revision: int = 0


class _Registry(collections.abc.Mapping):
    """Read-only mapping name -> ModelSpec that imports the model modules on first access."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._loaded = False

    def _all(self) -> dict[str, ModelSpec]:
        if not self._loaded:
            self._loaded = True
            for module in MODEL_MODULES:
                importlib.import_module(module)
        return self._specs

    def __getitem__(self, key: str) -> ModelSpec:
        specs = self._all()
        if key not in specs and key in custom.ESTIMATORS:  # named in params.yaml by import path
            return custom_spec(key)
        if key not in specs:
            raise KeyError(f"unknown model {key!r}; known: {', '.join(sorted(specs))}")
        return specs[key]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


REGISTRY = _Registry()
CUSTOM_FAMILY = "Custom"  # estimators named by import path in params.yaml (models.custom)


def custom_spec(name: str) -> ModelSpec:
    """The spec of a model that ``params.yaml`` names by its estimator's import path (made by the
    catalog, which imports this module: loaded by name, as the catalog itself is)."""
    return importlib.import_module("driftmatrix.models.catalog").custom_spec(name, CUSTOM_FAMILY)


def register(spec: ModelSpec) -> ModelSpec:
    if spec.inputs not in INPUTS:
        raise ValueError(f"model {spec.name}: inputs {spec.inputs!r} not in {INPUTS}")
    REGISTRY._specs[spec.name] = spec
    return spec


def get(name: str) -> ModelSpec:
    """The spec of a registered model; for any other name a ConfigError that lists the known ones."""
    from driftmatrix.config import ConfigError

    try:
        return REGISTRY[name]
    except KeyError as exc:
        raise ConfigError(exc.args[0]) from None


def family_of(name: str) -> str | None:
    """Family of a registered model, or None for names the registry does not know."""
    return REGISTRY[name].family if name in REGISTRY else None


def is_baseline(name: str) -> bool:
    """True for reference models such as ``Prior`` (shown beside the others, not averaged in)."""
    return family_of(name) == BASELINE_FAMILY
