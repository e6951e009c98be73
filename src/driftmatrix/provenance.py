"""What made a number, beyond data and settings: the code on its path and the environment.

A unit's key (``driftmatrix.units``) covers the code that trains it and the environment that
computed it; a cell's key adds the code and format that score it. So:

- **Code** is digested from the parsed modules on the path (:data:`TRAIN_CODE`, the model's own
  modules, :data:`SCORE_CODE`): comments, docstrings and formatting change nothing, a changed
  statement changes the key of exactly the units and cells whose path holds it. The same lists
  are what dvc.yaml's stages must depend on (tests/test_provenance.py checks it).
- **Environment** (:class:`Environment`): resolved precision, device kind, CPU thread count (a
  CPU result depends on it) and the versions of the numeric libraries. The train stage resolves
  it once, records it beside the checkpoints, ships it to every worker, and each worker checks
  that it computes the key it was handed. Later stages read the recorded one instead of resolving
  their own, so a key never depends on which machine runs ``matrices`` or ``status``.
- **Other libraries** key only the units they compute: scipy, scikit-learn, LightGBM for tabular
  models (``models.custom.library_versions``); transformers, tokenizers or timm, and the encoder's
  weights by content, for those that read its features (``features.cache.features_identity``).
- **Hardware** (CPU instruction set and model, GPU model) is recorded with each unit and names
  its run, not its key: oneDNN picks kernels per instruction set, so CNNs can differ in the last
  bits across CPUs, and a sync supersedes only runs of the same hardware (``tracking.plan_runs``).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import platform
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable, Mapping

PACKAGE_DIR = Path(__file__).resolve().parent

#: Modules that train every unit (the model's own modules are added per model).
TRAIN_CODE = ("driftmatrix.training", "driftmatrix.units", "driftmatrix.tasks", "driftmatrix.optim",
              "driftmatrix.precision", "driftmatrix.features.inputs", "driftmatrix.models.heads",
              "driftmatrix.models.catalog")
#: Modules that turn a checkpoint into a cell's score (beside the training path, which loads it).
SCORE_CODE = ("driftmatrix.evaluation", "driftmatrix.tasks")
#: Modules that read cached encoder features, for models with an encoder.
ENCODER_CODE = ("driftmatrix.features.cache", "driftmatrix.features.encoders")
#: Bump when a stored cell's format or meaning changes.
#: 2: cells carry forward-pass statistics (evaluation.forward_stats); 3: held-out cells (j <= i)
#: also carry each row's correctness (evaluation.row_correctness), for input-space IW.
SCORE_FORMAT = 3
#: Libraries whose versions change a unit's numbers.
NUMERIC_LIBRARIES = ("torch", "numpy")


# --- code --------------------------------------------------------------------------------------
def module_path(name: str) -> Path:
    """Source file of a ``driftmatrix.*`` module, found without importing it."""
    rel = Path(*name.split(".")[1:])
    package = PACKAGE_DIR / rel / "__init__.py"
    return package if package.exists() else (PACKAGE_DIR / rel).with_suffix(".py")


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body \
                and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]
    return tree


@functools.lru_cache(maxsize=None)
def _parsed(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


@functools.lru_cache(maxsize=None)
def module_digest(name: str) -> str:
    """sha256 of a module's syntax tree without docstrings, comments or positions."""
    tree = _strip_docstrings(ast.parse(module_path(name).read_text(), filename=str(module_path(name))))
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()


