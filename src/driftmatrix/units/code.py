"""What made a number, beyond data and settings: the code on its path and the environment.

Code is digested per definition from the parsed source, never imported (:func:`reach`): what a unit
reaches from :data:`TRAIN_ROOTS` and its model's own code (:func:`model_roots`), and a cell from
:data:`SCORE_ROOTS`. Comments, docstrings, formatting and statements that only log change nothing; a
changed statement changes the keys of exactly the units and cells that reach it (dvc.yaml's deps are
checked against it by tests/units/test_provenance.py). The environment (``units.environment``) and a
model's libraries (``models.custom.library_versions``) key units by value; hardware names a unit's
run, not its key (oneDNN picks kernels per instruction set)."""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import json
import os
import sys
import sysconfig
from pathlib import Path
from typing import Iterable, Mapping

PACKAGE_DIR = Path(__file__).resolve().parents[1]

#: Where the code of a key starts, by qualified name: the one table a package restructure edits.
#: A unit runs these and its model's own code (:func:`model_roots`); a cell's scoring SCORE_ROOTS.
TRAIN_ROOTS = ("driftmatrix.models.spec.Builder", "driftmatrix.units.experiment.ExperimentInfo.__init__",
               "driftmatrix.units.experiment.Experiment.__init__", "driftmatrix.units.experiment.Experiment.train_unit",
               "driftmatrix.learn.fit.fit")
SCORE_ROOTS = ("driftmatrix.units.experiment.score_task",)
#: Code whose results enter the keys as values (settings, environment, the plan): not followed.
KEYED_BY_VALUE = ("driftmatrix.units.plan.model_plan", "driftmatrix.config.effective_config",
                  "driftmatrix.units.environment.resolve_environment", "driftmatrix.config.parse_params",
                  "driftmatrix.models.catalog.get")
#: Tables from a Builder's class name to the class: a model's code holds its own entry only.
DISPATCH = ("driftmatrix.models.image.CLASSES", "driftmatrix.models.text.CLASSES")
#: The code each stage of dvc.yaml runs, as project paths (a folder: every file in it). The code stage
#: (stages/code.py) digests them per stage, and each stage depends on its digest alone: dvc.lock lists
#: one file a stage instead of each of these (DVC rewrites the whole lock after every stage). For the
#: stages that key units and cells, tests/units/test_provenance.py checks these against :func:`reach`.
_SETTINGS = ("src/driftmatrix/config.py", "src/driftmatrix/data/slicing.py", "src/driftmatrix/data/table.py",
             "src/driftmatrix/errors.py", "src/driftmatrix/features")
_KEYING = ("src/driftmatrix/models", "src/driftmatrix/units/code.py", "src/driftmatrix/units/environment.py",
           "src/driftmatrix/units/experiment.py", "src/driftmatrix/units/plan.py", "src/driftmatrix/units/store.py")
#: the files holding what a unit's training reaches (UNIT_CODE) and a cell's scoring (CELL_CODE: all of learn/)
UNIT_CODE = (*_SETTINGS, "src/driftmatrix/learn/fit.py", "src/driftmatrix/learn/optim.py",
             "src/driftmatrix/learn/precision.py", "src/driftmatrix/learn/tasks.py", *_KEYING)
