"""One model's unit runs and registry versions as a ``sqlite:///`` MLflow store holds them, read
with the standard library: an evaluate stage with nothing to score checks that MLflow already
agrees with its units (``runs.store_agrees``) without importing MLflow and SQLAlchemy, about 2.5 s
a process. Read-only, one snapshot; any doubt (no such file, another schema, a name found twice)
gives None, and the stage syncs through MLflow as before."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

DELETED_VERSION = "Deleted_Internal"  # MLflow's ``current_stage`` of a deleted model version


@dataclass(frozen=True)
class StoreView:
    """Runs and versions shaped as MLflow's entities are where ``plan_runs`` and ``registry_plan`` read them."""

    runs: list[Any]  # .info.run_id, .status, .lifecycle_stage, .start_time; .data.tags
    versions: list[Any]  # .name, .version, .run_id, .tags
    registered: frozenset[str]  # registered model names
    aliases: dict[str, dict[str, str]]  # registered model name -> alias -> version


def read(path: Path, experiment: str, model: str) -> StoreView | None:
    """Every unit run of ``model`` in ``experiment`` (deleted ones too) and every version of the
    registered models named ``<dataset>.<model>``, as the database file ``path`` holds them now;
    None when unsure."""
    if not path.is_file():
        return None
    try:
        con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
    except sqlite3.Error:
        return None
    try:
        con.execute("BEGIN")  # one snapshot for every query below
        return _read(con, experiment, model)
    except sqlite3.Error:
        return None
    finally:
        con.close()


def _read(con: sqlite3.Connection, experiment: str, model: str) -> StoreView | None:
    found = con.execute("SELECT experiment_id, lifecycle_stage FROM experiments WHERE name = ?", (experiment,)).fetchall()
    if len(found) != 1 or found[0][1] != "active":
        return None
    units = ("SELECT r.run_uuid FROM runs r JOIN tags k ON k.run_uuid = r.run_uuid AND k.key = 'kind' "
             "AND k.value = 'cutoff' JOIN tags m ON m.run_uuid = r.run_uuid AND m.key = 'model' AND m.value = ? "
             "WHERE r.experiment_id = ?")
    tags: dict[str, dict[str, str]] = {}
    for run_id, key, value in con.execute(f"SELECT run_uuid, key, value FROM tags WHERE run_uuid IN ({units})",
                                          (model, found[0][0])):
        tags.setdefault(run_id, {})[key] = value
    runs = [SimpleNamespace(info=SimpleNamespace(run_id=run_id, status=status, lifecycle_stage=stage,
                                                 start_time=start), data=SimpleNamespace(tags=tags.get(run_id, {})))
            for run_id, status, stage, start in con.execute(
                f"SELECT run_uuid, status, lifecycle_stage, start_time FROM runs WHERE run_uuid IN ({units})",
                (model, found[0][0]))]
    like = "%." + model  # as ``runs.sync_registry`` searches them
    version_tags: dict[tuple[str, str], dict[str, str]] = {}
    for name, version, key, value in con.execute(
            "SELECT name, version, key, value FROM model_version_tags WHERE name LIKE ?", (like,)):
        version_tags.setdefault((name, str(version)), {})[key] = value
    versions = [SimpleNamespace(name=name, version=str(version), run_id=run_id,
                                tags=version_tags.get((name, str(version)), {}))
                for name, version, run_id in con.execute(
                    "SELECT name, version, run_id FROM model_versions WHERE name LIKE ? AND current_stage != ?",
                    (like, DELETED_VERSION))]
    registered = frozenset(n for (n,) in con.execute("SELECT name FROM registered_models WHERE name LIKE ?", (like,)))
    aliases: dict[str, dict[str, str]] = {}
    for name, alias, version in con.execute(
            "SELECT name, alias, version FROM registered_model_aliases WHERE name LIKE ?", (like,)):
        aliases.setdefault(name, {})[alias] = str(version)
    return StoreView(runs, versions, registered, aliases)
