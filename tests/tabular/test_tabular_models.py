"""Tabular models: leak-free preprocessing per unit, unseen categories, pickle-free storage,
estimators named by import path."""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from driftmatrix.units.store import CheckpointStore, file_digest
from driftmatrix.models.catalog import load_model_folder
from driftmatrix.config import ConfigError
from driftmatrix.data.table import feature_column
from driftmatrix.features.table import TableInputs, category_hash
from driftmatrix.models import tabular
from driftmatrix.units.experiment import Experiment
from driftmatrix.learn.fit import predict

from testkit.tables import TABULAR, make_table_params

CUSTOM = {"MyGBT": {"estimator": "sklearn.ensemble.GradientBoostingClassifier",
                    "params": {"max_depth": 2, "n_estimators": 15}, "trusted": ["sklearn.tree._tree.Tree"]}}


def _experiment(params, paths, model, slices=None):
    return Experiment(params, model, slices or paths.slices, paths.features)


def _poison_future(paths, cutoff: int, dest: Path) -> Path:
    """A copy of the slices whose rows after ``cutoff`` carry wild numbers and new categories."""
    shutil.copytree(paths.slices, dest)
    rows = pd.read_parquet(dest / "rows.parquet")
    later = rows["slice"] > cutoff
    for col in rows.columns:
        if col.startswith("feat:"):
            if rows[col].dtype.kind == "f":
                rows.loc[later, col] = rows.loc[later, col] * 1000.0 + 5e6
            else:
                rows[col] = rows[col].astype(object)
                rows.loc[later, col] = "poison-" + rows.loc[later, col].astype(str)
    rows.to_parquet(dest / "rows.parquet", index=False)
    return dest


@pytest.mark.parametrize("model", TABULAR)
def test_preprocessing_is_fitted_on_the_units_own_rows_only(sliced, tmp_path, model):
    """Poisoning every row after the cutoff changes neither the fitted unit nor its scores on the
    periods up to the cutoff; a preprocessor fitted on all rows would change both."""
    params, paths = sliced
    cutoff = 2
    clean = _experiment(params, paths, model)
    poisoned = _experiment(params, paths, model, _poison_future(paths, cutoff, tmp_path / "poisoned"))
    unit = clean.plan.unit(0, cutoff)
    assert poisoned.plan.unit(0, cutoff).key == unit.key  # the window's slices are the same
    a, b = clean.train_unit(unit)[0], poisoned.train_unit(unit)[0]
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    rows = np.flatnonzero(clean.slice_ids <= cutoff)
    assert np.array_equal(predict(a, clean.inputs, rows=rows), predict(b, poisoned.inputs, rows=rows))
    # the control: the same preprocessing fitted on every row sees the poison
    fit_all = [tabular.Preprocessor("onehot", len(clean.meta.numeric), len(clean.meta.categorical)).fit(
        e.inputs.num.numpy(), e.inputs.cat.numpy()) for e in (clean, poisoned)]
    x = [p.transform(clean.inputs.num[rows].numpy(), clean.inputs.cat[rows].numpy()) for p in fit_all]
    assert x[0].shape != x[1].shape or not np.allclose(x[0], x[1])


def test_unseen_categories_are_handled_and_counted(sliced):
    params, paths = sliced
    for model in ("LogReg", "HistGBT", "LightGBM", "MLP-Tab"):
        exp = _experiment(params, paths, model)
        fitted = exp.train_unit(exp.plan.unit(0, 0))[0]
        frame = pd.DataFrame({**{f: [1.0, np.nan] for f in exp.meta.numeric},
                              **{c: ["never-seen", None] for c in exp.meta.categorical}})
        out = predict(fitted, TableInputs.from_frame(frame, exp.meta.numeric, exp.meta.categorical))
        assert out.shape == (2, 2) and np.isfinite(out).all()
        assert fitted.unseen == len(exp.meta.categorical)  # one unseen value per column; None is missing


def test_stored_units_load_without_pickle_and_predict_the_same(sliced, tmp_path):
    params, paths = sliced
    for model in TABULAR:
        exp = _experiment(params, paths, model)
        unit = exp.plan.unit(0, 1)
        result = {"state": exp.train_unit(unit)[0].state_dict()}
        store = CheckpointStore(tmp_path / "ckpt", model)
        store.write(unit.key, result["state"], exp.description(), {"unit": {}})
        loaded = exp.load_unit(store, unit.key)
        again = load_model_folder(store.folder(unit.key))
        trained = exp.new_model(0).load_state_dict(result["state"])
        rows = np.flatnonzero(exp.slice_ids == 3)
        expected = predict(trained, exp.inputs, rows=rows)
        assert np.array_equal(predict(loaded, exp.inputs, rows=rows), expected)
        assert np.array_equal(predict(again, exp.inputs, rows=rows), expected)


class _Exploit:
    """Unpickling (or building) this object writes a marker file."""

    marker: Path

    def __reduce__(self):
        return (Path.write_text, (self.marker, "pwned"))

    def __setstate__(self, state):
        self.marker.write_text("pwned")


