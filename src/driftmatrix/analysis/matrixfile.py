"""Read and write drift-matrix JSON files (docs/CONTRACTS.md, "Matrices").

One reader serves both the published format (``values`` = seed mean, no seeds: read as S = 1
with unknown std) and ours (``seed_values`` S x K x K plus ``std``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from driftmatrix.analysis.families import family_of
from driftmatrix.analysis.summary import as_seed_stack, seed_mean, seed_std


@dataclass
class DriftMatrices:
    model: str
    slices: list[str]
    seed_values: np.ndarray  # (S, K, K), NaN = empty
    metric: str = "Accuracy"
    unit: str = "%"
    higher_is_better: bool = True
    dataset: str = ""
    family: str | None = None
    seeds: list[int] | None = None  # None: published, seeds unknown (already averaged)
    extra: dict = field(default_factory=dict)

    @property
    def mean(self) -> np.ndarray:
        return seed_mean(self.seed_values)

    @property
    def std(self) -> np.ndarray:
        return seed_std(self.seed_values)

    @property
    def n_seeds(self) -> int:
        return int(self.seed_values.shape[0])


def nested_lists(a: np.ndarray, decimals: int = 6):
    """``a`` as nested lists for JSON, rounded (6: far below any printed precision), NaN and inf -> None."""
    if a.ndim == 0:
        v = float(a)
        return round(v, decimals) if math.isfinite(v) else None
    return [nested_lists(x, decimals) for x in a]


def from_dict(d: dict) -> DriftMatrices:
    model = d.get("model") or d.get("title")
    if "seed_values" in d:
        stack = as_seed_stack(d["seed_values"])
    else:
        stack = as_seed_stack(d["values"])
    known = {"model", "title", "slices", "values", "seed_values", "std", "metric", "unit",
             "higherIsBetter", "dataset", "family", "seeds"}
    return DriftMatrices(
        model=model, slices=[str(s) for s in d["slices"]], seed_values=stack,
        metric=d.get("metric", "Accuracy"), unit=d.get("unit", ""),
        higher_is_better=bool(d.get("higherIsBetter", True)), dataset=d.get("dataset", ""),
        family=family_of(model, d.get("family")), seeds=d.get("seeds"),
        extra={k: v for k, v in d.items() if k not in known})


#: Provenance kept beside the published fields (written when the matrices stage sets them).
PROVENANCE = ("window", "precision", "stale", "missing_cells", "n_eval", "unit_keys", "seconds")


def to_dict(m: DriftMatrices) -> dict:
    return {"dataset": m.dataset, "title": m.model, "metric": m.metric, "unit": m.unit,
            "higherIsBetter": m.higher_is_better, "slices": list(m.slices),
            "values": nested_lists(m.mean), "family": m.family, "seeds": m.seeds,
            "std": nested_lists(m.std), "seed_values": nested_lists(m.seed_values),
            **{k: nested_lists(np.asarray(m.extra[k], dtype=float)) if k == "n_eval" else m.extra[k]
               for k in PROVENANCE if k in m.extra}}


def is_matrix_dict(d) -> bool:
    return isinstance(d, dict) and "slices" in d and ("values" in d or "seed_values" in d)


def read(path: str | Path) -> DriftMatrices:
    return from_dict(json.loads(Path(path).read_text()))


def write(m: DriftMatrices, path: str | Path) -> None:
    Path(path).write_text(json.dumps(to_dict(m)))


def load_folder(path: str | Path) -> dict[str, DriftMatrices]:
    """Every drift-matrix JSON in a folder (or one file), sorted by model; other JSON is skipped."""
    path = Path(path)
    files = [path] if path.is_file() else sorted(path.glob("*.json"))
    out: dict[str, DriftMatrices] = {}
    for f in files:
        d = json.loads(f.read_text())
        if is_matrix_dict(d):
            m = from_dict(d)
            out[m.model] = m
    if not out:
        from driftmatrix.data.table import DataError

        raise DataError(f"{path}: no drift-matrix JSON files found (run `driftmatrix matrices` first)")
    return dict(sorted(out.items()))
