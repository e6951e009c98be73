"""What is served is what was scored, for text models: a registered version given documents as a
raw field holds them (surrounding spaces, or no value at all) predicts the evaluate stage's numbers
(token-state model, frozen encoder's head, Prior), and `estimate --data` reads a new period's text
table and runs the units through the same code."""

from __future__ import annotations

import json

import mlflow
import numpy as np
import pandas as pd
import pytest

from testkit.pipeline import Paths, run_all
from testkit.serving import held_out, in_process

TEXT_MODELS = {"FFN-S": {}, "MiniLM-L6": {}, "Prior": {}}  # token states, a frozen encoder's head, no input
CUTOFF, SEED = 1, 0


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    """Generated reviews (regression), a word-hash stand-in for every encoder (textfixtures), the
    models registered: (params, paths)."""
    from driftmatrix.features import encoders
    from textfixtures import TOY, load_counting, text_params

    root = tmp_path_factory.mktemp("reviews-parity")
    params = text_params(root, models=TEXT_MODELS, tracking={"log_models": True, "register": True},
                         embed={"token_encoder": TOY, "max_length": 16, "shard_size": 64, "progress": False})
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(encoders, "load", load_counting)
        mp.setenv("MLFLOW_TRACKING_URI", params.tracking.uri)
        mlflow.set_tracking_uri(params.tracking.uri)
        paths = Paths(root / "out")
        run_all(params, paths, generate=True)
        yield params, paths


def registered_text(params, model: str):
    return mlflow.pyfunc.load_model(f"models:/{params.dataset.name}.{model}@cutoff-2014-H2")


def test_documents_with_spaces_or_none_at_all_give_the_pipelines_numbers(reviews):
    params, paths = reviews
    rows, index = held_out(paths, CUTOFF)
    texts = [f"  {t}\n " for t in rows["text"].to_numpy()[index]]  # as a raw field may hold them
    for model in TEXT_MODELS:
        pyfunc = registered_text(params, model)
        got = pyfunc.predict(texts)
        assert list(got.columns) == ["prediction"]
        np.testing.assert_allclose(got.to_numpy(), in_process(params, paths, model, CUTOFF, SEED, index),
                                   rtol=0, atol=1e-6)
        empty = pyfunc.predict(pd.Series([np.nan, None], dtype=object))  # a missing document is empty text
        np.testing.assert_array_equal(empty.to_numpy(), pyfunc.predict(["", ""]).to_numpy())
        assert np.isfinite(pyfunc.predict(pd.Series([np.nan])).to_numpy()).all()  # a float column, not an error


def test_estimate_data_reads_a_text_table_as_the_served_model_does(reviews, tmp_path):
    from driftmatrix.data.table import DatasetMeta
    from driftmatrix.stages import newperiod
    from driftmatrix.data.table import read_manifest
    from driftmatrix.stages.estimates import load_model

    params, paths = reviews
    rows, index = held_out(paths, CUTOFF)
    docs = rows["text"].to_numpy()[index].tolist()
    new = tmp_path / "next.jsonl"
    new.write_text("".join(json.dumps({"text": t, "asin": "x"}) + "\n" for t in docs))  # no rating: not yet known
    records = newperiod.run(params, new, paths.slices, paths.scores, paths.checkpoints, tmp_path / "none", tmp_path / "out")
    assert {r["model"] for r in records} == set(TEXT_MODELS)
    raw, features = newperiod.read_period(params, new, paths.slices, DatasetMeta.from_dict(read_manifest(paths.slices)["dataset"]))
    assert raw == docs and features is None
    for model in ("FFN-S", "MiniLM-L6"):
        ms = load_model(params, model, read_manifest(paths.slices), paths.scores)
        got = newperiod.unit_outputs(params, model, ms, raw, paths.checkpoints, paths.slices)
        np.testing.assert_allclose(got[0, CUTOFF], registered_text(params, model).predict(docs).to_numpy(),
                                   rtol=0, atol=1e-6)
