"""Tabular models through the stages: incremental periods, MLflow runs and registry versions."""

from __future__ import annotations

import json

import pandas as pd
from mlflow.tracking import MlflowClient

from driftmatrix.stages import evaluate as evaluation
from driftmatrix.stages import matrices
from driftmatrix.learn import fit as fit_loop
from driftmatrix.stages import train as train_stage
from driftmatrix.units import experiment
from driftmatrix.units import plan
from testkit.pipeline import Paths, prepare

from testkit.tables import make_table_params

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
        trained[model] = train_stage.run(params, model, paths.slices, paths.checkpoints,
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


def _is_pickle(data: bytes) -> bool:
    """Whether ``data`` (or a member of a zip) parses as pickle opcodes up to STOP (nothing runs)."""
    import io
    import pickletools
    import zipfile

    if zipfile.is_zipfile(io.BytesIO(data)):
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            return any(_is_pickle(z.read(n)) for n in z.namelist())
    try:
        return any(op.name == "STOP" for op, _, _ in pickletools.genops(io.BytesIO(data)))
    except Exception:  # noqa: BLE001 - not a pickle stream
        return False


def test_registered_tabular_versions_are_pyfunc_models_predicting_the_pipelines_probabilities(tmp_path, caplog):
    """``mlflow.pyfunc.load_model`` by alias: a DataFrame of the raw feature columns in, the class
    probabilities the evaluate stage computes out; a signature of the feature columns; no pickle."""
    from pathlib import Path

    import mlflow
    import numpy as np

    from driftmatrix.units import store as checkpoints
    from driftmatrix.tracking import pyfunc as serving
    from driftmatrix.features import transform
    from driftmatrix.tracking import runs as tracking
    from driftmatrix.data.table import DatasetMeta, feature_column
    from driftmatrix.data.slicing import load_slices

    params, paths, _, _ = _stage(tmp_path, 4, caplog)
    tracking.configure(params.tracking)
    rows_df, manifest, _ = load_slices(paths.slices)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    rows = np.flatnonzero(rows_df["slice"].to_numpy() == 3)[:40]  # the future of cutoff 2002
    frame = rows_df.iloc[rows][[feature_column(f) for f in meta.features]]
    frame = frame.rename(columns={feature_column(f): f for f in meta.features}).reset_index(drop=True)
    assert frame.isna().to_numpy().any()  # missing values go in as they are
    for model in ("LogReg", "LightGBM"):
        pyfunc = mlflow.pyfunc.load_model(f"models:/tinytab.{model}@cutoff-2002")
        got = pyfunc.predict(frame)
        exp = experiment.Experiment(params, model, paths.slices, paths.features)
        assert list(got.columns) == transform.output_columns(exp.meta) and len(got.columns) == 2
        net = exp.load_unit(checkpoints.CheckpointStore(paths.checkpoints, model), exp.plan.unit(0, 2).key)
        expected = transform.outputs_to_scores(fit_loop.predict(net, exp.inputs, rows=rows), exp.meta.task)
        np.testing.assert_allclose(got.to_numpy(), expected, rtol=0, atol=1e-9)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-9)
        sig = pyfunc.metadata.signature.inputs.to_dict()
        assert [c["name"] for c in sig] == list(meta.features)
        # every feature required (a missing column is an error, never a column of missing values), of any
        # type (integers where floats are declared, a category as float, bool or text: transform.as_frame)
        assert {c["name"]: c["type"] for c in sig} == {f: "any" for f in meta.features}
        assert all(c["required"] for c in sig)
        assert pyfunc.metadata.saved_input_example_info is not None
        odd = frame.head(2).copy()  # an unseen category and missing values in every kind of column
        odd.loc[0, meta.categorical[0]] = "never-seen"
        odd.loc[1, list(meta.features)] = None
        assert pyfunc.predict(odd).shape == (2, 2)
        folder = Path(mlflow.artifacts.download_artifacts(f"models:/tinytab.{model}@cutoff-2002",
                                                          dst_path=str(tmp_path / model)))
        files = [p for p in folder.rglob("*") if p.is_file()]
        assert (folder / "MLmodel").is_file() and (folder / "artifacts" / "model.safetensors").is_file()
        assert [str(p.relative_to(folder)) for p in files if _is_pickle(p.read_bytes())] == []
        assert serving.verify(folder)["inputs"] == "table"
    unit = plan.planned_unit(params, "LightGBM", "2002", 0, paths.slices, paths.checkpoints)
    assert tracking.load_registered(unit).kind == "LightGBM"
