import numpy as np

from driftmatrix.learn.score import eval_mask, row_summary, score_cell


def test_eval_sets_are_the_test_split_up_to_cutoff_and_the_whole_slice_after():
    slice_ids = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    split = np.array(["train", "train", "test", "test"] * 2)
    assert np.flatnonzero(eval_mask(slice_ids, split, 0, 0)).tolist() == [2, 3]
    assert np.flatnonzero(eval_mask(slice_ids, split, 0, 1)).tolist() == [4, 5, 6, 7]
    assert np.flatnonzero(eval_mask(slice_ids, split, 1, 1)).tolist() == [6, 7]


def test_a_cell_scores_its_rows_and_an_empty_cell_is_null_not_zero():
    outputs = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    cell = score_cell(outputs, np.array([1, 1, 0, 1]), "binary")
    stats = cell.pop("stats")  # forward-pass statistics of the estimators (tests/estimate)
    assert cell == {"value": 50.0, "n_eval": 4, "left_out": []}
    assert stats["pred"] == [1, 3] and stats["confusion"] == [[0, 1], [1, 2]]
    assert "stats" not in score_cell(outputs[:, :1], np.array([1.0, 2.0, 3.0, 4.0]), "regression")
    empty = score_cell(np.zeros((0, 2)), np.zeros(0, int), "binary")
    assert empty["value"] is None and empty["n_eval"] == 0
    assert row_summary([50.0, None, 100.0], 0) == {"in_distribution": 50.0, "future_mean": 100.0}
    assert row_summary([None, 80.0, 100.0], 1) == {"in_distribution": 80.0, "future_mean": 100.0}


def test_eval_batches_are_made_once_per_set_within_the_budget_and_predict_the_same():
    import torch

    from driftmatrix.learn.score import EvalBatches
    from driftmatrix.features.inputs import PixelInputs
    from driftmatrix.models.catalog import REGISTRY
    from driftmatrix.learn.fit import predict

    rng = np.random.default_rng(0)
    inputs = PixelInputs(rng.integers(0, 256, (50, 32, 32, 3), dtype=np.uint8))
    inputs.channels_last = False
    torch.manual_seed(0)
    model = REGISTRY["MLP-S"].build(2, {})
    rows = np.arange(3, 40, 2)
    cache = EvalBatches(inputs, batch_size=8)
    first = cache.get(1, "test", rows)
    assert cache.get(1, "test", rows) is first and len(first) == 3  # 19 rows in batches of 8
    direct = predict(model, inputs, 8, rows=rows)
    assert direct.shape == (19, 2)
    np.testing.assert_array_equal(predict(model, inputs, batches=first), direct)
    # a set larger than what is left of the budget is made per call and not kept
    small = EvalBatches(inputs, batch_size=8, budget=19 * 3 * 32 * 32 * 4 - 1)
    assert small.get(1, "test", rows) is not small.get(1, "test", rows) and not small.kept


def test_pixel_batches_from_resident_floats_equal_batches_normalised_one_by_one():
    import torch

    from driftmatrix.features.inputs import PixelInputs, normalise

    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (40, 32, 32, 3), dtype=np.uint8)
    idx = torch.tensor([5, 0, 39, 17, 17])
    for channels_last in (False, True):
        resident, small = PixelInputs(images), PixelInputs(images)
        small.FLOAT_BUDGET = 0  # too small: normalised batch by batch
        resident.channels_last = small.channels_last = channels_last
        (a,), (b,) = resident.batch(idx), small.batch(idx)
        assert resident.floats is not None and small.floats is None
        assert torch.equal(a, b) and a.is_contiguous(memory_format=torch.channels_last) == channels_last
        assert torch.equal(a, normalise(torch.from_numpy(images[idx.numpy()]).permute(0, 3, 1, 2)))
        assert a.min() >= -1 and a.max() <= 1
        # the resident floats keep the layout of the first batch; a later switch still gets its own
        resident.channels_last = not channels_last
        (c,) = resident.batch(idx)
        assert torch.equal(c, a) and c.is_contiguous(memory_format=torch.channels_last) != channels_last


def test_scoring_before_training_names_the_missing_checkpoints_and_the_command(tmp_path, tiny_params, mlflow_store):
    import pytest

    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.data import synthetic
    from driftmatrix.stages import ingest
    from driftmatrix.data.table import DataError

    params = tiny_params(tmp_path, runtime={"workers": 1})
    synthetic.write_dataset(params.synthetic, tmp_path / "raw")
    ingest.run(params, tmp_path / "ingested")
    slice_stage.run(params, tmp_path / "ingested", tmp_path / "slices")
    with pytest.raises(DataError, match=r"8 of 8 units of MLP-S have no checkpoint \(first: seed 0 cutoff 1950\); "
                                        r"run `driftmatrix train -m MLP-S` first"):
        evaluation.run(params, "MLP-S", tmp_path / "slices", tmp_path / "ckpts", tmp_path / "scores")


