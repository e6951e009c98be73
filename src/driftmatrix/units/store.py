"""Trained units on disk: ``<root>/<model>/<unit key>/`` with weights, description and record.

The one place that knows this format, so training computes, tracking writes MLflow, and neither
imports the other. Nothing is unpickled: weights are safetensors, everything else JSON."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Mapping

from driftmatrix.models.spec import DESCRIPTION, RECORD, WEIGHTS

#: Recorded beside a model's unit folders by the train stage: the environment its keys were made for.
ENVIRONMENT = "environment.json"


class CheckpointStore:
    """``<root>/<model>/<unit key>/``: ``model.safetensors``, ``model.json`` and ``unit.json``, the
    record written last, fsynced and renamed into place: one that parses means the unit is done."""

    WEIGHTS, DESCRIPTION, RECORD = WEIGHTS, DESCRIPTION, RECORD

    def __init__(self, root: str | Path, model: str):
        self.dir = Path(root) / model

    def folder(self, key: str) -> Path:
        return self.dir / key

    def done(self, key: str) -> bool:
        return (self.folder(key) / WEIGHTS).exists() and self.read_record(key) is not None

    def read_record(self, key: str) -> dict[str, Any] | None:
        """The unit's record, or None when it is absent or not a whole JSON object."""
        try:
            record = json.loads((self.folder(key) / RECORD).read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and "unit" in record else None

    def record(self, key: str) -> dict[str, Any]:
        record = self.read_record(key)
        if record is None:
            raise FileNotFoundError(f"{self.folder(key) / RECORD}: missing or cut short")
        return record

    def keys(self) -> list[str]:
        return sorted(p.parent.name for p in self.dir.glob(f"*/{RECORD}")) if self.dir.exists() else []

    def write(self, key: str, state: Mapping[str, Any], description: Mapping[str, Any],
              record: Mapping[str, Any]) -> dict[str, Any]:
        """Weights, description, then the record (with the weights' digest); returns the record."""
        from safetensors.torch import save_file

        folder = self.folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (WEIGHTS + ".tmp")
        save_file({k: v.contiguous() for k, v in state.items()}, str(tmp))
        _sync_file(tmp)
        tmp.replace(folder / WEIGHTS)
        write_json(folder / DESCRIPTION, description)
        record = {**record, "weights_digest": file_digest(folder / WEIGHTS)}
        write_json(folder / RECORD, record)
        _sync_dir(folder)
        return record

    def weights_digest(self, key: str) -> str:
        """The digest its record holds (computed from the file for records older than digests)."""
        return self.record(key).get("weights_digest") or file_digest(self.folder(key) / WEIGHTS)

    def load_state(self, key: str, device="cpu") -> dict[str, Any]:
        from safetensors.torch import load_file

        return load_file(str(self.folder(key) / WEIGHTS), device=str(device))

    def write_environment(self, env: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.dir / ENVIRONMENT, env)

    def environment(self) -> dict[str, Any] | None:
        """The environment the train stage resolved for this model (None before any training)."""
        return read_json(self.dir / ENVIRONMENT)


def refuse_replaced_weights(store: CheckpointStore, units) -> None:
    """A DataError naming the first unit whose weights file is not the one its record was written
    with (copied over, edited): its key no longer says what made it, and scores, runs and registry
    versions would stand for weights that are gone. Records older than digests are not checked.
    (A function, not a method: CheckpointStore is on the scoring path, and cell keys digest it.)"""
    from driftmatrix.errors import DataError

    replaced = [u for u in units if (recorded := store.record(u.key).get("weights_digest"))
                and file_digest(store.folder(u.key) / WEIGHTS) != recorded]
    if replaced:
        raise DataError(f"{store.folder(replaced[0].key) / WEIGHTS}: not the weights its {RECORD} records (changed "
                        f"since training; {len(replaced)} of {len(units)} units of {store.dir.name}): restore them "
                        f"(`dvc checkout {store.dir}`) or delete the unit folders to train them again")


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes: ties scores and runs to the exact weights they came from."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_json(path: Path, obj: Any, indent: int | None = 2) -> None:
    """Write ``obj`` to a temporary file, fsync it, then rename it over ``path``. ``indent=None``
    for bulk documents: only then does ``json`` encode in C (7x faster for a unit's scores)."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, indent=indent))
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def read_json(path: Path) -> Any:
    """The JSON in ``path``, or None when it is absent or cut short."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def _sync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _sync_dir(folder: Path) -> None:
    """Make the renames in ``folder`` durable (where the OS lets a directory be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class ScoreStore:
    """``<root>/<model>/<unit key>.json``: a unit's scored cells (written atomically), and the environment."""

    def __init__(self, root: str | Path, model: str):
        self.dir = Path(root) / model

    def path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def read(self, key: str) -> dict[str, Any]:
        doc = read_json(self.path(key))
        return doc if isinstance(doc, dict) and isinstance(doc.get("cells"), dict) else {"cells": {}, "logged": {}}

    def write(self, key: str, doc: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.path(key), doc, indent=None)  # read by the stages, not by people: compact

    def keys(self) -> list[str]:
        return sorted(p.stem for p in self.dir.glob("*.json") if p.name != ENVIRONMENT) if self.dir.exists() else []

    def write_environment(self, env: Mapping[str, Any]) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        write_json(self.dir / ENVIRONMENT, env)

    def environment(self) -> dict[str, Any] | None:
        return read_json(self.dir / ENVIRONMENT)


def current_row(plan, unit, hashes, cells: Mapping[str, Any]) -> dict[str, list]:
    """The unit's drift-matrix row from its stored cells (None where a cell is not scored)."""
    values, n_eval, left_out = [], [], []
    for cell in plan.cells(unit, hashes):
        c = cells.get(cell.key) or {}
        values.append(c.get("value"))
        n_eval.append(c.get("n_eval"))
        left_out.append(c.get("left_out", []))
    return {"values": values, "n_eval": n_eval, "left_out": left_out}
