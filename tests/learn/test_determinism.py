"""Determinism: the same configuration run twice on CPU, into two fresh output folders (data
generated afresh, separate MLflow stores, the global random states disturbed in between), gives
bit-identical matrices, scores and weights."""

from __future__ import annotations

import json
import random

import numpy as np
import torch

from driftmatrix.config import to_raw
from driftmatrix.stages import matrices
from testkit.pipeline import Paths, prepare, train_and_evaluate
from tinyparams import make_tiny_params

MODELS = {"MLP-S": {}, "Prior": {}}


def test_same_configuration_twice_gives_bit_identical_matrices(tmp_path, tiny_run, monkeypatch):
    """The first run is the session's ``tiny_run`` (the same params, CPU; CNN-S beside them changes
    nothing of these two models); the second one runs here, its own data and store."""
    a = tiny_run.paths
    torch.manual_seed(12345), np.random.seed(12345), random.seed(12345)  # nothing may lean on these
    torch.rand(7), np.random.rand(7), random.random()
    root = tmp_path / "b"
    params = make_tiny_params(root, models=MODELS, train={"device": "cpu"},
                              tracking={"log_models": True, "register": True})
    assert {**to_raw(params), "dataset": None, "tracking": None, "models": None} == \
        {**to_raw(tiny_run.params), "dataset": None, "tracking": None, "models": None}
    assert {m: tiny_run.params.models[m] for m in MODELS} == params.models
    monkeypatch.setenv("MLFLOW_TRACKING_URI", params.tracking.uri)
    b = Paths(root / "outputs")
    prepare(params, b, generate=True)
    train_and_evaluate(params, b)
    matrices.run(params, b.scores, b.matrices, slices_dir=b.slices)
    for model in MODELS:
        ma, mb = (json.loads((p.matrices / f"{model}.json").read_text()) for p in (a, b))
        values = np.array(ma["seed_values"], dtype=float)
        assert values.shape == (2, 4, 4) and np.isfinite(values).all()
        assert ma["seed_values"] == mb["seed_values"], model  # exact floats, not approximately
        assert ma["values"] == mb["values"]
        scores = sorted(p for p in (a.scores / model).glob("*.json") if p.name != "environment.json")
        assert len(scores) == 8
        for path in scores:  # same unit keys, same cells, same numbers
            assert json.loads(path.read_text())["cells"] == json.loads((b.scores / model / path.name).read_text())["cells"]
        weights = sorted((a.checkpoints / model).glob("*/model.safetensors"))
        assert len(weights) == 8
        for path in weights:
            assert path.read_bytes() == (b.checkpoints / path.relative_to(a.checkpoints)).read_bytes()
    assert (a.matrices / "MLP-S.json").read_bytes() != b"" and \
        json.loads((a.matrices / "MLP-S.json").read_text())["seed_values"] != \
        json.loads((a.matrices / "Prior.json").read_text())["seed_values"]  # the models do differ
