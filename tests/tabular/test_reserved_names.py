"""A user's feature may be called like the table's own columns (period, id, label, timestamp, slice,
split, text): ingest -> slice -> gate -> train -> evaluate (MLflow runs, registry versions and
their input example) -> matrices, and the registered model takes the columns by those names."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from driftmatrix.stages import evaluate as evaluation
from driftmatrix.stages import matrices
from driftmatrix.stages import train as train_stage
from driftmatrix.audit import gate
from driftmatrix.stages import validate as validate_stage
from testkit.pipeline import Paths, prepare

from testkit.tables import make_table_params

RESERVED = ("period", "id", "label", "timestamp", "slice", "split", "text")


def _table(path):
    rng = np.random.default_rng(0)
    n = 240
    period = rng.random(n)  # Elec2's `period`: the time of day in [0, 1]
    frame = pd.DataFrame({
        "date": [20150101 + 10000 * (i % 4) + (i % 28) for i in range(n)],  # yyyymmdd, four years
        "period": period, "id": rng.integers(0, 9, n), "label": rng.choice(["lo", "hi"], n),
        "timestamp": rng.normal(size=n), "slice": rng.choice(["a", "b", "c"], n),
        "split": rng.choice(["x", "y"], n), "text": rng.choice(["p", "q"], n)})
    frame["up"] = np.where(period + 0.2 * rng.normal(size=n) > 0.5, "UP", "DOWN")
    frame.to_csv(path, index=False)


def test_a_table_whose_features_are_named_like_internal_columns_runs_end_to_end(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    _table(raw / "elec.csv")
    models = {"LogReg": {}, "LightGBM": {}}
    params = make_table_params(tmp_path, models=models, tracking={"log_models": True, "register": True},
                               dataset={"options": {"timestamp": "date", "label": "up", "features": "auto"}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths)
    meta = json.loads((paths.ingested / "meta.json").read_text())
    assert set(RESERVED) <= {*meta["numeric"], *meta["categorical"]}
    assert json.loads((paths.ingested / "report.json").read_text())["per_period"] == {
        str(y): 60 for y in range(2015, 2019)}  # 20150601-style dates land in their year
    validate_stage.run(params, paths.slices, paths.validation, echo=lambda _: None)
    for model in models:
        train_stage.run(params, model, paths.slices, paths.checkpoints, validation_dir=paths.validation,
                     features_dir=paths.features)
        evaluation.run(params, model, paths.slices, paths.checkpoints, paths.scores, features_dir=paths.features)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    for model in models:
        values = json.loads((paths.matrices / f"{model}.json").read_text())["values"]
        assert len(values) == 4 and all(v is not None for row in values for v in row)

    import mlflow

    from driftmatrix.tracking import runs as tracking

    tracking.configure(params.tracking)
    pyfunc = mlflow.pyfunc.load_model("models:/tinytab.LogReg@cutoff-2017")
    assert [c["name"] for c in pyfunc.metadata.signature.inputs.to_dict()] == meta["numeric"] + meta["categorical"]
    folder = mlflow.artifacts.download_artifacts("models:/tinytab.LogReg@cutoff-2017", dst_path=str(tmp_path / "m"))
    example = pyfunc.metadata.load_input_example(folder)
    assert list(example.columns) == meta["numeric"] + meta["categorical"] and len(example) == 3
    rows = pd.DataFrame({"period": [0.05, 0.95], "id": [1, 1], "timestamp": [0.0, 0.0], "label": ["lo", "lo"],
                         "slice": ["a", "a"], "split": ["x", "x"], "text": ["p", "p"]})
    probs = pyfunc.predict(rows)
    assert probs.shape == (2, 2) and probs["UP"].iloc[1] > probs["UP"].iloc[0]