def internal_imports(name: str) -> list[str]:
    """The ``driftmatrix.*`` modules that ``name`` imports anywhere (top level or in functions;
    relative imports resolved; ``from package import module`` counts the module)."""
    found = []
    is_package = module_path(name).name == "__init__.py"
    for node in _runtime_nodes(_parsed(module_path(name))):
        if isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")[: len(name.split(".")) - node.level + (1 if is_package else 0)]
                base = ".".join(parts + ([base] if base else []))
            candidates = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found += [m for m in candidates if m.startswith("driftmatrix.") and module_path(m).exists()]
    return found


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` but those under ``if TYPE_CHECKING:`` (imports for annotations only)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            todo += node.orelse
            continue
        todo += ast.iter_child_nodes(node)


def closure(roots: Iterable[str]) -> tuple[str, ...]:
    """``roots`` and every ``driftmatrix.*`` module they import, transitively, sorted."""
    seen, todo = set(), list(roots)
    while todo:
        mod = todo.pop()
        if mod not in seen:
            seen.add(mod)
            todo += internal_imports(mod)
    return tuple(sorted(seen))


def model_code(builder_module: str, has_encoder: bool) -> tuple[str, ...]:
    """The modules that build one model's network (its builder module and what that imports) and,
    for encoder models, read its cached features (those modules alone: what they import runs the
    embed stage, not this model)."""
    return tuple(sorted({*closure([builder_module]), *(ENCODER_CODE if has_encoder else ())}))


def train_code(builder_module: str, has_encoder: bool) -> tuple[str, ...]:
    """Every module on a unit's training path."""
    return tuple(sorted({*TRAIN_CODE, *model_code(builder_module, has_encoder)}))


def code_digest(modules: Iterable[str]) -> str:
    """One digest over the modules' parsed sources (names included, so a move counts)."""
    return hashlib.sha256("\n".join(f"{m}:{module_digest(m)}" for m in sorted(set(modules))).encode()
                          ).hexdigest()[:16]


def source_files(modules: Iterable[str]) -> list[str]:
    """Repository-relative paths of the modules' files (what dvc.yaml must depend on)."""
    root = PACKAGE_DIR.parent.parent
    return sorted(str(module_path(m).relative_to(root)) for m in set(modules))


# --- environment ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def package_version(dist: str) -> str:
    """Installed version of a distribution (package metadata, no import), or ``absent``."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "absent"


def library_versions() -> dict[str, str]:
    """Installed versions of :data:`NUMERIC_LIBRARIES`."""
    return {name: package_version(name) for name in NUMERIC_LIBRARIES}


_CONTENT: dict[tuple, str] = {}


def content_digest(path: str | Path) -> str:
    """sha256 of a weight file's or folder's contents (every file but hidden ones, by relative
    path, size and bytes), hashed once per process while no file's size or time changes."""
    from driftmatrix.checkpoints import file_digest

    root = Path(path).resolve()
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob("*") if p.is_file() and not any(s.startswith(".") for s in p.relative_to(root).parts))
    stats = tuple((p.relative_to(root).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if (root, stats) not in _CONTENT:
        _CONTENT[root, stats] = hashlib.sha256("\n".join(
            f"{rel}:{size}:{file_digest(p)}" for (rel, size, _), p in zip(stats, files)).encode()).hexdigest()
    return _CONTENT[root, stats]


@dataclass(frozen=True)
class Environment:
    """What computed a unit: the keyed part (precision, device kind, threads on CPU, libraries)
    and, recorded only, the hardware."""

    precision: str
    device: str  # device kind: cpu | cuda
    threads: int | None  # torch threads on CPU (they change the bits); None on a GPU
    libraries: Mapping[str, str] = field(default_factory=dict)
    hardware: str = ""

    def keyed(self) -> dict[str, Any]:
        return {"precision": self.precision, "device": self.device, "threads": self.threads,
                "libraries": dict(sorted(self.libraries.items()))}

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "libraries": dict(self.libraries)}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> "Environment":
        return cls(str(raw["precision"]), str(raw["device"]), raw.get("threads"),
                   dict(raw.get("libraries") or {}), str(raw.get("hardware", "")))

    def differences(self, other: "Environment") -> list[str]:
        """``field: ours != theirs`` for every keyed field that differs."""
        a, b = self.keyed(), other.keyed()
        return [f"{k}: {a[k]!r} != {b[k]!r}" for k in a if a[k] != b[k]]


def cpu_hardware() -> str:
    """``<arch> <instruction set torch dispatches to> (<CPU model>)``, e.g. ``x86_64 AVX2 (AMD EPYC)``."""
    import torch

    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "?")()
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("model name", "Model", "Hardware"):
                model = value.strip()
                break
    except OSError:
        model = platform.processor()
    return f"{platform.machine()} {capability}" + (f" ({model})" if model else "")


def hardware(device) -> str:
    """What computes on ``device``: the GPU's name, or the CPU's instruction set and model."""
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        return f"cuda {torch.cuda.get_device_name(device)} (capability {torch.cuda.get_device_capability(device)})"
    return cpu_hardware()


def resolve_environment(precision: str, device: str, threads: int, *, remote_gpus: bool = False) -> Environment:
    """The environment of ``train.precision`` / ``train.device`` on this machine (the driver's).

    ``remote_gpus``: units run as Ray tasks that each ask for a GPU, so ``device: auto`` means CUDA
    even where the driver itself has none; ``precision: auto`` then needs the driver to see one
    (else fp32, logged), so set bf16 or fp32 explicitly for such clusters.
    """
    from driftmatrix.config import ConfigError
    from driftmatrix.precision import resolve_device, resolve_precision

    if remote_gpus and (device == "auto" or device.startswith("cuda")):
        kind, here = "cuda", "cuda (Ray workers)"
        try:
            resolved = resolve_precision(precision, resolve_device(device if device != "auto" else "cuda"))
        except ConfigError:  # the driver sees no GPU: it cannot probe the workers' bf16 units
            resolved = "bf16" if precision == "bf16" else "fp32"
    else:
        dev = resolve_device(device)
        kind, resolved, here = dev.type, resolve_precision(precision, dev), hardware(dev)
    return Environment(resolved, kind, threads if kind == "cpu" else None, library_versions(), here)
