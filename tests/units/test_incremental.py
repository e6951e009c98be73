"""Keeping matrices current on tiny data: a new period, seed or setting costs only its new work.

One temporary MLflow store and outputs folder go through the sequence a user would run:
4 years -> 5 years -> a third seed -> back to two seeds -> new epochs for the model.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from driftmatrix.stages import matrices
from driftmatrix.units import status
from testkit.pipeline import Paths, prepare, train_and_evaluate
from driftmatrix.tracking.runs import configure


def run(tmp, tiny_params, years, seeds, caplog, epochs=1, out="out"):
    params = tiny_params(tmp, synthetic={"years": years}, train={"seeds": seeds, "epochs": epochs},
                         tracking={"log_models": True, "register": True})
    paths = Paths(tmp / out)
    caplog.clear()
    prepare(params, paths, generate=True)
    train_and_evaluate(params, paths)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    doc = json.loads((paths.matrices / "MLP-S.json").read_text())
    return params, paths, doc, list(caplog.messages)


def runs(params):
    exp = configure(params.tracking)
    return MlflowClient().search_runs([exp], "tags.kind = 'cutoff'", run_view_type=ViewType.ALL, max_results=1000)


def live(params):
    return {r.info.run_id: r for r in runs(params) if r.info.lifecycle_stage == "active"}


def stack(doc):
    return np.array(doc["seed_values"], dtype=float)


def test_append_a_period_then_add_and_remove_a_seed(tmp_path, tiny_params, caplog):
    caplog.set_level("INFO")
    params, paths, first, _ = run(tmp_path, tiny_params, 4, [0, 1], caplog)
    runs0 = live(params)
    assert len(runs0) == 8

    # a new year: 2 new units (one per seed), old checkpoints scored on the new column only
    params, paths, grown, log = run(tmp_path, tiny_params, 5, [0, 1], caplog)
    assert any("10 units in the plan (cumulative window), 8 done, 2 to train" in m for m in log)
    assert any("50 cells in the plan, 18 to score" in m for m in log)  # 8 x 1 new column + 2 x 5
    runs1 = live(params)
    assert set(runs0) < set(runs1) and len(runs1) == 10  # none deleted, exactly 2 new
    assert all(r.info.status == "FINISHED" for r in runs1.values())
    assert np.array_equal(stack(grown)[:, :4, :4], stack(first), equal_nan=True)  # old cells bit-identical
    assert stack(grown).shape == (2, 5, 5) and np.isfinite(stack(grown)).all()

    # a third seed: exactly K new runs, no other seed's cell changes
    params, paths, three, log = run(tmp_path, tiny_params, 5, [0, 1, 2], caplog)
    assert any("15 units in the plan (cumulative window), 10 done, 5 to train" in m for m in log)
    assert len(live(params)) == 15
    assert np.array_equal(stack(three)[:2], stack(grown))

    # back to two seeds: seed 2's rows leave the means, as in a clean run of that configuration
    params, paths, two, log = run(tmp_path, tiny_params, 5, [0, 1], caplog)
    assert any("10 units in the plan (cumulative window), 10 done, 0 to train" in m for m in log)
    clean = run(tmp_path, tiny_params, 5, [0, 1], caplog, out="clean")[2]
    assert two["values"] == clean["values"] and two["seeds"] == [0, 1] and two["stale"] == 5
    metrics = json.loads((paths.root / "metrics.json").read_text())
    clean_metrics = json.loads((tmp_path / "clean" / "metrics.json").read_text())
    assert metrics == clean_metrics

    # status reads the same plan: nothing left to do
    (st,) = status.read_status(params, paths.slices, paths.checkpoints, paths.scores)
    assert st.to_train == 0 and st.cells_to_score == 0 and st.done == 10 and st.stale_files == 5


def test_a_redone_unit_leaves_no_orphan_run_or_version(tmp_path, tiny_params, caplog):
    caplog.set_level("INFO")
    params, paths, _, _ = run(tmp_path, tiny_params, 3, [0], caplog)
    client = MlflowClient()
    before = {v.version: v for v in client.search_model_versions("name = 'tiny.MLP-S'")}
    old_alias = client.get_model_version_by_alias("tiny.MLP-S", "cutoff-1951").version
    params, paths, _, log = run(tmp_path, tiny_params, 3, [0], caplog, epochs=2)  # every unit redone
    assert any("3 units in the plan (cumulative window), 0 done, 3 to train" in m for m in log)
    alive = live(params)
    assert len(alive) == 3 and {r.data.params["epochs"] for r in alive.values()} == {"2"}
    superseded = [r for r in runs(params) if r.info.lifecycle_stage == "deleted"]
    assert len(superseded) == 3 and all("superseded_by" in r.data.tags for r in superseded)
    versions = client.search_model_versions("name = 'tiny.MLP-S'")
    assert len(versions) == 3 and not {v.version for v in versions} & set(before)
    new_alias = client.get_model_version_by_alias("tiny.MLP-S", "cutoff-1951")
    assert new_alias.version != old_alias and new_alias.run_id in alive
    assert client.get_model_version_by_alias("tiny.MLP-S", "cutoff-1951-seed-0").version == new_alias.version

    # going back to 1 epoch reuses the kept checkpoints: runs restored, nothing trained
    params, paths, _, log = run(tmp_path, tiny_params, 3, [0], caplog)
    assert any("3 units in the plan (cumulative window), 3 done, 0 to train" in m for m in log)
    assert {r.data.params["epochs"] for r in live(params).values()} == {"1"} and len(live(params)) == 3
    assert len(client.search_model_versions("name = 'tiny.MLP-S'")) == 3


def test_windows_are_recorded_and_train_on_their_rows(tmp_path, tiny_params, caplog):
    caplog.set_level("INFO")
    params = tiny_params(tmp_path, train={"seeds": [0], "window": {"sliding": 2}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    train_and_evaluate(params, paths)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    doc = json.loads((paths.matrices / "MLP-S.json").read_text())
    assert doc["window"] == "sliding-2"
    manifest = json.loads((paths.slices / "manifest.json").read_text())
    n_train = [s["n_train"] for s in manifest["slices"]]
    records = [json.loads(p.read_text()) for p in (paths.checkpoints / "MLP-S").glob("*/unit.json")]
    rows = {r["unit"]["cutoff_index"]: r["train_rows"] for r in records}
    assert rows == {0: n_train[0], 1: n_train[0] + n_train[1], 2: n_train[1] + n_train[2],
                    3: n_train[2] + n_train[3]}