CELL_CODE = (*_SETTINGS, "src/driftmatrix/learn", *_KEYING)
STAGE_CODE: dict[str, tuple[str, ...]] = {
    "ingest": ("src/driftmatrix/data",),
    "slice": ("src/driftmatrix/data/slicing.py",),
    "validate": ("src/driftmatrix/audit/validation.py", "src/driftmatrix/audit/gate.py",
                 "src/driftmatrix/audit/slices.py"),
    "audit": ("src/driftmatrix/audit",),
    "embed": ("src/driftmatrix/features",),
    "train": (*UNIT_CODE, "src/driftmatrix/stages/train.py", "src/custom_models"),  # your estimators: keyed by their code
    "evaluate": (*CELL_CODE, "src/driftmatrix/tracking/pyfunc.py", "src/driftmatrix/tracking/pyfunc_model.py",
                 "src/driftmatrix/stages/evaluate.py"),  # each run's model, an MLflow pyfunc (keys nothing)
    "matrices": (*CELL_CODE, "src/driftmatrix/stages/matrices.py", "src/driftmatrix/analysis",
                 "src/driftmatrix/reporting/text.py", "src/driftmatrix/reporting/dvcfiles.py"),
    "estimates": (*CELL_CODE, "src/driftmatrix/estimate", "src/driftmatrix/audit/drift.py",  # IW-inputs' image features
                  "src/driftmatrix/stages/estimates.py"),
    "policy": ("src/driftmatrix/stages/policy.py", "src/driftmatrix/analysis", "src/driftmatrix/reporting/figures.py"),
    "importance": (*UNIT_CODE, "src/driftmatrix/explain/importance.py"),
    "saliency": (*UNIT_CODE, "src/driftmatrix/explain", "src/driftmatrix/stages/saliency.py"),
    "report": ("src/driftmatrix/stages/saliency.py", "src/driftmatrix/stages/policy.py",  # saliency: log_folder; the
               "src/driftmatrix/stages/audit.py", "src/driftmatrix/stages/estimates.py",  # others: their MLflow runs
               "src/driftmatrix/stages/report.py", "src/driftmatrix/reporting", "src/driftmatrix/audit/drift.py",
               "src/driftmatrix/audit/figures.py", "src/driftmatrix/tracking/registry.py",  # versions, aliases
               "src/driftmatrix/analysis/advisor.py"),
}
#: Calls that only report (log lines, warnings): a statement that is one is in no digest.
_LEVELS = ("debug", "info", "warning", "error", "exception", "critical", "log")
REPORTS = {"log": _LEVELS, "logger": _LEVELS, "logging": _LEVELS, "warnings": ("warn",)}


# --- code ----------------------------------------------------------------------------------------
_LIBRARY_DIRS = tuple({Path(p).resolve() for k, p in sysconfig.get_paths().items()
                       if k in ("stdlib", "platstdlib", "purelib", "platlib")})


#: What this process's digests were made of, for :func:`code_key`'s cache: each top-level name's
#: project root, each module name's file (None: a library's or none), each parsed file's sha256.
_READ: dict[str, dict[str, str | None]] = {"roots": {}, "paths": {}, "texts": {}}


@functools.lru_cache(maxsize=None)
def _project_root(top: str) -> Path | None:
    """The folder holding top-level package ``top`` when it is project code: this package, or one
    on sys.path outside the installed libraries (stdlib, site-packages). Found without importing."""
    root = _find_root(top)
    _READ["roots"][top] = root and str(root)
    return root


def _find_root(top: str) -> Path | None:
    if top == "driftmatrix":
        return PACKAGE_DIR.parent
    for root, library in _search_path(tuple(sys.path)) if top else []:
        if os.path.isdir(os.path.join(root, top)) or os.path.isfile(os.path.join(root, f"{top}.py")):
            return None if library else Path(root)
    return None


@functools.lru_cache(maxsize=4)
def _search_path(entries: tuple[str, ...]) -> tuple[tuple[str, bool], ...]:
    """``sys.path`` resolved once: (folder, whether it is an installed library's)."""
    roots = [Path(entry or ".").resolve() for entry in entries]
    return tuple((str(root), any(root.is_relative_to(lib) for lib in _LIBRARY_DIRS)) for root in roots)


def module_path(name: str) -> Path | None:
    """Source file of project module ``name``; None for a library's module or a missing one."""
    root = _project_root(name.split(".")[0])
    rel = os.path.join(root, *name.split(".")) if root else None  # os.path: a cached key checks some 300 names
    path = next((p for p in (os.path.join(rel, "__init__.py"), f"{rel}.py") if os.path.isfile(p)), None) if rel else None
    _READ["paths"][name] = path
    return Path(path) if path else None


