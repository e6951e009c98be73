"""What a model kind is: its spec, the formats a trained unit is stored in, and the estimator
options of a model ``params.yaml`` names by import path. Torch-free and importing nothing of the
package, so ``config`` can check params against it."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

INPUTS = ("pixels", "token_states", "pooled", "table", "none")
BASELINE_FAMILY = "Baseline"  # reference models (Prior): no learning; keep them out of cohort means
CUSTOM_FAMILY = "Custom"  # estimators named by import path in params.yaml
#: ``model.json`` formats of a stored unit: a torch network's, a tabular model's.
TORCH_FORMAT = "driftmatrix-safetensors-1"
TABULAR_FORMAT = "driftmatrix-tabular-1"
#: The files of a stored unit (checkpoint folder, registry artifact): weights, ``model.json``, record.
WEIGHTS, DESCRIPTION, RECORD = "model.safetensors", "model.json", "unit.json"
#: A unit's MLflow model folder (``tracking.pyfunc``), the ``model_logged`` tag of a run holding it;
#: runs holding another are logged again. 2: raw feature rows of any dtype, Prior on tables.
PYFUNC_FORMAT = "driftmatrix-pyfunc-2"


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


@dataclass(frozen=True)
class Builder:
    """``build(num_outputs, info, dropout)`` -> ``<module>.build(...)``, imported on first call
    (picklable)."""

    module: str
    cls: str = ""
    shape: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, num_outputs: int, info: Mapping[str, Any] | None = None, dropout: float | None = None):
        return importlib.import_module(self.module).build(self.cls, self.shape, num_outputs, info or {}, dropout)


# --- models named by their estimator's import path --------------------------------------------
OPTIONS = ("estimator", "params", "encoding", "trusted")
ENCODINGS = ("onehot", "native")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")

#: model name -> its entry's estimator options (set by ``config.parse_params``)
ESTIMATORS: dict[str, dict[str, Any]] = {}


def options_of(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    """The estimator options of a ``models.<name>`` entry (the rest are training overrides)."""
    return {k: v for k, v in dict(entry or {}).items() if k in OPTIONS}


def training_overrides(entry: Mapping[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in dict(entry or {}).items() if k not in OPTIONS}


def check(name: str, options: Mapping[str, Any], where: str) -> str | None:
    """The problem with a model's estimator options, or None."""
    est = options.get("estimator")
    if est is not None and not (isinstance(est, str) and _PATH.match(est)):
        return f"{where}.estimator: expected an import path like sklearn.ensemble.GradientBoostingClassifier, got {est!r}"
    if "params" in options and not isinstance(options["params"], Mapping):
        return f"{where}.params: expected a mapping of estimator arguments, got {options['params']!r}"
    if "encoding" in options and options["encoding"] not in ENCODINGS:
        return f"{where}.encoding: expected onehot or native, got {options['encoding']!r}"
    trusted = options.get("trusted", [])
    if not isinstance(trusted, (list, tuple)) or not all(isinstance(t, str) and _PATH.match(t) for t in trusted):
        return f"{where}.trusted: expected a list of type paths like sklearn.tree._tree.Tree, got {trusted!r}"
    return None


def remember(models: Mapping[str, Mapping[str, Any]]) -> None:
    """Record the models of a parsed ``params.yaml`` that name an estimator."""
    for name, entry in models.items():
        opts = options_of(entry)
        if opts.get("estimator"):
            ESTIMATORS[name] = opts
