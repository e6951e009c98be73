"""The train and evaluate stages through the Ray executor: same numbers, one writer, kills survived."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from driftmatrix.stages import matrices
from driftmatrix.config import replace
from driftmatrix.runtime.executor import KILL_ENV
from testkit.pipeline import Paths, prepare, train_and_evaluate
from driftmatrix.tracking.runs import configure

MODELS = {"MLP-S": {}, "Prior": {}}


def run(tmp, tiny_params, executor, out):
    params = tiny_params(tmp, models=MODELS, tracking={"log_models": True, "register": True,
                                                       "uri": f"sqlite:///{tmp / out}.db", "experiment": out})
    params = replace(params, extra={**params.extra, "runtime": {"executor": executor, "max_retries": 2}})
    paths = Paths(tmp / out)
    prepare(params, paths, generate=True)
    train_and_evaluate(params, paths)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    return params, {m: json.loads((paths.matrices / f"{m}.json").read_text()) for m in MODELS}


def test_ray_and_local_give_bit_identical_matrices(tmp_path, tiny_params, ray_cluster):
    _, local = run(tmp_path, tiny_params, "local", "local")
    _, distributed = run(tmp_path, tiny_params, "ray", "ray")
    for model in MODELS:
        a, b = (np.array(d[model]["seed_values"], dtype=float) for d in (local, distributed))
        assert a.shape == (2, 4, 4) and np.isfinite(a).all()
        assert np.array_equal(a, b), model


def test_a_worker_killed_mid_unit_leaves_one_run_and_one_version_per_unit(tmp_path, tiny_params, ray_cluster,
                                                                          monkeypatch):
    marker = tmp_path / "killed"
    monkeypatch.setenv(KILL_ENV, str(marker))
    params, docs = run(tmp_path, tiny_params, "ray", "killed")
    assert marker.exists()  # a worker did die mid-unit, and Ray retried it
    exp = configure(params.tracking)
    client = MlflowClient()
    for model in MODELS:
        assert np.isfinite(np.array(docs[model]["seed_values"], dtype=float)).all()
        runs = client.search_runs([exp], f"tags.model = '{model}'", run_view_type=ViewType.ALL)
        assert len(runs) == 8 and all(r.info.status == "FINISHED" for r in runs)
        assert len({r.data.tags["unit_key"] for r in runs}) == 8
        versions = client.search_model_versions(f"name = 'tiny.{model}'")
        assert len(versions) == 8 and len({v.tags["unit_key"] for v in versions}) == 8
