"""A small fading-cue dataset with CNN-S and MLP-S checkpoints trained through an early year.

Built once per module through the real path (generate -> ingest -> slice -> Experiment.train_unit),
with checkpoints, sidecars and MLflow runs laid out as the train stage leaves them, in a temporary
folder and a temporary MLflow store.
"""

from __future__ import annotations

import json
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
    from driftmatrix import slicing, tracking
    from driftmatrix.data import ingest, synthetic
    from driftmatrix.training import Experiment, unit_paths

    tmp = tmp_path_factory.mktemp("explain")
    torch.set_num_threads(2)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow.db'}")
        raw = small_raw(tmp)
        params = parse_params(raw)
        synthetic.write_dataset(params.synthetic, tmp / "raw")
        ingest.run(params, tmp / "ingested")
        slicing.run(params, tmp / "ingested", tmp / "slices")
        exp_id = tracking.configure(params.tracking)
        for model in MODELS:
            exp = Experiment(params, model, tmp / "slices")
            key = exp.unit_key(0, CUTOFF)
            with tracking.start_unit_run(exp_id, key, {"model": model}) as run:
                net, _, _ = exp.train_unit(0, CUTOFF)
            ckpt, sidecar = unit_paths(tmp / "checkpoints", model, 0, CUTOFF)
            ckpt.parent.mkdir(parents=True, exist_ok=True)
            torch.save(net.state_dict(), ckpt)
            sidecar.write_text(json.dumps({"config_key": key.config_key, "run_id": run.info.run_id}))
        yield SimpleNamespace(tmp=tmp, raw=raw, params=params, labels=exp.labels, cutoff=CUTOFF, models=MODELS)
