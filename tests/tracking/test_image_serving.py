"""What is served is what was scored, for image models: a registered version given the raw image
files (another size, four modes) predicts the evaluate stage's numbers, and `estimate --data` runs
every unit as the evaluate stage scored it (bf16, channels-last) through the same code.
The text models' counterpart: tests/features/test_text_serving.py; feature tables':
tests/tabular/test_tabular_serving.py."""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest

from driftmatrix.tracking import pyfunc as serving

from driftmatrix.features import transform
from testkit.pipeline import Paths, run_all
from driftmatrix.data.slicing import load_slices
from testkit.serving import held_out, in_process

IMAGE_MODELS = {"MLP-S": {}, "CNN-S": {}, "Prior": {}}
MODES = ("RGBA", "L", "P", "RGB")
CUTOFF, SEED = 1, 0


def registered(params, paths, model: str):
    """The CUTOFF version of ``model``, predicting on the device its units were scored on."""
    from driftmatrix.units.environment import recorded_environment

    device = recorded_environment(params, model, paths.checkpoints).device
    return mlflow.pyfunc.load_model(f"models:/tiny.{model}@cutoff-{1950 + CUTOFF}", model_config={"device": device})


@pytest.fixture(scope="module")
def portraits(tmp_path_factory):
    """A tiny image pipeline in bf16 whose raw PNGs are 48 x 48 in four modes (ingestion resizes
    them to 32 x 32), registered: (params, paths)."""
    from PIL import Image

    from driftmatrix.learn import precision
    from driftmatrix.data import synthetic
    from tinyparams import make_tiny_params

    root = tmp_path_factory.mktemp("portraits")
    params = make_tiny_params(root, models=IMAGE_MODELS, synthetic={"years": 3}, train={"seeds": [SEED], "precision": "bf16"},
                              tracking={"log_models": True, "register": True})
    synthetic.write_builtin("yearbook", params.synthetic, params.dataset.path)
    for k, path in enumerate(sorted(Path(params.dataset.path).rglob("*.png"))):
        with Image.open(path) as im:
            im.convert("RGB").resize((48, 48), Image.BICUBIC).convert(MODES[k % len(MODES)]).save(path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(precision, "cpu_has_bf16_units", lambda: True)  # bf16 on any CPU (emulated where it has no units)
        mp.setenv("MLFLOW_TRACKING_URI", params.tracking.uri)
        mlflow.set_tracking_uri(params.tracking.uri)
        paths = Paths(root / "out")
        run_all(params, paths, generate=True)  # the files are complete: left as they are
        yield params, paths


def image_files(params, rows: pd.DataFrame, index: np.ndarray) -> list[Path]:
    return [Path(params.dataset.path) / f"{i}.png" for i in rows["id"].to_numpy()[index]]


def test_png_files_of_another_size_and_mode_give_the_pipelines_probabilities(portraits):
    from PIL import Image

    params, paths = portraits
    rows, index = held_out(paths, CUTOFF)
    files = image_files(params, rows, index)
    with Image.open(files[0]) as a, Image.open(files[1]) as b:
        assert a.size == (48, 48) and {a.mode, b.mode} <= set(MODES) and a.mode != b.mode
    _, _, pixels = load_slices(paths.slices)
    np.testing.assert_array_equal(transform.read_images(files, (32, 32)), pixels[index])  # ingestion's own pixels
    for model in IMAGE_MODELS:
        pyfunc = registered(params, paths, model)
        expected = in_process(params, paths, model, CUTOFF, SEED, index)
        np.testing.assert_allclose(pyfunc.predict(transform.read_images(files, (32, 32))).to_numpy(), expected,
                                   rtol=0, atol=1e-6)
        direct = pyfunc.unwrap_python_model().predict(None, [str(f) for f in files])  # the class takes paths too
        np.testing.assert_allclose(direct.to_numpy(), expected, rtol=0, atol=1e-6)


def test_estimate_data_runs_each_unit_as_the_evaluate_stage_scored_it(portraits, tmp_path):
    """The recorded bf16 and channels-last: `estimate --data`'s outputs on the held-out images are
    the evaluate stage's, not the fp32 ones; the command reads a folder of such PNGs."""
    import shutil

    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.stages import newperiod
    from driftmatrix.data.table import read_manifest
    from driftmatrix.stages.estimates import load_model
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.experiment import ExperimentInfo

    params, paths = portraits
    rows, index = held_out(paths, CUTOFF)
    _, _, pixels = load_slices(paths.slices)
    manifest = read_manifest(paths.slices)
    for model in ("CNN-S", "MLP-S"):
        env = recorded_environment(params, model, paths.checkpoints)
        assert env.precision == "bf16"
        ms = load_model(params, model, manifest, paths.scores)
        got = newperiod.unit_outputs(params, model, ms, np.asarray(pixels[index]), paths.checkpoints, paths.slices)
        evaluated = in_process(params, paths, model, CUTOFF, SEED, index, logits=True)
        np.testing.assert_allclose(got[0, CUTOFF], evaluated, rtol=0, atol=1e-6)
        exp = ExperimentInfo(params, model, paths.slices, env)
        config = {**serving.serving_config(params, exp, (32, 32, 3)), "precision": "fp32"}
        net = transform.load_network(CheckpointStore(paths.checkpoints, model).folder(exp.plan.unit(SEED, CUTOFF).key),
                                   config)
        fp32 = transform.forward(net, transform.model_inputs(config, np.asarray(pixels[index])), config)
        assert np.abs(fp32 - evaluated).max() > 1e-4  # the control: precision matters
    folder = tmp_path / "new"
    folder.mkdir()
    for f in image_files(params, rows, index):
        shutil.copy(f, folder / f.name)
    records = newperiod.run(params, folder, paths.slices, paths.scores, paths.checkpoints, tmp_path / "none",
                            tmp_path / "out")
    assert {(r["model"], r["cutoff_index"]) for r in records} == {(m, i) for m in IMAGE_MODELS for i in range(3)}
    assert json.loads((tmp_path / "out" / "estimates.json").read_text())["rows"] == len(index)
