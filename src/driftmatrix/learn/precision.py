"""Numeric precision of training and inference: ``auto`` takes bf16 only where it is fast.

Without bf16 matrix units (AMX-BF16, AVX512-BF16, a CUDA bf16 GPU) PyTorch emulates bf16 more slowly
than fp32, so bf16 there falls back to fp32 with a warning."""

from __future__ import annotations

import logging
from pathlib import Path

from driftmatrix.config import PRECISIONS, ConfigError

log = logging.getLogger(__name__)

# /proc/cpuinfo flags of x86 bf16 matrix units (Intel Sapphire Rapids+, AMD Zen 4+)
CPU_BF16_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})
CPUINFO = Path("/proc/cpuinfo")


def device_type(device) -> str:
    """``"cpu"``, ``"cuda"``, ... from a torch.device or a string such as ``"cuda:1"``."""
    return getattr(device, "type", None) or str(device).split(":", 1)[0]


def cpuinfo_flags(path: Path | None = None) -> frozenset[str] | None:
    """The CPU feature flags of the first processor in ``path``, or None where it is unreadable."""
    try:
        text = (path or CPUINFO).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return None


def torch_cpu_bf16() -> bool:
    """PyTorch's own probe of AVX512-BF16 / AMX (private helpers; False where they are missing)."""
    import torch

    probes = (getattr(torch.cpu, "_is_avx512_bf16_supported", None),
              getattr(torch.cpu, "_is_amx_tile_supported", None))
    return any(bool(p()) for p in probes if p is not None)


def cpu_has_bf16_units() -> bool:
    """True when the CPU has AMX-BF16 or AVX512-BF16 (cpuinfo flags, else PyTorch's probe)."""
    flags = cpuinfo_flags()
    if flags is not None:
        return bool(flags & CPU_BF16_FLAGS)
    return torch_cpu_bf16()


def cuda_has_bf16() -> bool:
    import torch

    return bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported())


def has_bf16_units(device) -> bool:
    """Whether ``device`` runs bf16 matrix products natively."""
    kind = device_type(device)
    if kind == "cpu":
        return cpu_has_bf16_units()
    if kind == "cuda":
        return cuda_has_bf16()
    return False


def resolve_device(name: str = "auto"):
    """``train.device`` as a torch device: ``auto`` is a CUDA GPU when torch sees one, else the CPU."""
    import torch

    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"train.device: expected auto, cpu or cuda[:N], got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"train.device: {name!r}, but torch sees no CUDA GPU here (use auto or cpu)")
    return device


def resolve_precision(requested: str, device) -> str:
    """``fp32`` or ``bf16`` for ``device``: bf16 only where the hardware has bf16 matrix units."""
    if requested not in PRECISIONS:
        raise ValueError(f"params.yaml: train.precision must be one of {', '.join(PRECISIONS)}, "
                         f"got {requested!r}")
    if requested == "fp32":
        return "fp32"
    if has_bf16_units(device):
        return "bf16"
    if requested == "bf16":
        log.warning("train.precision bf16 asked for, but %s has no bf16 matrix units "
                    "(emulated bf16 is slower than fp32): using fp32", device_type(device))
    return "fp32"
