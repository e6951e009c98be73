"""Units of work and drift-matrix cells, keyed by exactly what they read (pure; no I/O).

- A **unit** is one (dataset, model, cutoff, seed) training job. Its key hashes the model's
  identity, the training settings that change its numbers (:data:`UNIT_SETTINGS`: not the seed
  list, evaluation batch size or tracking settings), its seed, the content hashes of the slices
  in its window (not the window's name: the same rows train the same model), the digest of the
  code on its training path and its resolved environment (``driftmatrix.units.provenance``). Appending
  a later slice therefore changes no earlier unit's key, adding a seed adds only that seed's
  units, late rows in slice j change exactly the units whose window holds j, and a changed
  statement on a model's training path changes exactly that model's units.
- A **cell** is one score M[i, j] of a unit: its key adds slice j's content hash, which
  evaluation set it reads (the test split for j <= i, the whole slice for j > i) and how it is
  scored (metric, score format, scoring code).
- The **plan** of a model is every unit and cell of the current configuration. The train,
  evaluate, status and matrices stages all read it; whatever else is on disk is stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from driftmatrix.config import ConfigError, TrainConfig, fingerprint

#: TrainConfig fields that change a trained model's numbers (and so its key). Precision and device
#: enter resolved, through the environment; the window through the slices it spans.
UNIT_SETTINGS = ("epochs", "batch_size", "lr", "weight_decay", "grad_clip", "optimizer", "dropout")
#: Bump when the key's own recipe changes (code changes are keyed by digest). 4: the code digest
#: covers the definitions a unit reaches (provenance.reach), no longer whole modules.
UNIT_FORMAT = 4


@dataclass(frozen=True)
class Window:
    """Which slices a cutoff trains on: ``cumulative`` (the paper), ``sliding`` N, or ``single``."""

    kind: str = "cumulative"
    size: int | None = None

    def slices(self, cutoff: int) -> range:
        if self.kind == "cumulative":
            return range(0, cutoff + 1)
        if self.kind == "single":
            return range(cutoff, cutoff + 1)
        return range(max(0, cutoff - self.size + 1), cutoff + 1)

    @property
    def name(self) -> str:
        return f"sliding-{self.size}" if self.kind == "sliding" else self.kind


def parse_window(value: Any, where: str = "train.window") -> Window:
    """``cumulative`` | ``single`` | ``{sliding: N}`` | ``sliding-N`` -> :class:`Window`."""
    if isinstance(value, Window):
        return value
    if isinstance(value, Mapping) and set(value) == {"sliding"}:
        size = value["sliding"]
    elif isinstance(value, str) and value in ("cumulative", "single"):
        return Window(value)
    elif isinstance(value, str) and value.startswith("sliding"):
        size = value.removeprefix("sliding").lstrip(":- ")
    else:
        raise ConfigError(f"params.yaml: {where} must be cumulative, single or {{sliding: N}}, got {value!r}")
    try:
        size = int(size)
    except (TypeError, ValueError):
        raise ConfigError(f"params.yaml: {where}: sliding needs a whole number of periods, got {size!r}") from None
    if size < 1:
        raise ConfigError(f"params.yaml: {where}: sliding window must be >= 1 period, got {size}")
    return Window("sliding", size)


def unit_settings(cfg: TrainConfig) -> dict[str, Any]:
    """The part of a model's training config that its key depends on."""
    return {name: getattr(cfg, name) for name in UNIT_SETTINGS}


@dataclass(frozen=True)
class Unit:
    dataset: str
    model: str
    family: str
    seed: int
    cutoff_index: int
    cutoff: str
    window: tuple[int, ...]  # slice indices it trains on
    key: str

    @property
    def slot(self) -> tuple[str, str, int]:
        """What a redone unit replaces: the same model, cutoff label and seed."""
        return self.model, self.cutoff, self.seed

    def tags(self) -> dict[str, str]:
        return {"kind": "cutoff", "dataset": self.dataset, "model": self.model, "family": self.family,
                "cutoff": self.cutoff, "cutoff_index": str(self.cutoff_index), "seed": str(self.seed),
                "unit_key": self.key}


@dataclass(frozen=True)
class Cell:
    unit_key: str
    j: int
    label: str
    evalset: str  # "test" (j <= cutoff) or "all" (j > cutoff)
    key: str


def evalset(cutoff: int, j: int) -> str:
    return "test" if j <= cutoff else "all"


def cell_key(unit_key: str, slice_hash: str, which: str, scoring: Mapping[str, Any] | None = None) -> str:
    return fingerprint("cell", unit_key, slice_hash, which, dict(scoring or {}))


@dataclass(frozen=True)
class ModelPlan:
    """Every unit and cell of one model under the current configuration."""

    model: str
    seeds: tuple[int, ...]
    labels: tuple[str, ...]
    window: Window
    units: tuple[Unit, ...]  # seed-major, then cutoff
    code: str = ""  # digest of the training path's code
    env: Mapping[str, Any] | None = None  # the keyed environment (provenance.Environment.keyed)
    scoring: Mapping[str, Any] | None = None  # metric, score format and scoring code of every cell

    def unit(self, seed: int, cutoff: int) -> Unit:
        return self.units[self.seeds.index(seed) * len(self.labels) + cutoff]

    def cells(self, unit: Unit, slice_hashes: Sequence[str]) -> list[Cell]:
        return [Cell(unit.key, j, self.labels[j], evalset(unit.cutoff_index, j),
                     cell_key(unit.key, h, evalset(unit.cutoff_index, j), self.scoring))
                for j, h in enumerate(slice_hashes)]


def plan_model(dataset: str, model: str, family: str, identity: Mapping[str, Any], cfg: TrainConfig,
               slices: Sequence[Mapping[str, Any]], *, code: str = "", env: Mapping[str, Any] | None = None,
               scoring: Mapping[str, Any] | None = None) -> ModelPlan:
    """Units of ``model`` for every seed of ``cfg`` and every cutoff of the ``slices`` manifest.

    ``identity`` describes the model itself (registry name, architecture description, encoder
    cache identity); ``slices`` are the manifest's slice records, each with its content ``hash``;
    ``code``, ``env`` and ``scoring``: see :class:`ModelPlan`.
    """
    window = parse_window(cfg.window)
    hashes = [s["hash"] for s in slices]
    labels = tuple(str(s["label"]) for s in slices)
    settings = unit_settings(cfg)
    units = []
    for seed in cfg.seeds:
        for i in range(len(slices)):
            span = tuple(window.slices(i))
            key = fingerprint("unit", UNIT_FORMAT, dict(identity), settings, int(seed),
                              [hashes[k] for k in span], code, dict(env or {}))
            units.append(Unit(dataset, model, family, int(seed), i, labels[i], span, key))
    return ModelPlan(model, tuple(int(s) for s in cfg.seeds), labels, window, tuple(units), code,
                     dict(env or {}), dict(scoring or {}))


def slice_hashes(manifest: Mapping[str, Any], where: str = "outputs/slices/manifest.json") -> list[str]:
    missing = [s["label"] for s in manifest["slices"] if not s.get("hash")]
    if missing:
        raise ConfigError(f"{where}: slices {missing[:3]} have no content hash (re-run `driftmatrix slice`)")
    return [s["hash"] for s in manifest["slices"]]
