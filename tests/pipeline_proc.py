"""A pipeline in a process of its own, as a stage process or a clone's ``dvc repro`` would run it
(tests of clusters and shared tracking servers): ``python tests/pipeline_proc.py PARAMS.yaml
[--upto train|evaluate|all]`` in the project folder; outputs under ``outputs/``."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("params")
    parser.add_argument("--upto", choices=("train", "evaluate", "all"), default="all")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("alembic", "mlflow", "git", "filelock", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)

    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import matrices
    from driftmatrix.stages import train as train_stage
    from driftmatrix.config import load_params
    from testkit.pipeline import Paths, prepare

    params = load_params(Path(args.params))
    paths = Paths(Path("outputs"))
    if not (paths.slices / "manifest.json").exists():
        prepare(params, paths, generate=True)
    for model in params.models:
        train_stage.run(params, model, paths.slices, paths.checkpoints, validation_dir=paths.validation,
                     features_dir=paths.features)
        if args.upto != "train":
            evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores,
                           features_dir=paths.features)
    if args.upto == "all":
        matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)


if __name__ == "__main__":
    main()