def _only_reports(stmt: ast.stmt) -> bool:
    """A string (docstring), a :data:`REPORTS` call (``log.info(...)``) or ``print(..., file=sys.stderr)``."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    func = call.func if isinstance(call, ast.Call) else None
    if isinstance(func, ast.Name):
        return func.id == "print" and any(k.arg == "file" and "stderr" in ast.dump(k.value) for k in call.keywords)
    return isinstance(call, ast.Constant) and isinstance(call.value, str) or isinstance(func, ast.Attribute) \
        and isinstance(func.value, ast.Name) and func.attr in REPORTS.get(func.value.id, ())


def source_digest(source: str, filename: str = "<source>") -> str:
    """sha256 of a module's syntax tree without docstrings and statements that only report: what
    :data:`STAGE_CODE`'s digests are made of (comments and formatting are in no syntax tree)."""
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        for fld in ("body", "orelse", "finalbody"):
            body = getattr(node, fld, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                setattr(node, fld, [s for s in body if not _only_reports(s)] or [ast.Pass()])
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()


def _defs(body: list[ast.stmt]) -> dict[str, list[ast.stmt]]:
    """name -> the module- or class-level statements that define it (def, class, assignment)."""
    out: dict[str, list[ast.stmt]] = {}
    for node in body:
        names = [node.name] if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else \
            [n.id for t in getattr(node, "targets", [getattr(node, "target", None)]) for n in ast.walk(t)
             if isinstance(n, ast.Name)] if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)) else []
        for name in names:
            out.setdefault(name, []).append(node)
    return out


class _Module:
    """A parsed module without docstrings, reporting statements or imports, with its definitions and binds."""

    def __init__(self, name: str, path: Path):
        source = path.read_bytes()
        _READ["texts"][str(path)] = hashlib.sha256(source).hexdigest()
        tree = ast.parse(source, filename=str(path))
        self.name, self.binds, self.imports = name, {}, set()
        self.package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree.body = self._clean(tree.body, self.binds)
        self.defs = _defs(tree.body)
        self.members = {n.name: _defs(n.body) for n in tree.body if isinstance(n, ast.ClassDef)}
        defined = {id(n) for nodes in self.defs.values() for n in nodes}
        self.init = [n for n in tree.body if id(n) not in defined]

    def _clean(self, body: list[ast.stmt], binds: dict[str, str]) -> list[ast.stmt]:
        kept = []
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                binds.update(self._binds(node))
                self.imports.update(self._binds(node).values())
            elif not _only_reports(node) and not (isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test)):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    node.binds = {}
                for fld in ("body", "orelse", "finalbody"):
                    if getattr(node, fld, None):
                        setattr(node, fld, self._clean(getattr(node, fld), getattr(node, "binds", binds)))
                for part in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
                    part.body = self._clean(part.body, binds)
                kept.append(node)
        return kept

    def _binds(self, node: ast.Import | ast.ImportFrom) -> dict[str, str]:
        if isinstance(node, ast.Import):
            return {a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0] for a in node.names}
        base, parts = node.module or "", self.package.split(".")
        if node.level:
            base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
        return {a.asname or a.name: f"{base}.{a.name}" for a in node.names if a.name != "*"}

    def target(self, name: str, env: Mapping[str, str] = {}) -> str | None:
        """The absolute dotted name a bare name means here (a function's imports ``env``, then
        definitions, then module imports); None for a local or builtin name."""
        return env.get(name) or (f"{self.name}.{name}" if name in self.defs else self.binds.get(name))


@functools.lru_cache(maxsize=None)
def _module(name: str) -> _Module | None:
    path = module_path(name)
    return _Module(name, path) if path else None


