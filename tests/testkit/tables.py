"""Params of tiny feature tables (the built-in generator, ``source: table``) under a test's folder:
importable by name from any test folder (a folder's ``conftest`` is not: every one is ``conftest``)."""

from __future__ import annotations

from pathlib import Path

from driftmatrix.config import parse_params

TABULAR = ("LogReg", "HistGBT", "LightGBM", "MLP-Tab")


def make_table_params(tmp_path: Path, models=None, **overrides):
    raw = {
        "dataset": {"name": "tinytab", "source": "table", "path": str(tmp_path / "raw"), "task": "binary",
                    "options": {"timestamp": "year", "label": "churn", "id": "id", "features": "auto"}},
        "synthetic": {"seed": 0, "first_year": 2000, "years": 5, "per_year": 200, "span": 6},
        "slicing": {"min_samples": 10},
        "train": {"seeds": [0], "epochs": 2, "batch_size": 64},
        "models": models or {m: {} for m in TABULAR},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "tinytab",
                     "artifact_root": str(tmp_path / "mlruns"), "log_models": False},
        "runtime": {"workers": 1},
    }
    for section, values in overrides.items():
        raw[section] = {**raw.get(section, {}), **values} if isinstance(values, dict) else values
    return parse_params(raw)
