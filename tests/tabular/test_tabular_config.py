"""Tabular configurations that cannot work stop when params.yaml is read (one line, exit 2, before
any unit trains); library fits log what happened; a high-cardinality one-hot column is capped."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import yaml

from driftmatrix.config import ConfigError
from driftmatrix.features.table import hash_column
from driftmatrix.models import tabular

from testkit.tables import make_table_params


@pytest.mark.parametrize("model, match", [
    ("LogReg", "models.LogReg: LogReg cannot do a multilabel task"),
    ("LightGBM", "models.LightGBM: LightGBM cannot do a multilabel task"),
    ("HistGBT", "models.HistGBT: HistGBT cannot do a multilabel task"),
])
def test_a_task_a_model_cannot_do_stops_at_parse_time(tmp_path, model, match):
    with pytest.raises(ConfigError, match=match):
        make_table_params(tmp_path, models={model: {}}, dataset={"task": "multilabel"})
    make_table_params(tmp_path, models={"MLP-Tab": {}, "Prior": {}}, dataset={"task": "multilabel"})


@pytest.mark.parametrize("estimator, params, task, missing", [
    ("sklearn.svm.SVC", {}, "binary", "predict_proba"),                       # probability=False
    ("sklearn.linear_model.RidgeClassifier", {}, "multiclass", "predict_proba"),
    ("sklearn.cluster.KMeans", {"n_clusters": 2}, "regression", None),           # has predict: allowed
])
def test_an_estimator_without_the_method_its_task_needs_stops_at_parse_time(tmp_path, estimator, params, task,
                                                                           missing):
    models = {"Mine": {"estimator": estimator, "params": params}}
    if missing is None:
        make_table_params(tmp_path, models=models, dataset={"task": task})
        return
    with pytest.raises(ConfigError) as err:
        make_table_params(tmp_path, models=models, dataset={"task": task})
    assert str(err.value).endswith(f"models.Mine.estimator: {estimator} has no {missing}(), which a {task} task "
                                   "scores with")
    if estimator.endswith("SVC"):  # with its probabilities switched on it has one
        make_table_params(tmp_path, models={"Mine": {"estimator": estimator, "params": {"probability": True}}})


def test_the_train_command_refuses_before_training_with_one_line(tmp_path, monkeypatch, capsys):
    """`driftmatrix train` (what `dvc repro` runs) stops in load_params: exit 2, one line, no unit."""
    from driftmatrix import cli
    from driftmatrix.stages import train as train_stage

    raw = {"dataset": {"name": "t", "source": "table", "path": str(tmp_path / "raw"), "task": "multilabel",
                       "options": {"timestamp": "year", "label": "tags", "features": "auto"}},
           "models": {"LogReg": {}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    monkeypatch.setattr(train_stage, "run", lambda *a, **k: pytest.fail("a unit was about to train"))
    monkeypatch.setattr(sys, "argv", ["driftmatrix", "train", "-m", "LogReg", "-p", str(tmp_path / "params.yaml")])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: ") and "LogReg cannot do a multilabel task" in err



def test_a_stored_model_the_project_does_not_trust_is_a_one_line_error(monkeypatch, capsys):
    """A checkpoint or registered model whose skops bytes would build an untrusted type, met by any
    command (evaluate, importance, serving): exit 2, one line naming the type, no traceback."""
    from sklearn.tree import DecisionTreeClassifier

    from driftmatrix import cli

    stored = tabular.dump(DecisionTreeClassifier(max_depth=1).fit([[0.0], [1.0]], [0, 1]))
    monkeypatch.setattr(cli, "app", lambda: tabular.load(stored, trusted=[]))
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("error: stored model would build untrusted types") and "sklearn.tree._tree.Tree" in err

def test_library_fits_log_their_iterations_not_epochs(sliced, caplog):
    from driftmatrix.stages import train as train_stage
    params, paths = sliced
    caplog.set_level("INFO")
    lines = {}
    for model in ("LogReg", "HistGBT", "LightGBM", "Prior"):
        caplog.clear()
        train_stage.run(params, model, paths.slices, paths.checkpoints / model, validation_dir=paths.validation,
                     features_dir=paths.features)
        lines[model] = [m for m in caplog.messages if m.startswith(f"{model} seed 0 cutoff")]
    assert all(len(v) == 5 for v in lines.values()) and not any("nan" in m for v in lines.values() for m in v)
    assert all(", LogisticRegression, " in m and " iterations" in m for m in lines["LogReg"])
    assert all(", HistGradientBoostingClassifier, 100 iterations, " in m for m in lines["HistGBT"])
    assert all(", LightGBM, 200 boosting rounds, " in m for m in lines["LightGBM"])
    assert all(", no training: the window's prior, " in m for m in lines["Prior"])


def test_a_high_cardinality_one_hot_column_is_capped_and_logged():
    rng = np.random.default_rng(0)
    values = np.concatenate([np.repeat(["common-a", "common-b"], 400), [f"rare-{i}" for i in range(600)]])
    cat = hash_column(rng.permutation(values)).reshape(-1, 1)
    num = rng.normal(size=(len(cat), 1))
    prep = tabular.Preprocessor("onehot", 1, 1).fit(num, cat)
    cap = tabular.CATEGORY_CAPS["onehot"]
    assert len(prep.known[0]) == cap and set(hash_column(["common-a", "common-b"])) <= set(prep.known[0])
    width = prep.transform(num, cat).shape[1]
    assert width == 1 + cap + 1  # the number, the kept categories and "missing"
    lines = tabular.capped_features("LogReg", {}, ["zip"], cat)
    assert lines == [f"feature 'zip': 602 categories; onehot encoding keeps the {cap} most frequent of each "
                     "training window, the rest count as unseen"]
    assert tabular.capped_features("MLP", {}, ["zip"], cat) == []  # embeddings: one row per category


def test_mlp_tab_is_the_tabular_multilabel_model_and_trains(tmp_path):
    """The model the multilabel error points to does the task (its targets were cast to classes)."""
    import json

    import pandas as pd

    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import matrices
    from driftmatrix.stages import train as train_stage
    from testkit.pipeline import Paths, prepare

    rng = np.random.default_rng(0)
    x, c = rng.normal(size=300), rng.choice(["u", "v"], 300)
    tags = [" ".join(t for t, on in (("a", xi > 0), ("b", ci == "u"), ("c", True)) if on) for xi, ci in zip(x, c)]
    (tmp_path / "raw").mkdir()
    pd.DataFrame({"year": 2000 + np.arange(300) % 3, "x": x, "c": c, "tags": tags}).to_csv(tmp_path / "raw" / "t.csv",
                                                                                           index=False)
    params = make_table_params(tmp_path, models={"MLP-Tab": {}}, dataset={
        "task": "multilabel", "options": {"timestamp": "year", "label": "tags", "features": "auto"}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths)
    train_stage.run(params, "MLP-Tab", paths.slices, paths.checkpoints, validation_dir=paths.validation,
                 features_dir=paths.features)
    evaluation.run(params, "MLP-Tab", paths.slices, paths.checkpoints, paths.scores, features_dir=paths.features)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    values = json.loads((paths.matrices / "MLP-Tab.json").read_text())["values"]
    assert np.min(values) > 90  # macro AUC of two learnable categories and one always on
