"""Tabular units are keyed by every function that trains and scores them (tests/units/test_code_keys.py)."""

from __future__ import annotations

import pytest

from testkit.tables import TABULAR
from testkit.codekeys import untraced


@pytest.mark.parametrize("model", TABULAR)
def test_every_function_that_trains_or_scores_a_tabular_unit_is_in_its_keys(sliced, model):
    params, paths = sliced
    assert untraced(params, paths, model) == set()


def test_a_project_estimator_the_train_stage_does_not_depend_on_stops_it(sliced, tmp_path, table_params, monkeypatch):
    """DVC would skip train@MyEst when its module changes: one line, before any unit trains."""
    from pathlib import Path

    from driftmatrix.stages import train as train_stage
    from driftmatrix.config import ConfigError
    from testkit.codekeys import forget

    _, paths = sliced
    lib = tmp_path / "proj" / "mylib"
    lib.mkdir(parents=True)
    (lib / "__init__.py").write_text("")
    (lib / "est.py").write_text("from sklearn.linear_model import LogisticRegression\n\n\n"
                                "class MyEst(LogisticRegression):\n    pass\n")
    (lib.parent / "dvc.yaml").write_text((Path(__file__).resolve().parents[2] / "dvc.yaml").read_text())
    monkeypatch.chdir(lib.parent)
    monkeypatch.syspath_prepend(str(lib.parent))
    forget()
    params = table_params(tmp_path, models={"MyEst": {"estimator": "mylib.est.MyEst"}})
    with pytest.raises(ConfigError, match=r"models.MyEst.estimator: its code in mylib/est.py is no dependency of "
                                          r"dvc.yaml's train stage.*src/custom_models/"):
        train_stage.run(params, "MyEst", paths.slices, tmp_path / "ckpt", paths.validation, paths.features)
    assert not (tmp_path / "ckpt").exists()
    forget()
