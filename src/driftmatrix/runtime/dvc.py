"""DVC at the edge: a torn ``dvc.lock`` or stage-lock table moved aside (:func:`repair_dvc_lock`,
:func:`repair_dvc_rwlock`, run by ``make repro`` first), and a preset run as a DVC experiment.

Copying a preset over ``params.yaml`` loses what DVC's experiments give (a named experiment, params
and metrics diffs, ``dvc exp apply``), so the preset becomes ``dvc exp run -S`` overrides:
``key=value`` for each changed leaf, ``+key=value`` for each added one, ``~key`` for each it lacks
(``--merge`` keeps those, for partial presets such as ``presets/tuned/``)."""

from __future__ import annotations

import argparse
import logging
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator, Mapping

import yaml

log = logging.getLogger(__name__)
_MISSING = object()
PLAIN = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")  # an unquoted Hydra string that stays one
RESERVED = {"true", "false", "null", "inf", "nan"}
KEY = re.compile(r"^(?:[A-Za-z_$][A-Za-z0-9_$-]*|[0-9]+)$")  # what Hydra's key grammar accepts


def _key(path: str, key: Any) -> str:
    k = str(key)
    if not KEY.match(k):
        raise ValueError(f"key {k!r} under {path or 'the top level'}: DVC's -S overrides cannot name it "
                         "(letters, digits, _, $, - only)")
    return f"{path}.{k}" if path else k


def _quote(s: str) -> str:
    """Plain if Hydra reads it back as the same string, else single-quoted with escapes."""
    if PLAIN.match(s) and s.lower() not in RESERVED:
        return s
    s = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", s)
    s = re.sub(r"(\\+)$", lambda m: m.group(1) * 2, s)
    return f"'{s}'"


def value(v: Any, path: str = "") -> str:
    """A YAML value in Hydra's override grammar; strings stay strings."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, Mapping):
        return "{" + ",".join(f"{k}:{value(x, _key(path, k))}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(value(x, path) for x in v) + "]"
    return _quote(str(v))


def overrides(current: Mapping, preset: Mapping, merge: bool = False, path: str = "") -> Iterator[str]:
    """Hydra overrides turning ``current`` into ``preset``: deletions, kept keys in place, additions."""
    if not merge:
        for k, old in current.items():
            if k not in preset:
                if old is None:  # Hydra cannot delete a null: it reads as "no such key"
                    yield f"{_key(path, k)}=0"
                yield f"~{_key(path, k)}"
    for k, new in preset.items():
        key = _key(path, k)
        old = current.get(k, _MISSING)
        if isinstance(new, Mapping) and isinstance(old, Mapping):
            yield from overrides(old, new, merge, key)  # `a={}` would merge, not replace: recurse
        elif old is _MISSING:
            yield f"+{key}={value(new, key)}"
        elif old != new or type(old) is not type(new):
            yield f"{key}={value(new, key)}"



def _load(path: Path) -> dict:
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise SystemExit(f"{path}: cannot read the preset ({e})") from e
    if not isinstance(doc, dict):
        raise SystemExit(f"{path}: a preset is a YAML mapping of parameter sections")
    return doc


def command(preset: Path, params: Path = Path("params.yaml"), merge: bool = False,
            extra: list[str] | None = None) -> list[str]:
    """``dvc exp run -S <override> ... <extra>`` that runs ``preset`` as an experiment."""
    sets = [a for o in overrides(_load(params), _load(preset), merge) for a in ("-S", o)]
    return ["dvc", "exp", "run", *sets, *(extra or [])]


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(prog="python -m driftmatrix.runtime.dvc", description=__doc__.splitlines()[0])
    ap.add_argument("preset", type=Path)
    ap.add_argument("--params", type=Path, default=Path("params.yaml"))
    ap.add_argument("--merge", action="store_true", help="keep keys the preset does not have")
    ap.add_argument("--print", dest="dry", action="store_true", help="print the command, do not run it")
    a = ap.parse_args(argv)
    try:
        cmd = command(a.preset, a.params, a.merge, extra)
    except ValueError as e:
        raise SystemExit(f"{a.preset}: {e}") from e
    print(shlex.join(cmd), flush=True)
    return 0 if a.dry else subprocess.call(cmd)


def repair_dvc_lock(path: str | Path = "dvc.lock") -> Path | None:
    """Move a torn ``dvc.lock`` aside so that ``dvc repro`` can run again; the new path, or None.
    Without it DVC reruns each stage once, which skips every finished unit and cell."""
    import yaml
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA

    return _set_aside_if_torn(path, lambda text: COMPILED_LOCKFILE_SCHEMA(yaml.safe_load(text)))


def repair_dvc_rwlock(path: str | Path = ".dvc/tmp/rwlock") -> Path | None:
    """Move aside DVC's table of stage locks when a kill tore it; the new path, or None. DVC rewrites
    it only while it holds the repository lock, so no live ``dvc`` relies on a torn one; without it
    DVC starts an empty table."""
    import json

    def read(text: str) -> None:
        if not isinstance(json.loads(text), dict):
            raise ValueError("not a JSON object")

    return _set_aside_if_torn(path, read)


def _set_aside_if_torn(path: str | Path, read) -> Path | None:
    """``path`` moved to ``<path>.torn`` when ``read(its text)`` raises: DVC rewrites its lock files
    in place, so a killed ``dvc repro`` leaves them truncated, and every later one stops on them."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        read(path.read_text())
        return None
    except Exception as exc:  # noqa: BLE001 - any parse or schema error: DVC would refuse it too
        aside = path.with_name(f"{path.name}.torn")
        path.replace(aside)
        log.warning("%s is torn (%s: a `dvc repro` was killed while writing it); moved to %s", path,
                    type(exc).__name__, aside)
        return aside


if __name__ == "__main__":
    sys.exit(main())
