"""The normalised table every data source produces and the slicing stage consumes.

``IngestResult.table`` has one row per kept record: ``id``, ``timestamp`` (UTC), ``period``,
``source`` (``file:line``); the input (``text``; pixels in ``IngestResult.images``, row for row; or
one :func:`feature_column` per feature) and the label columns of ``DatasetMeta.label_columns``.
Every record read but not kept is counted in an :class:`IngestReport` with its reason."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driftmatrix.errors import DataError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd

TASKS = ("binary", "multiclass", "multilabel", "regression")
INPUT_KINDS = ("image", "text", "table")
FEATURE_PREFIX = "feat:"
BASE_COLUMNS = ("id", "timestamp", "period", "source")
MAX_EXAMPLES = 5


def feature_column(name: str) -> str:
    """Column holding feature ``name``, prefixed so it cannot clash with ``id``, ``label``, ``slice``."""
    return FEATURE_PREFIX + name


@dataclass(frozen=True)
class DatasetMeta:
    name: str
    task: str
    input_kind: str
    label_columns: tuple[str, ...] = ("label",)
    class_names: tuple[str, ...] = ()
    period: str = "year"
    numeric: tuple[str, ...] = ()  # feature tables: numeric features, in column order
    categorical: tuple[str, ...] = ()  # feature tables: categorical features

    @property
    def features(self) -> tuple[str, ...]:
        return (*self.numeric, *self.categorical)

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise DataError(f"dataset {self.name!r}: task {self.task!r} not in {TASKS}")
        if self.input_kind not in INPUT_KINDS:
            raise DataError(f"dataset {self.name!r}: input kind {self.input_kind!r} not in {INPUT_KINDS}")

    @property
    def num_outputs(self) -> int:
        """Width of a model's output layer for this task."""
        if self.task == "regression":
            return 1
        if self.task == "multilabel":
            return len(self.label_columns)
        return max(2, len(self.class_names))

    @property
    def metric(self) -> str:
        return {"binary": "accuracy", "multiclass": "accuracy", "multilabel": "macro_auc",
                "regression": "balanced_mse"}[self.task]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DatasetMeta":
        d = dict(d)
        d["label_columns"] = tuple(d.get("label_columns", ("label",)))
        d["class_names"] = tuple(d.get("class_names", ()))
        d["numeric"] = tuple(d.get("numeric", ()))
        d["categorical"] = tuple(d.get("categorical", ()))
        return cls(**d)


@dataclass
class IngestReport:
    """Counts of records read, kept and dropped (by reason, with the first offending locations)."""

    strict: bool = False
    read: int = 0
    kept: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)
    per_period: Counter = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    not_sampled: int = 0  # valid records left out by a sampling rule (not a drop, never strict)
    missing: Counter = field(default_factory=Counter)  # feature tables: missing values per feature

    def drop(self, reason: str, location: str, detail: str = "") -> None:
        """Record one dropped record; in strict mode raise instead."""
        where = f"{location}: {detail}" if detail else location
        if self.strict:
            raise DataError(f"{where} (dropped: {reason}; strict mode turns drops into errors)")
        self.dropped[reason] += 1
        ex = self.examples.setdefault(reason, [])
        if len(ex) < MAX_EXAMPLES:
            ex.append(where)

    @property
    def total_dropped(self) -> int:
        return sum(self.dropped.values())

    def to_dict(self) -> dict[str, Any]:
        return {
            "read": self.read,
            "kept": self.kept,
            "dropped_total": self.total_dropped,
            "not_sampled": self.not_sampled,
            "dropped": dict(sorted(self.dropped.items())),
            "examples": self.examples,
            "per_period": dict(sorted(self.per_period.items())),
            "missing": dict(self.missing),
            "notes": self.notes,
        }

    def summary(self) -> str:
        head = f"records read {self.read}, kept {self.kept}, dropped {self.total_dropped}"
        if self.not_sampled:
            head += f", not sampled {self.not_sampled}"
        lines = [head]
        for reason, n in sorted(self.dropped.items(), key=lambda kv: (-kv[1], kv[0])):
            first = ", ".join(self.examples.get(reason, [])[:2])
            lines.append(f"  dropped {n:>8} {reason:<24} e.g. {first}")
        if self.per_period:
            periods = sorted(self.per_period.items())
            shown = ", ".join(f"{k}: {v}" for k, v in periods[:3])
            more = f", ... {periods[-1][0]}: {periods[-1][1]}" if len(periods) > 3 else ""
            lines.append(f"  kept per period ({len(periods)} periods): {shown}{more}")
        if any(self.missing.values()):
            lines.append("  missing values: " + ", ".join(f"{c} {n}" for c, n in self.missing.items() if n))
        lines.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(lines)


