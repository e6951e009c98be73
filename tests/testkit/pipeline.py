"""The whole pipeline in one process (what ``dvc repro`` runs stage by stage), for tests and benchmarks."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from driftmatrix.config import Params

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Paths:
    root: Path = Path("outputs")

    @property
    def ingested(self) -> Path:
        return self.root / "ingested"

    @property
    def slices(self) -> Path:
        return self.root / "slices"

    @property
    def validation(self) -> Path:
        return self.root / "validation"

    @property
    def features(self) -> Path:
        return self.root / "features"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def scores(self) -> Path:
        return self.root / "scores"

    @property
    def matrices(self) -> Path:
        return self.root / "matrices"


def prepare(params: Params, paths: Paths, generate: bool = False) -> None:
    """Ingest and slice; with ``generate``, first write the built-in dataset to ``dataset.path``."""
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.data import synthetic
    from driftmatrix.stages import ingest

    if generate:
        synthetic.write_builtin(params.dataset.source, params.synthetic, params.dataset.path)
    ingest.run(params, paths.ingested)
    slice_stage.run(params, paths.ingested, paths.slices)


def train_and_evaluate(params: Params, paths: Paths, models: list[str] | None = None) -> None:
    """Embed what frozen encoders the models need (once per document), then train and score."""
    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import train as train_stage

    from driftmatrix.stages import embed as embed_stage
    models = models or list(params.models)
    embed_stage.run(params, paths.slices, paths.features, models)
    for model in models:
        train_stage.run(params, model, paths.slices, paths.checkpoints, validation_dir=paths.validation,
                     features_dir=paths.features)
        evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores, features_dir=paths.features)


def run_all(params: Params, paths: Paths = Paths(), generate: bool = False) -> None:
    """Every stage in order; the validation gate (as ``dvc repro``'s validate stage) runs before any
    training and raises ``audit.gate.ValidationFailed`` when a critical check fails."""
    from driftmatrix.stages import matrices
    from driftmatrix.stages import report
    from driftmatrix.audit import gate
    from driftmatrix.stages import validate as validate_stage

    prepare(params, paths, generate)
    validate_stage.run(params, paths.slices, paths.validation, echo=lambda text: log.info("%s", text))
    train_and_evaluate(params, paths)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    report.run(paths.matrices, paths.root / "report" / "report.html", audit=paths.root / "audit" / "report.html",
               params=params)