@functools.lru_cache(maxsize=None)
def _resolve(dotted: str) -> tuple[str, str] | None:
    """``(module, name in it)`` of the project definition a dotted name means, following
    re-exports and base classes: ``(module, "")`` for a module, None for a library's name."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        mod = _module(".".join(parts[:i]))
        if mod is None:
            continue
        head, rest = (parts[i], parts[i + 1:]) if i < len(parts) else ("", [])
        if not head or head not in mod.defs:
            return (mod.name, "") if not head else _resolve(".".join([mod.binds[head], *rest])) \
                if head in mod.binds else None
        return next(((m, f"{c}.{rest[0]}") for m, c in _mro(mod.name, head)
                     if rest[0] in _module(m).members.get(c, {})), None) if rest else (mod.name, head)
    return None


@functools.lru_cache(maxsize=None)
def _mro(module: str, cls: str) -> tuple[tuple[str, str], ...]:
    """The class and its project base classes, nearest first."""
    out, mod = [(module, cls)], _module(module)
    for base in getattr(mod.defs[cls][-1], "bases", []):
        target = mod.target(ast.unparse(base).split(".")[0])
        found = _resolve(".".join([target, *ast.unparse(base).split(".")[1:]])) if target else None
        if found and found[1] and isinstance(_module(found[0]).defs.get(found[1], [None])[-1], ast.ClassDef):
            out += [c for c in _mro(*found) if c not in out]
    return tuple(out)


class _Refs(ast.NodeVisitor):
    """What code references: project definitions, methods called on values of unknown type, library names."""

    def __init__(self, mod: _Module, cls: tuple[str, str] | None):
        self.mod, self.cls, self.env = mod, cls, {}
        self.refs, self.wishes, self.libs = set(), set(), set()

    def generic_visit(self, node):
        saved = self.env
        self.env = {**saved, **node.binds} if getattr(node, "binds", None) else saved
        for name, value in ast.iter_fields(node):
            for child in (value if isinstance(value, list) else [value]) if name not in ("annotation", "returns") else []:
                if isinstance(child, ast.AST):
                    self.visit(child)
        self.env = saved

    def visit_Name(self, node):
        if isinstance(node.ctx, ast.Load):
            self._chain(node.id, [])

    def visit_Attribute(self, node):
        attrs, root = [], node
        while isinstance(root, ast.Attribute):
            attrs.insert(0, root.attr)
            root = root.value
        if isinstance(root, ast.Name):
            return self._chain(root.id, attrs)
        if isinstance(root, ast.Call) and getattr(root.func, "id", "") == "super" and self.cls:  # super().m
            self.refs.update(found for c in _mro(*self.cls)[1:] if (found := _resolve(f"{c[0]}.{c[1]}.{attrs[0]}")))
            attrs = attrs[1:]
        else:
            self.visit(root)
        self.wishes.update((None, a) for a in attrs)

    def _chain(self, name: str, attrs: list[str]):
        """``name.a.b``: the longest prefix that names a project definition is a reference, the
        attributes after it are wishes; ``self.a`` is a member of the class; a library's name is a binding."""
        if name in ("self", "cls") and self.cls:
            found = _resolve(".".join([*self.cls, *attrs[:1]])) if attrs or name == "cls" else None  # cls(): the class
            self.refs.update([found] if found else [])
            self.wishes.update([(self.cls, attrs[0])] if attrs else [])
            self.wishes.update((None, a) for a in attrs[1:])
            return
        target = self.mod.target(name, self.env)
        if target and _project_root(target.split(".")[0]) is None:
            return self.libs.add(f"{name}={target}")
        k = next((k for k in range(len(attrs), -1, -1) if target and _resolve(".".join([target, *attrs[:k]]))), 0)
        found = _resolve(".".join([target, *attrs[:k]])) if target else None
        self.refs.update([found] if found and found[1] else [])
        self.wishes.update((None, a) for a in attrs[k:])


@functools.lru_cache(maxsize=None)
def _symbol(module: str, name: str, entry: str = ""):
    """(sha256 of the definition's syntax tree or "", what it references) for ``name`` in
    ``module``; ``<import>``: the module's import-time statements that touch a library;
    ``entry``: the one entry of a :data:`DISPATCH` table that a model's code holds."""
    mod = _module(module)
    cls_name, _, member = name.partition(".")
    nodes = mod.members[cls_name][member] if member else mod.init if name == "<import>" else mod.defs[name]
    cls = (module, cls_name) if member or nodes and isinstance(nodes[-1], ast.ClassDef) else None
    if entry:  # {"CNN": CNN, ...}[entry]
        nodes = [v for k, v in zip(nodes[-1].value.keys, nodes[-1].value.values) if getattr(k, "value", None) == entry]
    kept, refs = [], _Refs(mod, cls)
    for node in nodes:
        one = _Refs(mod, cls)
        one.visit(node)
        if name != "<import>" or one.libs:
            kept.append(node)
            refs.refs, refs.wishes, refs.libs = refs.refs | one.refs, refs.wishes | one.wishes, refs.libs | one.libs
    return hashlib.sha256("\n".join(ast.dump(n) for n in kept).encode()).hexdigest() if kept else "", refs


