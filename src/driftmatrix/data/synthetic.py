"""Built-in procedural "yearbook": 32x32 portraits over decades of years, no download needed.

Two cues carry the label: a weak global cue (the oval's shape and tint) that persists, and a tiny
high-contrast local texture, easy for pooled convolutions and hard for an MLP, whose contrast moves
from ``cue_start`` to ``cue_end`` over ``span`` years: ``fading-cue`` fades it, the paper's
mechanism for CNNs decaying fastest. Scenarios add covariate drift, label shift and concept drift
(``flip_at``). Year y draws from its own generator seeded from (seed, y)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from driftmatrix.config import ConfigError, SyntheticConfig

CUE = 4  # side of the local texture patch, pixels


@dataclass(frozen=True)
class DriftKnobs:
    cue_start: float = 1.0
    cue_end: float = 1.0
    global_strength: float = 1.0
    covariate: float = 0.0  # 0 = no covariate drift, 1 = strong
    p_start: float = 0.5
    p_end: float = 0.5
    flip_at: float | None = None  # fraction of the timeline after which the global cue flips


SCENARIOS: dict[str, DriftKnobs] = {
    "none": DriftKnobs(),
    "fading-cue": DriftKnobs(cue_start=1.0, cue_end=0.0, covariate=0.3),
    "covariate": DriftKnobs(cue_start=0.5, cue_end=0.5, covariate=1.0),
    "label-shift": DriftKnobs(cue_start=0.5, cue_end=0.5, p_start=0.2, p_end=0.8),
    "concept": DriftKnobs(cue_start=0.0, cue_end=0.0, global_strength=2.0, flip_at=0.5),
}


def knobs_for(scenario: str) -> DriftKnobs:
    try:
        return SCENARIOS[scenario]
    except KeyError:
        raise ConfigError(f"synthetic.scenario {scenario!r} is not one of {sorted(SCENARIOS)}") from None


def _patterns() -> np.ndarray:
    """(2, CUE, CUE) local textures in [-1, 1]: stripes for F (0), checkerboard for M (1)."""
    i, j = np.indices((CUE, CUE))
    stripes = np.where(i % 2 == 0, 1.0, -1.0)
    checker = np.where((i + j) % 2 == 0, 1.0, -1.0)
    return np.stack([stripes, checker])


def generate_year(knobs: DriftKnobs, year_frac: float, n: int, rng: np.random.Generator,
                  size: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (uint8, n x size x size x 3) and labels for one year at ``year_frac`` in [0, 1]."""
    p_m = knobs.p_start + (knobs.p_end - knobs.p_start) * year_frac
    labels = (rng.random(n) < p_m).astype(np.int64)
    sign = np.where(labels == 1, 1.0, -1.0)
    if knobs.flip_at is not None and year_frac >= knobs.flip_at:
        sign = -sign
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / (size - 1) - 0.5
    drift = knobs.covariate * (year_frac - 0.5)

    # Global cue: oval aspect and tint, weak and noisy, plus per-image nuisance variation.
    g = knobs.global_strength * 0.06 * sign + rng.normal(0, 0.08, n)
    rx = 0.30 + 0.05 * drift + g
    ry = 0.38 - g * 0.5 + rng.normal(0, 0.02, n)
    cx = rng.normal(0, 0.03, n)
    cy = rng.normal(0, 0.03, n)
    inside = ((xx[None] - cx[:, None, None]) / rx[:, None, None]) ** 2 + \
             ((yy[None] - cy[:, None, None]) / ry[:, None, None]) ** 2 <= 1.0

    background = np.array([0.35, 0.40, 0.50]) + drift * np.array([0.25, 0.05, -0.25])
    skin = np.array([0.75, 0.60, 0.50]) + (knobs.global_strength * 0.02 * sign)[:, None] * np.array([1.0, -0.5, -1.0])
    skin = skin + rng.normal(0, 0.06, (n, 1)) + drift * 0.1
    img = np.empty((n, size, size, 3), np.float32)
    img[:] = background + rng.normal(0, 0.05, (n, 1, 1, 3))
    img = np.where(inside[..., None], skin[:, None, None, :], img)

    # Local cue: class texture at a random spot inside the face region, contrast cue(t).
    strength = knobs.cue_start + (knobs.cue_end - knobs.cue_start) * year_frac
    if strength > 0:
        pats = _patterns()[labels] * 0.35 * strength  # (n, CUE, CUE)
        lo, hi = size // 2 - 6, size // 2 + 6 - CUE
        oy = rng.integers(lo, hi + 1, n)
        ox = rng.integers(lo, hi + 1, n)
        for k in range(n):
            img[k, oy[k]:oy[k] + CUE, ox[k]:ox[k] + CUE, :] += pats[k][..., None]

    img += rng.normal(0, 0.06, img.shape).astype(np.float32)
    return (np.clip(img, 0, 1) * 255).round().astype(np.uint8), labels


def drift_position(k: int, span: int) -> float:
    """Where year ``first_year + k`` sits on the drift schedule, in [0, 1], by absolute year:
    appending a year leaves every earlier image byte-identical, so a new period costs only its
    units."""
    return min(k / max(span - 1, 1), 1.0)


def generate(cfg: SyntheticConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """All images, labels and years of the configured dataset, in year order."""
    knobs = knobs_for(cfg.scenario)
    images, labels, years = [], [], []
    for k in range(cfg.years):
        year = cfg.first_year + k
        rng = np.random.default_rng([cfg.seed, year])
        frac = drift_position(k, cfg.span)
        x, y = generate_year(knobs, frac, cfg.per_year, rng, cfg.size)
        images.append(x)
        labels.append(y)
        years.append(np.full(cfg.per_year, year))
    return np.concatenate(images), np.concatenate(labels), np.concatenate(years)


def cue_region(size: int = 32) -> tuple[slice, slice]:
    """Rows and columns that can hold the local cue (for saliency checks)."""
    lo, hi = size // 2 - 6, size // 2 + 6
    return slice(lo, hi), slice(lo, hi)


def write_builtin(source: str, cfg, target: str | Path, force: bool = False) -> tuple[str, int]:
    """The built-in dataset in the format ``dataset.source`` reads; returns (what, how many)."""
    from driftmatrix.data import synthetic_text

    if source in synthetic_text.WRITERS:
        return f"{source} text", synthetic_text.WRITERS[source](cfg, target, force=force)
    if source == "table":  # a customer table with covariate and concept drift (synthetic_table)
        from driftmatrix.data import synthetic_table

        return "table", synthetic_table.write_table(cfg, target, force=force)
    return "yearbook", write_dataset(cfg, target, force=force)


def write_dataset(cfg: SyntheticConfig, root: str | Path, force: bool = False) -> int:
    """Write ``root/{F,M}/<year>_synthetic_<n>.png``, skipped when the folder already holds exactly those."""
    from PIL import Image

    root = Path(root)
    images, labels, years = generate(cfg)
    names = [root / ("M" if y else "F") / f"{yr}_synthetic_{k:05d}.png"
             for k, (y, yr) in enumerate(zip(labels, years))]
    stamp = root / ".complete"
    expected = f"{cfg}\n{len(names)}"
    if not force and stamp.exists() and stamp.read_text() == expected:
        return len(names)
    for cls in ("F", "M"):
        (root / cls).mkdir(parents=True, exist_ok=True)
        for stale in (root / cls).glob("*_synthetic_*.png"):
            stale.unlink()
    for path, img in zip(names, images):
        Image.fromarray(img).save(path, optimize=False, compress_level=6)
    stamp.write_text(expected)
    return len(names)
