"""A torn ``dvc.lock`` moved aside (``make repro`` runs this first)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)


def repair_dvc_lock(path: str | Path = "dvc.lock") -> Path | None:
    """Move a torn ``dvc.lock`` aside so that ``dvc repro`` can run again; the new path, or None
    when the file is absent or valid.

    DVC rewrites ``dvc.lock`` in place after every stage, not atomically: a ``dvc repro`` killed
    during that write leaves a truncated file, and every later ``dvc repro`` stops on it
    ("'./dvc.lock' validation failed"). Without the file DVC reruns each stage once; the stages
    skip every finished unit and scored cell (checkpoints and scores persist), so nothing is lost.
    """
    import yaml
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA

    path = Path(path)
    if not path.is_file():
        return None
    try:
        COMPILED_LOCKFILE_SCHEMA(yaml.safe_load(path.read_text()))
        return None
    except Exception as exc:  # noqa: BLE001 - any parse or schema error: DVC would refuse it too
        aside = path.with_name(f"{path.name}.torn")
        path.replace(aside)
        log.warning("%s is torn (%s: a `dvc repro` was killed while writing it); moved to %s: DVC reruns "
                    "each stage once, finished units and scores are kept", path, type(exc).__name__, aside)
        return aside
