"""Tabular units through the Ray executor: the same keys and bit-identical matrices as local."""

from __future__ import annotations

import json

import numpy as np
from testkit.tables import make_table_params

from driftmatrix.stages import matrices
from testkit.pipeline import Paths, prepare, train_and_evaluate

MODELS = {"LogReg": {}, "HistGBT": {}, "LightGBM": {}}


def run(tmp, executor):
    params = make_table_params(tmp / executor, models=MODELS, runtime={"executor": executor, "max_retries": 2})
    paths = Paths(tmp / executor / "out")
    prepare(params, paths, generate=True)
    train_and_evaluate(params, paths)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    keys = {m: sorted(p.parent.name for p in (paths.checkpoints / m).glob("*/unit.json")) for m in MODELS}
    return keys, {m: json.loads((paths.matrices / f"{m}.json").read_text()) for m in MODELS}


def test_tabular_units_on_ray_match_local_bit_for_bit(tmp_path, ray_cluster):
    local_keys, local = run(tmp_path, "local")
    ray_keys, distributed = run(tmp_path, "ray")
    assert local_keys == ray_keys and all(len(k) == 5 for k in local_keys.values())
    for model in MODELS:
        a, b = (np.array(d[model]["seed_values"], dtype=float) for d in (local, distributed))
        assert a.shape == (1, 5, 5) and np.isfinite(a).all()
        assert np.array_equal(a, b), model
