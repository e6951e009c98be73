"""Tabular models through the stages: incremental periods, MLflow runs and registry versions."""

from __future__ import annotations

import json

import pandas as pd
from mlflow.tracking import MlflowClient

from driftmatrix import evaluation, matrices, training
from driftmatrix.pipeline import Paths, prepare

from conftest import make_table_params

MODELS = {"LogReg": {}, "LightGBM": {}, "Prior": {}}


def _stage(tmp_path, years, caplog):
    caplog.set_level("INFO")
    params = make_table_params(tmp_path, models=MODELS, synthetic={"years": years},
                               tracking={"log_models": True, "register": True})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    trained, scored = {}, {}
    for model in params.models:
        caplog.clear()
        trained[model] = training.run(params, model, paths.slices, paths.checkpoints,
                                      validation_dir=paths.validation, features_dir=paths.features)
        evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores, features_dir=paths.features)
        scored[model] = next(m for m in caplog.messages if "cells in the plan" in m)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    return params, paths, trained, scored


def test_adding_a_period_trains_only_the_new_units(tmp_path, caplog):
    caplog.set_level("INFO")
    params, paths, trained, _ = _stage(tmp_path, 4, caplog)
    assert {m: len(t) for m, t in trained.items()} == {m: 4 for m in MODELS}
    hashes = [s["hash"] for s in json.loads((paths.slices / "manifest.json").read_text())["slices"]]
    params, paths, trained, scored = _stage(tmp_path, 5, caplog)
    assert [s["hash"] for s in json.loads((paths.slices / "manifest.json").read_text())["slices"]][:4] == hashes
    assert {m: [r["unit"]["cutoff"] for r in t] for m, t in trained.items()} == {m: ["2004"] for m in MODELS}
    for model in MODELS:  # old units score the new period only, the new unit every period
        assert scored[model].endswith("25 cells in the plan, 9 to score (5 units)"), scored[model]
    doc = json.loads((paths.matrices / "LightGBM.json").read_text())
    assert len(doc["values"]) == 5 and all(v is not None for row in doc["values"] for v in row)
    # one MLflow run and one registry version per unit, aliased by cutoff
    client = MlflowClient(params.tracking.uri)
    versions = client.search_model_versions("name = 'tinytab.LightGBM'")
    assert len(versions) == 5
    assert client.get_model_version_by_alias("tinytab.LightGBM", "cutoff-2004").version
    runs = client.search_runs([client.get_experiment_by_name("tinytab").experiment_id],
                              "tags.model = 'LogReg' and tags.kind = 'cutoff'")
    assert len(runs) == 5


def test_a_registered_tabular_model_predicts_a_frame(tmp_path, caplog):
    """The registry version's files (the unit folder) rebuild the model without unpickling
    (pyfunc packaging of tabular units is serving.py's, still to come)."""
    import mlflow

    from driftmatrix.checkpoints import load_model_folder
    from driftmatrix.tracking import configure

    params, paths, _, _ = _stage(tmp_path, 4, caplog)
    configure(params.tracking)
    version = MlflowClient(params.tracking.uri).get_model_version_by_alias("tinytab.LightGBM", "cutoff-2002")
    folder = mlflow.artifacts.download_artifacts(version.source, dst_path=str(tmp_path / "dl"))
    model = load_model_folder(folder)
    frame = pd.DataFrame({"age": [30.0, None], "income": [2e4, 3e4], "tenure": [1.0, 2.0], "usage": [5.0, 9.0],
                          "score": [1.0, -1.0], "region": ["north", "mars"], "channel": ["web", None],
                          "plan": ["pro", "basic"]})
    out = model.predict_frame(frame)
    assert out.shape == (2, 2) and model.unseen == 1
