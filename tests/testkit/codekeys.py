"""Helpers of the code-key tests: edit a copy of the package source, and trace what a unit runs."""

from __future__ import annotations

import ast
import functools
import sys
from pathlib import Path


from driftmatrix.units import code as provenance
from driftmatrix.models.catalog import REGISTRY


SRC = provenance.PACKAGE_DIR


forget = provenance.forget


def insert_statement(path: Path, qualname: str, statement: str) -> None:
    """Put ``statement`` first in the body of function ``qualname`` (after its docstring)."""
    text = path.read_text()
    node = ast.parse(text)
    for part in qualname.split("."):
        node = next(n for n in node.body if getattr(n, "name", None) == part)
    body = node.body[1:] if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant) \
        else node.body
    lines = text.splitlines(keepends=True)
    first = body[0]
    lines.insert(first.lineno - 1, " " * first.col_offset + statement + "\n")
    path.write_text("".join(lines))


def _a_report(func: ast.expr, call: str) -> bool:
    """A logger's level method (``log.info``, ``logging.getLogger(x).warning``), ``warnings.warn``
    or a print to stderr: what a reader calls a log message."""
    if isinstance(func, ast.Name):
        return func.id == "print" and "stderr" in call
    if not isinstance(func, ast.Attribute):
        return False
    owner = ast.unparse(func.value)
    return func.attr == "warn" and owner == "warnings" or func.attr in (
        "debug", "info", "warning", "error", "exception", "critical") and ("log" in owner.lower())


def reword_reports(path: Path) -> int:
    """Reword the message of every log call, warning and stderr print in ``path``; returns how many."""
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    spots = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], (ast.Constant, ast.JoinedStr)) \
                and _a_report(node.func, ast.dump(node)):
            spots.append((node.args[0].lineno, node.args[0].col_offset))
    for lineno, col in sorted(spots, reverse=True):
        raw = lines[lineno - 1].encode()
        at = col + next(i for i, ch in enumerate(raw[col:].decode()) if ch in "'\"")
        at += 3 if raw[at:at + 3] in (b'"""', b"'''") else 1
        lines[lineno - 1] = (raw[:at] + b"(reworded) " + raw[at:]).decode()
    path.write_text("".join(lines))
    ast.parse(path.read_text())
    return len(spots)


# --- nothing that runs is left out --------------------------------------------------------------
def _ran(fn) -> set[tuple[str, str]]:
    """(module, qualified name) of every package function that runs in ``fn()``, except inside the
    functions whose results the keys hold as values (provenance.KEYED_BY_VALUE)."""
    ran, skipping = set(), []

    @functools.cache
    def module_of(filename: str) -> str | None:
        """The package module of a file, None outside the package (asked once per file)."""
        path = Path(filename)
        if not path.is_relative_to(SRC):
            return None
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)

    def profile(frame, event, arg):  # called for every call of every library too: cheap first tests
        if event != "call" and event != "return":
            return
        code = frame.f_code
        if code.co_name == "<module>":
            return
        module = module_of(code.co_filename)
        if module is None:
            return
        qual = code.co_qualname.split(".<locals>")[0]
        if f"{module}.{qual}" in provenance.KEYED_BY_VALUE:
            skipping.append(frame) if event == "call" else skipping.remove(frame)
        elif event == "call" and not skipping:
            ran.add((module, qual))

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return ran


def untraced(params, paths, model: str) -> set[tuple[str, str]]:
    """The package functions that ran while a worker built ``model``'s experiment, trained one
    unit and scored its cells, yet are in neither its unit key's nor its cells' code."""
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.experiment import score_task
    from driftmatrix.units.environment import resolve_environment
    from driftmatrix.units.experiment import ExperimentRecipe
    from driftmatrix.units.plan import slice_hashes

    recipe = ExperimentRecipe.of(params, model, paths.slices, paths.features, resolve_environment(params, model))
    store, checkpoints = CheckpointStore(paths.checkpoints, model), str(paths.checkpoints)

    def train_and_score():  # what a worker computes (its checks and the driver's records aside)
        exp = recipe.build()
        unit = exp.plan.units[1]
        trained = exp.train_unit(unit)[0]
        store.write(unit.key, {k: v.detach() for k, v in trained.state_dict().items()}, exp.description(), {})
        score_task(exp, (unit, exp.plan.cells(unit, slice_hashes(exp.manifest)), checkpoints))

    train_and_score()  # imports and caches first
    ran = _ran(train_and_score)
    assert ("driftmatrix.learn.score", "forward_stats") in ran or params.dataset.task == "regression"
    forget()
    build = REGISTRY[model].build
    unit, _ = provenance.reach((*provenance.TRAIN_ROOTS, *provenance.model_roots(build)), build.cls)
    keyed = {**unit, **provenance.reach(provenance.SCORE_ROOTS)[0]}
    return {(m, q) for m, q in ran if (m, q) not in keyed and (m, q.split(".")[0]) not in keyed}