def reach(roots: Iterable[str], entry: str = "") -> tuple[dict[tuple[str, str], str], set[str]]:
    """Every project definition that code from ``roots`` reaches, with its digest ("" for none), and
    the library names it binds.

    A method called on a value of unknown type (``inputs.batch(idx)``) reaches every member of that
    name of the classes in the modules reached, until nothing changes: conservative (more code than
    runs, never less). Not followed: :data:`KEYED_BY_VALUE`; ``entry``: see :data:`DISPATCH`."""
    seen: dict[tuple[str, str], str] = {}
    wishes: set = set()
    libs: set[str] = set()
    todo = [_resolve(root) or (root, "") for root in roots]
    if missing := [m for m, name in todo if not name]:
        raise ValueError(f"provenance: {missing[0]} names no definition in this checkout (update the roots table)")
    while todo:
        while todo:
            sym = todo.pop()
            if sym in seen or f"{sym[0]}.{sym[1]}" in KEYED_BY_VALUE or not _module(sym[0]):
                continue
            seen[sym], refs = _symbol(*sym, entry if f"{sym[0]}.{sym[1]}" in DISPATCH else "")
            parts = sym[0].split(".")  # a module's import-time code runs with it, and its packages'
            todo += [*refs.refs, *((".".join(parts[:i]), "<import>") for i in range(1, len(parts) + 1))]
            wishes |= refs.wishes
            libs |= refs.libs
        names: dict[str, set] = {}
        for restrict, name in wishes:
            names.setdefault(name, set()).add(restrict)
        todo = [(m, f"{c}.{n}") for m in {m for m, _ in seen} for c, members in _module(m).members.items()
                for n in members.keys() & names.keys() if (m, f"{c}.{n}") not in seen
                and (None in names[n] or names[n] & set(_mro(m, c)))]
    return seen, libs


@functools.lru_cache(maxsize=None)
def code_key(roots: tuple[str, ...], entry: str = "") -> str:
    """One digest of the code ``roots`` reach, each definition by name (moved unchanged, it keeps the key)."""
    cache = _key_file(roots, entry)
    if (key := _cached_key(cache)) is not None:
        return key
    seen, libs = reach(roots, entry)
    lines = sorted(f"{name} {sha}" for (_, name), sha in seen.items() if sha) + sorted(libs)
    key = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
    _store_key(cache, key)
    return key


# --- code keys kept between processes --------------------------------------------------------------
# Parsing and digesting the reached code takes 0.15-0.3 s, in every process that plans (each stage
# and each of its workers). A key is kept with everything its process had read when it was made
# (_READ: a superset of what made it) and used again only while each of those reads gives the same
# answer: the same project roots, the same file for each module name, the same bytes in each file.


def forget() -> None:
    """Drop what this process has parsed, digested and read (code edited while it runs)."""
    for cached in (_project_root, _module, _resolve, _mro, _symbol, code_key):
        cached.cache_clear()
    for reads in _READ.values():
        reads.clear()


@functools.lru_cache(maxsize=1)
def rules_version() -> str:
    """Python's version (its syntax trees) and this module's bytes (the digests' rules): what a kept
    code key or file digest was made under."""
    return hashlib.sha256(sys.version.encode() + Path(__file__).read_bytes()).hexdigest()[:16]


