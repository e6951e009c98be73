"""A small fading-cue dataset with CNN-S and MLP-S checkpoints trained through an early year.

Built once per module through the real path (generate -> ingest -> slice -> Experiment.train_unit),
with checkpoints, sidecars and MLflow runs laid out as the train stage leaves them, in a temporary
folder and a temporary MLflow store.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from driftmatrix.config import parse_params

CUTOFF = 2  # trained on slices 0..2, where the local cue still has contrast 1 .. 0.71
MODELS = ("CNN-S", "MLP-S")


def small_raw(tmp, **extra):
    return {
        "dataset": {"name": "fading", "path": str(tmp / "raw")},
        "synthetic": {"scenario": "fading-cue", "years": 8, "per_year": 150},
        "train": {"seeds": [0], "epochs": 6, "device": "cpu"},
        "models": {m: {} for m in MODELS},
        "tracking": {"experiment": "explain-test", "log_models": False, "register": False},
        **extra}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.data import synthetic
    from driftmatrix.stages import ingest
    from driftmatrix.stages.evaluate import sync
    from driftmatrix.stages.train import train_units
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.experiment import Experiment

    tmp = tmp_path_factory.mktemp("explain")
    torch.set_num_threads(2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        raw = small_raw(tmp)
        params = parse_params(raw)
        synthetic.write_dataset(params.synthetic, tmp / "raw")
        ingest.run(params, tmp / "ingested")
        slice_stage.run(params, tmp / "ingested", tmp / "slices")
        for model in MODELS:  # one unit per model, stored and tracked as the train stage does
            exp = Experiment(params, model, tmp / "slices")
            store = CheckpointStore(tmp / "checkpoints", model)
            train_units(exp, store, [exp.plan.unit(0, CUTOFF)])
            sync(params, exp, store)
        yield SimpleNamespace(tmp=tmp, raw=raw, params=params, labels=exp.labels, cutoff=CUTOFF, models=MODELS)
