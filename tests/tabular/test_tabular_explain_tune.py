"""Permutation importance per cutoff on held-out rows; tuning a tabular model."""

from __future__ import annotations

import json

import numpy as np

from driftmatrix.stages import train as train_stage
from driftmatrix.explain import importance
from driftmatrix.stages import importance as importance_stage


def test_importance_per_cutoff_on_held_out_rows(sliced, tmp_path):
    params, paths = sliced
    for model in ("HistGBT", "LogReg"):
        train_stage.run(params, model, paths.slices, paths.checkpoints, validation_dir=paths.validation,
                     features_dir=paths.features)
    out = importance_stage.run(params, paths.slices, paths.checkpoints, tmp_path / "imp", paths.features)
    assert set(out) == {"HistGBT", "LogReg", "LightGBM", "MLP-Tab"}  # every tabular model of params.yaml
    res = json.loads((tmp_path / "imp" / "HistGBT.json").read_text())
    values = np.array(res["values"], dtype=float)
    assert values.shape == (8, 5) and res["cutoffs"] == ["2000", "2001", "2002", "2003", "2004"]
    ranked = [res["features"][k] for k in np.argsort(-values[:, 2])]
    assert ranked[0] == "score"  # the feature with the strongest effect before its flip
    assert (tmp_path / "imp" / "HistGBT.png").stat().st_size > 1000
    assert "HistGBT" in (tmp_path / "imp" / "report.html").read_text()
    assert np.isnan(np.array(json.loads((tmp_path / "imp" / "LightGBM.json").read_text())["values"],
                             dtype=float)).all()  # not trained: no importance
    from driftmatrix.reporting.html import importance_section

    anchor, title, body = importance_section(tmp_path / "imp")  # the main report's section
    assert anchor == "importance" and body.count("<img") == len(list((tmp_path / "imp").glob("*.png"))) >= 2
    assert importance_section(tmp_path / "nowhere") is None and importance_section(tmp_path) is None


def test_held_out_rows_are_the_windows_test_splits():
    ids = np.array([0, 0, 1, 1, 2, 2])
    split = np.array(["train", "test"] * 3)
    assert importance.held_out_rows(ids, split, (0, 1)).tolist() == [1, 3]


def test_tuning_objective_fits_tabular_models_on_the_inner_train_rows_only(sliced, tmp_path):
    from driftmatrix.stages import tune
    from driftmatrix.units.experiment import Experiment

    from test_tabular_models import _poison_future

    params, paths = sliced
    poisoned = _poison_future(paths, 3, tmp_path / "poisoned")
    for model in ("HistGBT", "MLP-Tab"):
        scores, reports = [], []
        for slices in (paths.slices, poisoned):
            exp = Experiment(params, model, slices, paths.features)
            data = tune.restrict(exp, 3, 1)
            scores.append(tune.objective(data, exp.cfg, exp.new_model, 0, exp.device,
                                         lambda e, s: reports.append((e, s))))
        assert np.isfinite(scores[0]) and scores[0] == scores[1] and reports
        assert tune.has_dropout(exp.new_model(0)) == (model == "MLP-Tab")
