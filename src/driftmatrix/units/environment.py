"""What computed a unit beyond its code and data: the resolved precision, device kind, CPU threads
(a CPU result depends on them) and the versions of the libraries that compute it.

The train stage resolves it once, records it beside the checkpoints and ships it to every worker,
which checks the key it was handed; later stages read the recorded one, so a key never depends on
which machine runs ``matrices`` or ``status``. Hardware names a unit's runs, not its key."""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from driftmatrix.config import Params, effective_config, runtime_config, unit_threads
from driftmatrix.errors import DataError
from driftmatrix.units.store import CheckpointStore


def resolve_environment(params: Params, model: str) -> Environment:
    """This model's environment, resolved once by the driver of the train stage."""
    precision, device, threads, remote_gpus = asked_environment(params, model)
    return environment_of(precision, device, threads, remote_gpus=remote_gpus)


def asked_environment(params: Params, model: str) -> tuple[str, str, int | None, bool]:
    """What ``model``'s settings ask for: precision, device, CPU threads, and whether Ray units ask for GPUs."""
    cfg, runtime = effective_config(params, model), runtime_config(params)
    res = runtime.resources_for(model)
    return cfg.precision, cfg.device, unit_threads(res), runtime.executor == "ray" and res.num_gpus > 0


def environment_probe(params: Params, model: str) -> str | None:
    """:func:`probe_digest` of ``model``'s settings on this machine, recorded with its environment."""
    return probe_digest(*asked_environment(params, model))


def probed_environment(recorded: Mapping[str, Any] | None, probe: str | None) -> Environment | None:
    """``recorded`` (the train stage's record from last time) where it was resolved under the same
    ``probe`` (then torch need not be imported to resolve it again), else None."""
    if probe is None or recorded is None or recorded.get("probe") != probe:
        return None
    return Environment.from_dict(recorded)


def recorded_environment(params: Params, model: str, checkpoints_dir: str | Path,
                         resolve_if_missing: bool = False) -> Environment:
    """The environment the train stage recorded for ``model`` (before training: ``resolve_if_missing``)."""
    raw = CheckpointStore(checkpoints_dir, model).environment()
    if raw is not None:
        return Environment.from_dict(raw)
    if resolve_if_missing:
        return resolve_environment(params, model)
    raise DataError(f"{Path(checkpoints_dir) / model}: no recorded environment; run `driftmatrix train -m {model}` "
                    f"first")


#: Libraries whose versions change a unit's numbers.
NUMERIC_LIBRARIES = ("torch", "numpy")


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
    from driftmatrix.units.store import file_digest

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
    """What computed a unit: the keyed part (precision, device, CPU threads, libraries) and the hardware."""

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


#: Device files of GPUs torch could use (NVIDIA, AMD ROCm, WSL): where one exists, torch is asked.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")


def probe_digest(precision: str, device: str, threads: int | None, remote_gpus: bool) -> str | None:
    """A digest of all that :func:`environment_of` reads on a machine without GPUs: the settings,
    the library versions, the first processor's model and flags (as :func:`hardware` and the bf16
    check read them) and torch's instruction-set override. None where a GPU may be present or the
    CPU's flags are unknown: torch is asked. Equal digests, equal environments, so a train stage
    with nothing to train needs no torch (1-2 s a process)."""
    from driftmatrix.learn.precision import cpuinfo_flags

    flags = cpuinfo_flags()
    if flags is None or any(Path(f).exists() for f in GPU_DEVICE_FILES):
        return None
    facts = {"asked": [precision, device, threads, remote_gpus], "libraries": library_versions(),
             "machine": platform.machine(), "cpu": [cpu_model(), sorted(flags)],
             "capability": os.environ.get("ATEN_CPU_CAPABILITY", "")}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def cpu_model() -> str:
    """The first processor's model name in /proc/cpuinfo ("" without one), else what ``platform`` says."""
    from driftmatrix.learn.precision import CPUINFO

    try:
        for line in CPUINFO.read_text(errors="replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() in ("model name", "Model", "Hardware"):
                return value.strip()
    except OSError:
        return platform.processor()
    return ""


def hardware(device) -> str:
    """What computes on ``device``: the GPU's name, or ``<arch> <instruction set torch dispatches to>
    (<CPU model>)``, e.g. ``x86_64 AVX2 (AMD EPYC)``."""
    import torch

    if getattr(device, "type", str(device)).startswith("cuda"):
        return f"cuda {torch.cuda.get_device_name(device)} (capability {torch.cuda.get_device_capability(device)})"
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", lambda: "?")()
    model = cpu_model()
    return f"{platform.machine()} {capability}" + (f" ({model})" if model else "")


def environment_of(precision: str, device: str, threads: int, *, remote_gpus: bool = False) -> Environment:
    """The environment of ``train.precision`` / ``train.device`` on this machine (the driver's).
    ``remote_gpus``: Ray units that each ask for a GPU, so ``device: auto`` means CUDA even where
    the driver has none (``precision: auto`` then falls back to fp32 unless the driver sees one)."""
    from driftmatrix.config import ConfigError
    from driftmatrix.learn.precision import resolve_device, resolve_precision

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


#: Libraries a tabular kind computes with besides scikit-learn and skops (scikit-learn's estimators: scipy).
KIND_LIBRARIES = {"LogReg": ("scipy",), "HistGBT": ("scipy",), "Custom": ("scipy",), "LightGBM": ("lightgbm",)}


@functools.cache
def distributions_of(top: str) -> list[str]:
    """The distributions installing top-level module ``top``, as ``metadata.packages_distributions()``
    lists them, read from each one's ``top_level.txt`` or else its RECORD's raw text (that function
    builds a path object for every installed file: 1-3 s a process)."""
    def tops(dist) -> set[str]:
        if listed := (dist.read_text("top_level.txt") or "").split():
            return set(listed)
        record = dist.read_text("RECORD")
        files = (row[0] for row in csv.reader(record.splitlines()) if row) if record else map(str, dist.files or ())
        return {f.split("/", 1)[0] if "/" in f else f[:-3] for f in files if f.endswith(".py")}

    return [dist.metadata["Name"] for dist in metadata.distributions() if top in tops(dist)]


def model_libraries(kind: str, options: Mapping[str, Any]) -> dict[str, str]:
    """Versions of the libraries that compute a tabular model's numbers (scikit-learn, skops, scipy,
    LightGBM, a named estimator's distributions), read from package metadata without import."""
    names = ["scikit-learn", "skops", *KIND_LIBRARIES.get(kind, ())]
    if options.get("estimator"):
        top = str(options["estimator"]).split(".")[0]
        names += distributions_of(top) or [top]
    return {dist: package_version(dist) for dist in sorted(set(names))}


def where() -> dict[str, str]:
    """Where this process computes: ``host`` and, under Ray, ``ray_node``; recorded with each unit."""
    import socket

    out = {"host": socket.gethostname()}
    ray = sys.modules.get("ray")
    if ray is not None:
        with contextlib.suppress(Exception):
            if ray.is_initialized():
                out["ray_node"] = ray.get_runtime_context().get_node_id()
    return out