def test_crafted_pickles_and_untrusted_types_never_run(sliced, tmp_path):
    """A stored model whose bytes hold a pickle, or skops bytes that would build a type outside the
    trusted list, is refused before anything in it runs."""
    params, paths = sliced
    marker = tmp_path / "marker"
    _Exploit.marker = marker
    exp = _experiment(params, paths, "LogReg")
    unit = exp.plan.unit(0, 1)
    state = exp.train_unit(unit)[0].state_dict()
    store = CheckpointStore(tmp_path / "ckpt", "LogReg")
    crafted = {"pickle": tabular.bytes_tensor(pickle.dumps(_Exploit())),
               "skops": tabular.bytes_tensor(_skops_bytes_of_exploit())}
    for name, blob in crafted.items():
        for part in ("estimator.skops", "prep.transformer"):
            bad = {**state, part: blob}
            store.write(unit.key, bad, exp.description(), {"unit": {}})
            with pytest.raises(Exception):
                exp.load_unit(store, unit.key)
            with pytest.raises(Exception):
                load_model_folder(store.folder(unit.key))
    assert not marker.exists()
    with pytest.raises(tabular.UntrustedModel, match="_Exploit"):
        tabular.load(crafted["skops"], tabular.TRUSTED)
    assert not marker.exists()


def _skops_bytes_of_exploit() -> bytes:
    import skops.io as sio

    obj = _Exploit.__new__(_Exploit)
    obj.__dict__["payload"] = 1
    return sio.dumps(obj)


def test_loading_code_has_no_pickle_path():
    for module in ("models/tabular.py", "units/store.py", "features/table.py"):
        text = (Path(tabular.__file__).parents[1] / module).read_text()
        for call in ("pickle.load", "joblib.load", "torch.load(", "cloudpickle", "sio.load(", "trusted=True"):
            assert call not in text, f"{module} uses {call}"


def test_an_estimator_named_by_import_path(tmp_path, table_params, monkeypatch):
    from testkit.pipeline import Paths, prepare

    params = table_params(tmp_path, models=CUSTOM, train={"seeds": [3]})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    exp = _experiment(params, paths, "MyGBT")
    assert exp.spec.family == "Custom"
    model = exp.train_unit(exp.plan.unit(3, 1))[0]
    got = model.estimator.get_params()
    assert (got["random_state"], got["max_depth"], got["n_estimators"]) == (3, 2, 15)  # the unit's seed
    # its identity: import path, params and its library's version key every unit
    keys = exp.plan.units[0].key
    other = table_params(tmp_path, models={"MyGBT": {**CUSTOM["MyGBT"], "params": {"max_depth": 3}}},
                         train={"seeds": [3]})
    assert _experiment(other, paths, "MyGBT").plan.units[0].key != keys
    from driftmatrix.units import environment, plan

    assert environment.model_libraries("Custom", CUSTOM["MyGBT"])["scikit-learn"]
    real = environment.model_libraries
    monkeypatch.setattr(plan, "model_libraries", lambda kind, opts: {**real(kind, opts), "scikit-learn": "0.1"})
    assert _experiment(params, paths, "MyGBT").plan.units[0].key != keys


def test_an_estimator_trusts_only_what_params_yaml_lists(sliced, tmp_path, table_params):
    params, paths = sliced
    untrusting = table_params(tmp_path, models={"MyGBT": {k: v for k, v in CUSTOM["MyGBT"].items() if k != "trusted"}})
    exp = _experiment(untrusting, paths, "MyGBT")
    with pytest.raises(tabular.UntrustedModel, match="sklearn.tree._tree.Tree"):
        exp.train_unit(exp.plan.unit(0, 1))  # checked when it is trained, not first when it is scored


def test_an_untrusted_type_stops_the_train_stage_in_one_line_naming_the_model(sliced, tmp_path, table_params):
    """Through the stage and its worker pool: a ConfigError (the CLI's one-line error), not a traceback."""
    from driftmatrix.stages import train as train_stage

    _, paths = sliced
    untrusting = table_params(tmp_path, models={"MyGBT": {k: v for k, v in CUSTOM["MyGBT"].items() if k != "trusted"}},
                              runtime={"workers": 2})
    with pytest.raises(ConfigError, match=r"^params.yaml: models.MyGBT: .*sklearn.tree._tree.Tree.*trusted"):
        train_stage.run(untrusting, "MyGBT", paths.slices, tmp_path / "ckpt", validation_dir=paths.validation,
                        features_dir=paths.features)


