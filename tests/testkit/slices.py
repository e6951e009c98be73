"""Synthetic ``outputs/slices/`` folders with drift injected on purpose (tests, benchmark).

Written by hand following docs/CONTRACTS.md, independent of the slicing stage, so the audit can
be tested against known truth:

- label shift: class logits ``label_shift * i * linspace(-1, 1, C)`` in slice ``i`` (counts are
  rounded exactly, so with ``label_shift=0`` every slice has the same label distribution);
- covariate shift, text: each document draws words from a core vocabulary of ``core_words`` words
  starting at offset ``round(covariate_shift * i)`` plus rare filler words; images: pixel means
  move by ``covariate_shift * i`` (out of 255) on top of identical noise statistics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from driftmatrix.data.table import DatasetMeta


def _exact_counts(p: np.ndarray, n: int) -> np.ndarray:
    raw = p * n
    counts = np.floor(raw).astype(int)
    counts[np.argsort(-(raw - counts))[: n - counts.sum()]] += 1
    return counts


def make_slices(k: int = 6, per_slice: int = 200, task: str = "binary", input_kind: str = "text",
                n_classes: int = 2, label_shift: float = 0.0, covariate_shift: float = 0.0,
                seed: int = 0, first_year: int = 2000, image_size: int = 8, core_words: int = 100,
                words_per_doc: int = 30, test_fraction: float = 0.3) -> tuple[pd.DataFrame, dict[str, Any], np.ndarray | None]:
    """(rows, manifest, images) of K yearly slices; rows sorted by (slice, id)."""
    rng = np.random.default_rng(seed)
    if task == "multilabel":
        meta = DatasetMeta(name="synthetic", task=task, input_kind=input_kind,
                           label_columns=tuple(f"label_c{c}" for c in range(n_classes)))
    elif task == "regression":
        meta = DatasetMeta(name="synthetic", task=task, input_kind=input_kind)
        n_classes = 5
    else:
        meta = DatasetMeta(name="synthetic", task=task, input_kind=input_kind,
                           class_names=tuple(f"class{c}" for c in range(n_classes)))
    frames, images, specs = [], [], []
    for i in range(k):
        logits = label_shift * i * np.linspace(-1, 1, n_classes)
        p = np.exp(logits) / np.exp(logits).sum()
        y = rng.permutation(np.repeat(np.arange(n_classes), _exact_counts(p, per_slice)))
        start = pd.Timestamp(f"{first_year + i}-01-01", tz="UTC")
        end = pd.Timestamp(f"{first_year + i + 1}-01-01", tz="UTC")
        seconds = rng.uniform(0, (end - start).total_seconds() - 1, per_slice)
        frame = pd.DataFrame({"id": [f"s{i:03d}-{r:06d}" for r in range(per_slice)],
                              "timestamp": start + pd.to_timedelta(seconds, unit="s"),
                              "period": str(first_year + i), "source": "synthetic", "slice": i})
        if task == "multilabel":  # primary category y plus a second one now and then
            extra = rng.integers(0, n_classes, per_slice) * (rng.random(per_slice) < 0.3)
            for c, col in enumerate(meta.label_columns):
                frame[col] = ((y == c) | ((extra == c) & (extra > 0))).astype(int)
        elif task == "regression":
            frame["label"] = (y + 1).astype(float)
        else:
            frame["label"] = y
        test = np.zeros(per_slice, dtype=bool)
        for c in range(n_classes):  # stratified split
            members = rng.permutation(np.flatnonzero(y == c))
            test[members[: int(round(test_fraction * len(members)))]] = True
        frame["split"] = np.where(test, "test", "train")
        if input_kind == "text":
            offset = int(round(covariate_shift * i))
            core = rng.integers(0, core_words, (per_slice, words_per_doc)) + offset
            frame["text"] = [" ".join(f"word{w}" for w in doc) + f" rare{i}x{r}" for r, doc in enumerate(core)]
        else:
            imgs = rng.normal(100 + covariate_shift * i, 30, (per_slice, image_size, image_size, 3))
            images.append(np.clip(imgs, 0, 255).astype(np.uint8))
        frames.append(frame)
        specs.append({"index": i, "label": str(first_year + i), "start": start.isoformat(), "end": end.isoformat()})
    rows = pd.concat(frames, ignore_index=True)
    manifest = {"dataset": meta.to_dict(), "period": "year", "width": 1, "split_seed": seed,
                "test_fraction": test_fraction, "data_version": f"synthetic-{seed}", "slices": specs, "dropped": []}
    return rows, manifest, (np.concatenate(images) if images else None)


def write_slices(out_dir: str | Path, rows: pd.DataFrame, manifest: dict[str, Any],
                 images: np.ndarray | None = None) -> Path:
    """Write rows.parquet / manifest.json / images.npy; refreshes the manifest's counts from rows."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    specs = []
    for spec in manifest["slices"]:
        frame = rows[rows["slice"] == spec["index"]]
        if meta.task == "multilabel":
            counts = {c.removeprefix("label_"): int(frame[c].sum()) for c in meta.label_columns}
        else:
            counts = {str(k): int(v) for k, v in frame["label"].value_counts().sort_index().items()}
        specs.append({**spec, "n": int(len(frame)), "n_train": int((frame["split"] == "train").sum()),
                      "n_test": int((frame["split"] == "test").sum()), "label_counts": counts})
    rows.to_parquet(out / "rows.parquet", index=False)
    (out / "manifest.json").write_text(json.dumps({**manifest, "slices": specs}, indent=2))
    if images is not None:
        np.save(out / "images.npy", np.asarray(images))
    return out


def gx_formats_agree(slices_dir: str | Path, validation: Mapping[str, Any] | None = None) -> tuple[list, int]:
    """``validate_slices`` records of ``slices_dir`` as the gate makes them (GX's BASIC format first,
    SUMMARY for a suite with a failure), checked equal to those of a runner that validates every
    suite in SUMMARY; (the records, how many suites were validated again in SUMMARY)."""
    from driftmatrix.audit.slices import load_slices
    from driftmatrix.audit.validation import GXRunner, ValidationConfig, validate_slices

    class Counting(GXRunner):
        def __init__(self):
            super().__init__()
            self.formats: list[str] = []

        def _results(self, batch, name, expectations, result_format):
            self.formats.append(result_format["result_format"])
            return super()._results(batch, name, expectations, result_format)

    class SummaryOnly(GXRunner):  # every suite in SUMMARY, as the gate did before BASIC came first
        def validate(self, frame_kind, frame, name, expectations, index_columns, max_examples):
            batch = self.batch_definitions[frame_kind].get_batch(batch_parameters={"dataframe": frame})
            return self._results(batch, name, expectations, self.summary_format(index_columns, max_examples))

    slices, cfg = load_slices(slices_dir), ValidationConfig.from_params(validation)
    runner = Counting()
    got = validate_slices(slices, cfg, runner)
    assert got == validate_slices(slices, cfg, SummaryOnly())
    assert runner.formats.count("BASIC") >= len(slices.specs) * 3  # rows, schema, classes: each suite once
    return got, runner.formats.count("SUMMARY")
