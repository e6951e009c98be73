"""Code stage: each stage's code (``units.code.STAGE_CODE``) digested file by file, comments,
docstrings and log lines aside, into ``outputs/code/<stage>.json``. Each stage of dvc.yaml depends
on its own digest: a cosmetic edit reruns this stage alone, a changed statement the stages whose
code holds it. dvc.lock then lists one code file a stage, not fifteen: DVC rewrites the whole lock
with a pure-Python YAML round trip after every stage it runs, so its size costs every stage."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Iterable

from driftmatrix.config import keep_in_cache, user_cache_dir
from driftmatrix.errors import ConfigError
from driftmatrix.units.code import STAGE_CODE, rules_version, source_digest
from driftmatrix.units.store import read_json

#: Python files' digests kept in the machine's cache, by the sha256 of their bytes: at most this many.
KEPT_DIGESTS = 4096


def _python_digest(path: Path, data: bytes) -> str:
    try:
        return source_digest(data.decode("utf-8"), str(path))
    except (SyntaxError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: not valid Python ({e}); the code stage digests it for the stages that run it") from None




def file_digests(files: Iterable[Path]) -> dict[Path, str]:
    """Each Python file's :func:`source_digest`, any other file's sha256. A Python file whose bytes
    were digested before (in any checkout) is not parsed again: the machine's cache keeps digests by
    the sha256 of the bytes (parsing the whole package takes about 0.6 s)."""
    cache = user_cache_dir() / "source-digests" / f"{rules_version()}.json"
    known = read_json(cache)
    known = {k: v for k, v in known.items() if isinstance(v, str)} if isinstance(known, dict) else {}
    digests, new = {}, {}
    for path in files:
        data = path.read_bytes()
        raw = hashlib.sha256(data).hexdigest()
        if path.suffix == ".py" and raw not in known:
            new[raw] = _python_digest(path, data)
        digests[path] = raw if path.suffix != ".py" else known.get(raw) or new[raw]
    if new:
        keep_in_cache(cache, dict(list({**known, **new}.items())[-KEPT_DIGESTS:]))
    return digests


def files_under(root: Path, entry: str) -> list[Path]:
    """The files ``entry`` (a file or a folder of STAGE_CODE) names under ``root``, bytecode aside."""
    path = root / entry
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise ConfigError(f"units/code.py STAGE_CODE: {entry} is no file or folder of {root}")
    return sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")


def stage_digests(root: Path, table: dict[str, tuple[str, ...]] = STAGE_CODE) -> dict[str, dict[str, str]]:
    """stage -> {project path: digest} of every file its code entries name (each file read once)."""
    files = {stage: sorted({f for entry in entries for f in files_under(root, entry)}) for stage, entries in table.items()}
    digests = file_digests(set().union(*files.values()))
    return {stage: {f.relative_to(root).as_posix(): digests[f] for f in fs} for stage, fs in files.items()}


def run(root: str | Path = ".", out: str | Path = "outputs/code") -> dict[str, dict[str, str]]:
    """Write ``<out>/<stage>.json`` for every stage of STAGE_CODE."""
    digests = stage_digests(Path(root).resolve())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stage, files in digests.items():
        (out / f"{stage}.json").write_text(json.dumps(files, indent=1, sort_keys=True) + "\n")
    return digests
