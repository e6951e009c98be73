"""``driftmatrix status``: per model a K x S grid of units (``#`` done, ``~`` stale, ``.`` missing),
the cells still to score and what ``dvc repro`` would do, from the plan and the files on disk
only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from driftmatrix.config import Params
from driftmatrix.units.plan import ModelPlan

DONE, STALE, MISSING = "#", "~", "."


@dataclass(frozen=True)
class ModelStatus:
    model: str
    plan: ModelPlan
    grid: tuple[tuple[str, ...], ...]  # K rows (cutoffs) x S columns (seeds)
    to_train: int
    cells_total: int
    cells_to_score: int
    stale_files: int  # checkpoints on disk outside the plan

    @property
    def done(self) -> int:
        return sum(row.count(DONE) for row in self.grid)


def model_status(plan: ModelPlan, trained: Mapping[str, tuple[str, int]], scored: Mapping[str, set[str]],
                 hashes: Sequence[str]) -> ModelStatus:
    """Pure: ``trained`` maps checkpoint keys to their (cutoff, seed) slot, ``scored`` unit keys to cells."""
    current = {u.key for u in plan.units}
    occupied = {slot for key, slot in trained.items() if key not in current}
    grid = []
    for i, label in enumerate(plan.labels):
        row = []
        for seed in plan.seeds:
            unit = plan.unit(seed, i)
            row.append(DONE if unit.key in trained else STALE if (label, seed) in occupied else MISSING)
        grid.append(tuple(row))
    to_score = sum(1 for u in plan.units for c in plan.cells(u, hashes) if c.key not in scored.get(u.key, ()))
    to_train = sum(row.count(STALE) + row.count(MISSING) for row in grid)
    return ModelStatus(plan.model, plan, tuple(grid), to_train, len(plan.units) * len(hashes), to_score,
                       len(set(trained) - current))


def render(status: ModelStatus) -> str:
    """The grid and the model's line of what ``dvc repro`` would do."""
    plan = status.plan
    width = max(len(lab) for lab in plan.labels)
    lines = [f"{status.model} ({plan.window.name} window): {status.done}/{len(plan.units)} units done, "
             f"{status.to_train} to train, {status.cells_to_score}/{status.cells_total} cells to score"
             + (f", {status.stale_files} stale checkpoints ignored" if status.stale_files else ""),
             f"  {'cutoff':>{width}}  seeds " + " ".join(str(s) for s in plan.seeds)]
    for label, row in zip(plan.labels, status.grid):
        lines.append(f"  {label:>{width}}        " + " ".join(c.rjust(len(str(s))) for c, s in zip(row, plan.seeds)))
    return "\n".join(lines)


def would_do(statuses: Sequence[ModelStatus]) -> list[str]:
    """What ``dvc repro`` would run for these models (stages in dvc.yaml)."""
    out = []
    for s in statuses:
        if s.to_train:
            out.append(f"train@{s.model}: train {s.to_train} units")
        if s.cells_to_score:
            out.append(f"evaluate@{s.model}: score {s.cells_to_score} cells")
    if out:
        out.append("matrices: rebuild matrices, report and metrics")
    return out or ["nothing to train or score: matrices are current"]


def read_status(params: Params, slices_dir: str | Path, checkpoints_dir: str | Path,
                scores_dir: str | Path) -> list[ModelStatus]:
    """The status of every configured model from the slices manifest and the files on disk."""
    from driftmatrix.units.store import ScoreStore
    from driftmatrix.data.table import read_manifest
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.plan import model_plan
    from driftmatrix.units.plan import slice_hashes

    manifest = read_manifest(slices_dir)
    hashes = slice_hashes(manifest)
    out = []
    for model in params.models:
        # keyed as the train stage keyed them; before any training, as it would on this machine
        env = recorded_environment(params, model, checkpoints_dir, resolve_if_missing=True)
        plan = model_plan(params, model, manifest, env)
        ckpts, scores = CheckpointStore(checkpoints_dir, model), ScoreStore(scores_dir, model)
        trained = {}
        for key in ckpts.keys():
            record = ckpts.read_record(key)
            if record is not None:
                trained[key] = (str(record["unit"]["cutoff"]), int(record["unit"]["seed"]))
        scored = {u.key: set(scores.read(u.key)["cells"]) for u in plan.units}
        out.append(model_status(plan, trained, scored, hashes))
    return out