@dataclass
class IngestResult:
    table: "pd.DataFrame"
    meta: DatasetMeta
    report: IngestReport
    images: "np.ndarray | None" = None

    def validate(self) -> None:
        """Check the contract above; raises DataError naming the column."""
        missing = [c for c in (*BASE_COLUMNS, *self.meta.label_columns) if c not in self.table]
        if self.meta.input_kind == "text" and "text" not in self.table:
            missing.append("text")
        missing += [feature_column(f) for f in self.meta.features if feature_column(f) not in self.table]
        if missing:
            raise DataError(f"dataset {self.meta.name!r}: normalised table lacks column(s) {missing}")
        if self.meta.input_kind == "image":
            if self.images is None or len(self.images) != len(self.table):
                raise DataError(f"dataset {self.meta.name!r}: images must align with table rows")
        if self.table["id"].duplicated().any():
            dup = self.table.loc[self.table["id"].duplicated(), "id"].iloc[0]
            raise DataError(f"dataset {self.meta.name!r}: duplicate id {dup!r} in normalised table")


def save_ingested(result: IngestResult, outdir: str | Path) -> Path:
    """Write table.parquet, images.npy (image data), meta.json and report.json to ``outdir``."""
    import numpy as np

    result.validate()
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    result.table.reset_index(drop=True).to_parquet(outdir / "table.parquet", index=False)
    if result.images is not None:
        np.save(outdir / "images.npy", result.images)
    (outdir / "meta.json").write_text(json.dumps(result.meta.to_dict(), indent=2))
    (outdir / "report.json").write_text(json.dumps(result.report.to_dict(), indent=2))
    return outdir


def load_ingested(indir: str | Path) -> IngestResult:
    import numpy as np
    import pandas as pd

    indir = Path(indir)
    if not (indir / "table.parquet").exists():
        raise DataError(f"{indir}: no table.parquet (run the ingest stage first)")
    meta = DatasetMeta.from_dict(json.loads((indir / "meta.json").read_text()))
    table = pd.read_parquet(indir / "table.parquet")
    images = np.load(indir / "images.npy", allow_pickle=False) if (indir / "images.npy").exists() else None
    report_d = json.loads((indir / "report.json").read_text()) if (indir / "report.json").exists() else {}
    report = IngestReport(read=report_d.get("read", len(table)), kept=report_d.get("kept", len(table)),
                          dropped=Counter(report_d.get("dropped", {})),
                          examples=report_d.get("examples", {}),
                          per_period=Counter(report_d.get("per_period", {})),
                          notes=list(report_d.get("notes", [])),
                          not_sampled=report_d.get("not_sampled", 0), missing=Counter(report_d.get("missing", {})))
    return IngestResult(table=table, meta=meta, report=report, images=images)


def read_manifest(slices_dir: str | Path) -> dict[str, Any]:
    """The ``manifest.json`` of a slices folder; a clear error when the slice stage has not run."""
    path = Path(slices_dir) / "manifest.json"
    if not path.exists():
        raise DataError(f"{slices_dir}: no manifest.json (run `driftmatrix slice` first)")
    return json.loads(path.read_text())