def test_a_checkpoint_that_would_build_an_untrusted_type_stops_evaluate_and_importance_naming_it(sliced, tmp_path,
                                                                                                 table_params):
    """A LogReg checkpoint whose skops bytes were swapped for a tree's after training is refused as
    changed weights; with a record that matches it (as a checkpoint trained when the params trusted
    more would have), the evaluate stage (through its worker pool) and the importance stage refuse
    it unbuilt, in one line naming the folder, the model and the type."""
    from safetensors.torch import load_file, save_file
    from sklearn.tree import DecisionTreeClassifier

    from driftmatrix.errors import DataError
    from driftmatrix.stages import evaluate as evaluate_stage
    from driftmatrix.stages import importance as importance_stage
    from driftmatrix.stages import train as train_stage

    _, paths = sliced
    params = table_params(tmp_path, models={"LogReg": {}}, runtime={"workers": 2})
    ckpts = tmp_path / "ckpt"
    train_stage.run(params, "LogReg", paths.slices, ckpts, validation_dir=paths.validation, features_dir=paths.features)
    store = CheckpointStore(ckpts, "LogReg")
    first = sorted(store.keys())[0]
    weights = store.folder(first) / "model.safetensors"
    state = load_file(str(weights))
    state["estimator.skops"] = tabular.dump(DecisionTreeClassifier(max_depth=1).fit([[0.0], [1.0]], [0, 1]))
    save_file(state, str(weights))
    with pytest.raises(DataError, match=rf"^{weights}: not the weights its unit.json records"):
        evaluate_stage.run(params, "LogReg", paths.slices, ckpts, tmp_path / "scores", features_dir=paths.features)
    record = store.folder(first) / "unit.json"
    record.write_text(json.dumps({**store.record(first), "weights_digest": file_digest(weights)}))
    with pytest.raises(DataError, match=rf"^{ckpts / 'LogReg'}: a checkpoint of LogReg: .*sklearn\.tree\._tree\.Tree"):
        evaluate_stage.run(params, "LogReg", paths.slices, ckpts, tmp_path / "scores", features_dir=paths.features)
    with pytest.raises(DataError, match=rf"^{ckpts / 'LogReg' / first}: LogReg cutoff \d+ seed 0: .*sklearn\.tree"):
        importance_stage.model_importance(params, "LogReg", paths.slices, ckpts, paths.features)


@pytest.mark.parametrize("entry, match", [
    ({"estimator": "sklearn.ensemble.NoSuchThing"}, "cannot be imported"),
    ({"estimator": "not a path"}, "import path"),
    ({"estimator": "sklearn.ensemble.GradientBoostingClassifier", "params": [1]}, "mapping"),
    ({"estimator": "sklearn.ensemble.GradientBoostingClassifier", "encoding": "hash"}, "onehot or native"),
    ({"estimator": "json.JSONDecoder"}, "not a scikit-learn-compatible"),
])
def test_bad_estimator_entries_are_one_line_errors(tmp_path, entry, match):
    from driftmatrix.config import effective_config

    with pytest.raises(ConfigError, match=match):
        effective_config(make_table_params(tmp_path, models={"Mine": entry}), "Mine")


def test_stages_that_train_nothing_do_not_import_a_named_estimator(tmp_path):
    """ingest and train import an estimator named by path to check it (a bad one is refused there);
    the other stages (matrices, report...) read the same params without importing it."""
    import subprocess
    import sys

    import yaml

    from driftmatrix.cli import stage_params
    from driftmatrix.config import load_params, to_raw

    raw = {**to_raw(make_table_params(tmp_path)), "models": {"Mine": {"estimator": "sklearn.ensemble.NoSuchThing"}}}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match="Mine.estimator: sklearn.ensemble.NoSuchThing cannot be imported"):
        load_params(path)
    assert list(stage_params(path).models) == ["Mine"]
    raw["models"] = {"Mine": {"estimator": "sklearn.linear_model.LogisticRegression"}}
    path.write_text(yaml.safe_dump(raw))
    probe = ("import sys; from driftmatrix.cli import stage_params; from driftmatrix.config import load_params; "
             f"stage_params({str(path)!r}); print('sklearn' in sys.modules); "
             f"load_params({str(path)!r}); print('sklearn' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True"]


def test_estimator_options_on_catalog_and_torch_models_are_refused(tmp_path):
    from driftmatrix.config import effective_config

    with pytest.raises(ConfigError, match="catalog model"):
        effective_config(make_table_params(tmp_path, models={"HistGBT": {"estimator": "sklearn.svm.SVC"}}), "HistGBT")
    with pytest.raises(ConfigError, match="tabular models only"):
        effective_config(make_table_params(tmp_path, models={"MLP-S": {"params": {"C": 1}}}), "MLP-S")


def test_catalog_params_reach_the_estimator(sliced, tmp_path, table_params):
    params, paths = sliced
    tuned = table_params(tmp_path, models={"HistGBT": {"params": {"max_iter": 7}}})
    exp = _experiment(tuned, paths, "HistGBT")
    assert exp.train_unit(exp.plan.unit(0, 0))[0].estimator.get_params()["max_iter"] == 7
    assert exp.plan.units[0].key != _experiment(params, paths, "HistGBT").plan.units[0].key


def test_category_hashes_are_stable():
    assert category_hash("paris") == category_hash("paris") != category_hash("rome")
    inputs = TableInputs.from_frame(pd.DataFrame({"c": ["a", None, "", "a"]}), [], ["c"])
    assert inputs.cat[:, 0].tolist() == [category_hash("a"), 0, 0, category_hash("a")]
