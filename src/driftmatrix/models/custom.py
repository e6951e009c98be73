"""Models named in ``params.yaml`` rather than in the catalog: any scikit-learn-compatible estimator
by import path. ``config.parse_params`` records them here, the registry builds their specs.

    models:
      MyGBT: {estimator: sklearn.ensemble.GradientBoostingClassifier, params: {max_depth: 3}}

Keys of a model entry that configure its estimator (:data:`OPTIONS`) rather than its training
loop: ``estimator`` (import path, ``package.module.Class``), ``params`` (constructor arguments;
the unit's seed goes to ``random_state`` when the estimator has one), ``encoding`` (``onehot``:
imputed, scaled numbers and one-hot categories, the default for named estimators; ``native``:
raw numbers with NaN and category codes, for estimators that handle both) and ``trusted`` (types
beyond the estimator's own class that loading its skops file may build, e.g. a tree class; see
``models.tabular``). Imports nothing: configuration and registry both read it.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

OPTIONS = ("estimator", "params", "encoding", "trusted")
ENCODINGS = ("onehot", "native")
_PATH = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")

#: Tabular kinds whose estimator is scikit-learn's, which computes with scipy.
SCIPY_KINDS = ("LogReg", "HistGBT", "Custom")
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


def library_versions(kind: str, options: Mapping[str, Any]) -> dict[str, str]:
    """Versions of the libraries that compute a tabular model's numbers (keyed with its units):
    scikit-learn (preprocessing), skops (storage), scipy for the scikit-learn estimators (LogReg's
    solver, the losses), LightGBM for ``LightGBM``, and for a named estimator the distributions of
    its top-level package. Read from package metadata (no import)."""
    from importlib import metadata

    from driftmatrix.units.provenance import package_version as version

    out = {"scikit-learn": version("scikit-learn"), "skops": version("skops")}
    if kind in SCIPY_KINDS:
        out["scipy"] = version("scipy")
    if kind == "LightGBM":
        out["lightgbm"] = version("lightgbm")
    if options.get("estimator"):
        top = str(options["estimator"]).split(".")[0]
        for dist in metadata.packages_distributions().get(top, [top]):
            out[dist] = version(dist)
    return dict(sorted(out.items()))
