"""Params for tiny synthetic runs: importable by name from any test (``from tinyparams import
make_tiny_params``), unlike conftest modules, which share one module name across folders."""

from __future__ import annotations

from pathlib import Path

from driftmatrix.config import parse_params


#: the models of the session's shared ``tiny_run`` (tests/conftest.py)
TINY_RUN_MODELS = {"MLP-S": {}, "CNN-S": {"epochs": 2}, "Prior": {}}


def make_tiny_params(tmp_path: Path, **overrides) -> "object":
    """Params for a tiny synthetic run whose files all live under ``tmp_path``."""
    raw = {
        "dataset": {"name": "tiny", "source": "yearbook", "path": str(tmp_path / "raw"), "task": "binary"},
        "synthetic": {"scenario": "fading-cue", "seed": 0, "first_year": 1950, "years": 4, "per_year": 40},
        "slicing": {"min_samples": 10},
        "train": {"seeds": [0, 1], "epochs": 1, "batch_size": 32},
        "models": {"MLP-S": {}},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "tiny",
                     "artifact_root": str(tmp_path / "mlruns"), "log_models": False},
    }
    for section, values in overrides.items():
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) and section != "models" else values
    return parse_params(raw)