def _key_file(roots: tuple[str, ...], entry: str) -> Path | None:
    """Where ``code_key(roots, entry)`` of this checkout is kept (None: the cache is off)."""
    from driftmatrix.config import user_cache_dir

    if os.environ.get("DRIFTMATRIX_CODE_CACHE") == "off":
        return None
    what = [rules_version(), str(PACKAGE_DIR), list(roots), entry, list(KEYED_BY_VALUE), list(DISPATCH)]
    name = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:32]
    return user_cache_dir() / "code-keys" / f"{name}.json"


def _file_sha(path: str) -> str | None:
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _cached_key(cache: Path | None) -> str | None:
    """The kept key, if every read it was made of answers the same now."""
    from driftmatrix.units.store import read_json

    kept = read_json(cache) if cache else None
    if not isinstance(kept, dict) or not isinstance(kept.get("key"), str) or len(kept["key"]) != 16:
        return None
    reads = kept.get("reads", {})
    roots, paths, texts = (reads.get(k, {}) for k in ("roots", "paths", "texts"))
    same = all(str(_project_root(t) or "") == (r or "") for t, r in roots.items()) \
        and all(str(module_path(n) or "") == (p or "") for n, p in paths.items()) \
        and all(_file_sha(f) == sha for f, sha in texts.items())
    return kept["key"] if same else None


#: Kept keys beyond this many: the least recently written go (scratch copies of the code each add theirs).
KEPT_KEYS = 256


def _store_key(cache: Path | None, key: str) -> None:
    """Keep ``key`` with this process's reads; a cache that cannot be written is skipped."""
    from driftmatrix.config import keep_in_cache

    paths = {n: p for n, p in _READ["paths"].items() if _READ["roots"].get(n.split(".")[0])}  # a library's: None
    if cache is None or not keep_in_cache(cache, {"key": key, "reads": {**_READ, "paths": paths}}):
        return
    with contextlib.suppress(OSError):  # another process may be pruning too
        kept = sorted(cache.parent.glob("*.json"), key=lambda f: f.stat().st_mtime)
        for old in kept[:len(kept) - KEPT_KEYS // 2] if len(kept) > KEPT_KEYS else []:
            old.unlink(missing_ok=True)


def model_roots(build, estimator: str = "") -> tuple[str, ...]:
    """A model's own roots: its module's ``build``, its ``Builder.cls`` class, a project estimator's class."""
    extra = [f"{build.module}.{build.cls}" if build.cls else "", estimator]
    return (f"{build.module}.build", *(r for r in extra if r and (_resolve(r) or ("", ""))[1]))


def unit_code(build, estimator: str = "") -> str:
    """The code key of a unit of the model that ``build`` (a ``models.catalog.Builder``) makes."""
    key = code_key((*TRAIN_ROOTS, *model_roots(build, estimator)), build.cls)
    return hashlib.sha256(f"{key} {build.cls} {json.dumps(dict(build.shape), sort_keys=True)}".encode()).hexdigest()[:16]


def code_files(seen: Mapping[tuple[str, str], str]) -> set[Path]:
    """The files that hold reached code (:func:`reach`): what dvc.yaml's stages that key units depend on."""
    return {module_path(m).resolve() for (m, _), sha in seen.items() if sha}


def undeclared(estimator: str, stage: str = "train", dvc_file: Path = Path("dvc.yaml")) -> list[str]:
    """Files of this project (the current folder) holding code that a named estimator reaches and
    that ``stage`` depends on neither through its code (:data:`STAGE_CODE`) nor in ``dvc_file``:
    DVC would skip the stage when they change."""
    if not (estimator and (_resolve(estimator) or ("", ""))[1] and dvc_file.exists()):
        return []
    import yaml

    spec = yaml.safe_load(dvc_file.read_text())["stages"][stage]
    listed = [d if isinstance(d, str) else next(iter(d)) for d in (spec.get("do") or spec).get("deps", [])]
    deps = [Path(d) for d in (*listed, *STAGE_CODE.get(stage, ()))]
    here = Path.cwd().resolve()
    files = [f.relative_to(here) for f in code_files(reach([estimator])[0]) if f.is_relative_to(here)]
    return sorted(str(f) for f in files if not any(d == f or d in f.parents for d in deps))