def test_weights_changed_since_training_are_refused_by_train_and_evaluate_naming_the_file(
        tmp_path, tiny_params, mlflow_store):
    """A unit's weights file overwritten after training (its key no longer says what made it): the train
    stage refuses before DVC would save the folder, the evaluate stage before scores, runs or registry
    versions could stand for it; the file put back, both go on."""
    import re

    import pytest

    from driftmatrix.data import synthetic
    from driftmatrix.errors import DataError
    from driftmatrix.stages import evaluate as evaluation
    from driftmatrix.stages import ingest
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.stages import train
    from driftmatrix.units.store import CheckpointStore

    params = tiny_params(tmp_path, models={"Prior": {}}, runtime={"workers": 1})
    synthetic.write_dataset(params.synthetic, tmp_path / "raw")
    ingest.run(params, tmp_path / "ingested")
    slice_stage.run(params, tmp_path / "ingested", tmp_path / "slices")
    ckpts, scores = tmp_path / "ckpts", tmp_path / "scores"
    assert len(train.run(params, "Prior", tmp_path / "slices", ckpts)) == 8
    store = CheckpointStore(ckpts, "Prior")
    weights = store.folder(store.keys()[3]) / store.WEIGHTS
    original = weights.read_bytes()
    changed = bytearray(original)
    changed[-1] ^= 1  # still a safetensors file that loads: other weights, not a broken file
    weights.write_bytes(bytes(changed))
    refused = re.escape(f"{weights}: not the weights its unit.json records (changed since training; 1 of 8 units "
                        f"of Prior): restore them (`dvc checkout {ckpts / 'Prior'}`) or delete the unit folders")
    with pytest.raises(DataError, match=refused):
        train.run(params, "Prior", tmp_path / "slices", ckpts)
    with pytest.raises(DataError, match=refused):
        evaluation.run(params, "Prior", tmp_path / "slices", ckpts, scores)
    assert not scores.exists() or not list(scores.rglob("*.json"))  # nothing was scored from it
    weights.write_bytes(original)
    assert train.run(params, "Prior", tmp_path / "slices", ckpts) == []  # every unit done
    assert len(evaluation.run(params, "Prior", tmp_path / "slices", ckpts, scores)) == 8


def test_nothing_to_score_skips_mlflow_while_its_store_agrees_and_a_deleted_run_is_restored(tiny_run, tmp_path):
    """An evaluate stage process with every cell scored reads the sqlite store without importing
    MLflow (its import is most of such a process) while the store holds each unit's run, row,
    model, version and aliases; a run deleted meanwhile sends it through the MLflow sync, which
    restores that run."""
    import os
    import subprocess
    import sys

    import mlflow
    import yaml

    from driftmatrix.config import to_raw

    params, paths = tiny_run.params, tiny_run.paths
    assert params.tracking.log_models and params.tracking.register
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(to_raw(params)))
    script = ("import logging, sys\n"
              "from driftmatrix.config import load_params\n"
              "from driftmatrix.stages import evaluate\n"
              "logging.basicConfig(level=logging.INFO)\n"
              f"assert evaluate.run(load_params({str(params_file)!r}), 'MLP-S', {str(paths.slices)!r}, "
              f"{str(paths.checkpoints)!r}, {str(paths.scores)!r}, {str(paths.features)!r}) == []\n"
              "print(sorted(m for m in ('mlflow', 'sqlalchemy', 'torch') if m in sys.modules))\n")
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}

    def evaluate() -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    done = evaluate()
    assert done.stdout.split("\n")[0] == "[]", done.stdout
    assert "MLP-S: the MLflow store already holds every unit's run, row and version" in done.stderr

    client = mlflow.MlflowClient(tracking_uri=params.tracking.uri)
    exp_id = client.get_experiment_by_name(params.tracking.experiment).experiment_id
    run = client.search_runs([exp_id], "tags.kind = 'cutoff' and tags.model = 'MLP-S'", max_results=1)[0]
    client.delete_run(run.info.run_id)  # as in the UI
    done = evaluate()
    assert done.stdout.split("\n")[0] == "['mlflow', 'sqlalchemy']", done.stdout
    assert "mlflow MLP-S: 0 runs created, 1 restored, 0 superseded" in done.stderr
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "active"
    assert "already holds" in evaluate().stderr
