"""What is served is what was scored, for every model of a feature table: raw rows as pandas reads
the CSV (an integer category with a blank read as float, booleans, padded strings, NaN, integers
where floats are declared, categories the unit never saw) through the registered pyfunc model,
through `mlflow models serve` on loopback and through `estimate --data` give the evaluate stage's
numbers; a missing column is a 400 naming it; the loader, not the artifact, decides what skops
may build."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pandas as pd
import pytest
import yaml

from driftmatrix.tracking import pyfunc as serving

from driftmatrix.errors import DataError
from driftmatrix.features import transform
from driftmatrix.config import to_raw
from driftmatrix.data.table import DatasetMeta
from driftmatrix.learn.score import eval_mask
from driftmatrix.units.store import ScoreStore
from testkit.pipeline import Paths, run_all
from driftmatrix.learn.tasks import cell_score

from testkit.tables import make_table_params
from testkit.serving import held_out, in_process, post, served

MODELS = {"LogReg": {}, "HistGBT": {}, "LightGBM": {}, "MLP-Tab": {}, "Prior": {},
          "MyGBT": {"estimator": "sklearn.ensemble.GradientBoostingClassifier",
                    "params": {"max_depth": 2, "n_estimators": 15}, "trusted": ["sklearn.tree._tree.Tree"]}}
FEATURES = {"numeric": ["x", "n"], "categorical": ["zip", "flag", "member", "city"]}
YEARS = range(2001, 2006)
CUTOFF, SEED = 1, 0  # the 2002 units: held-out rows of 2001-2002, every row of 2003-2005


def write_table(path: Path, years=YEARS, per_year: int = 120, seed: int = 0, labels: bool = True) -> Path:
    """A CSV whose columns pandas types as a user's frame would hold them: ``zip`` integers with
    leading zeros and one blank (float64 with a NaN), ``flag`` True/False (bool), ``member``
    True/False with blanks (object), ``city`` padded strings with a city first seen in 2005."""
    rng = np.random.default_rng(seed)
    lines = ["id,year,x,n,zip,flag,member,city" + (",y" if labels else "")]
    for year in years:
        cities = [" paris", "rome ", " oslo "] + (["lima"] if year >= 2005 else [])
        for k in range(per_year):
            x = rng.normal()
            n, zipc = int(rng.integers(0, 10)), ["02134", "94110", "10001"][rng.integers(3)]
            flag, member = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
            city = cities[rng.integers(len(cities))]
            logit = 0.8 * x + 0.3 * (n - 5) + flag - (zipc == "94110") + 0.8 * (city.strip() == "rome") \
                + 0.2 * (year - 2003) * member
            y = int(rng.random() < 1 / (1 + np.exp(-logit)))
            fields = [f"r{year}-{k:03d}", str(year), "" if rng.random() < 0.1 else f"{x:.4f}", str(n),
                      "" if (year, k) == (2002, 0) else zipc, str(flag), "" if rng.random() < 0.1 else str(member),
                      city] + ([str(y)] if labels else [])
            lines.append(",".join(fields))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def flags(tmp_path_factory):
    """The table ingested, trained, scored and registered (one version per unit): (params, paths, root, raw frame)."""
    root = tmp_path_factory.mktemp("flags")
    csv = write_table(root / "raw" / "flags.csv")
    params = make_table_params(root, models=MODELS, dataset={
        "name": "flags", "options": {"timestamp": "year", "label": "y", "id": "id", "features": FEATURES}},
        tracking={"log_models": True, "register": True})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", params.tracking.uri)
        mlflow.set_tracking_uri(params.tracking.uri)
        paths = Paths(root / "out")
        run_all(params, paths)
        yield params, paths, root, pd.read_csv(csv)


def raw_rows(frame: pd.DataFrame, rows: pd.DataFrame, index: np.ndarray) -> pd.DataFrame:
    """The raw CSV rows (as pandas read them, every column) of slice rows ``index``."""
    return frame.set_index("id").loc[rows["id"].to_numpy()[index]].reset_index()


def test_the_raw_frame_holds_what_the_issue_names(flags):
    *_, frame = flags
    assert frame["zip"].dtype == np.float64 and frame["zip"].isna().sum() == 1 and 2134.0 in set(frame["zip"])
    assert frame["flag"].dtype == bool and frame["member"].dtype == object and frame["n"].dtype == np.int64
    assert frame["x"].isna().any() and frame["city"].str.startswith(" ").any() and frame["city"].str.endswith(" ").any()


@pytest.mark.parametrize("model", MODELS)
def test_raw_rows_through_the_registered_model_are_the_evaluate_stages_numbers(flags, model):
    params, paths, _, frame = flags
    rows, index = held_out(paths, CUTOFF)
    pyfunc = mlflow.pyfunc.load_model(f"models:/flags.{model}@cutoff-2002")
    assert [c["name"] for c in pyfunc.metadata.signature.inputs.to_dict()] == [*FEATURES["numeric"],
                                                                              *FEATURES["categorical"]]
    got = pyfunc.predict(raw_rows(frame, rows, index))  # extra columns (id, year, y) are ignored
    expected = in_process(params, paths, model, CUTOFF, SEED, index)
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=0, atol=1e-6)
    # ... and score exactly as the matrix cells
    unit = ScoreStore(paths.scores, model).read(_unit_key(params, paths, model))
    targets = rows["label"].to_numpy()
    for cell in unit["cells"].values():
        mask = eval_mask(rows["slice"].to_numpy(), rows["split"].to_numpy(), CUTOFF, cell["j"])
        pos = np.searchsorted(index, np.flatnonzero(mask))
        assert cell_score("binary", got.to_numpy()[pos], targets[mask])[0] == cell["value"]


def _unit_key(params, paths, model: str) -> str:
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.experiment import ExperimentInfo

    env = recorded_environment(params, model, paths.checkpoints)
    return ExperimentInfo(params, model, paths.slices, env).plan.unit(SEED, CUTOFF).key


def test_served_over_http_the_same_and_a_missing_column_is_a_400_naming_it(flags):
    params, paths, root, frame = flags
    rows, index = held_out(paths, CUTOFF)
    raw = raw_rows(frame, rows, index)
    body = {"dataframe_split": json.loads(raw.to_json(orient="split", index=False))}
    with served("models:/flags.LightGBM@cutoff-2002", params.tracking.uri, root / "serve.log") as url:
        status, answer = post(f"{url}/invocations", body)
        assert status == 200, answer
        got = np.array([[r[c] for c in ("0", "1")] for r in answer["predictions"]])
        np.testing.assert_allclose(got, in_process(params, paths, "LightGBM", CUTOFF, SEED, index), rtol=0, atol=1e-6)
        status, answer = post(f"{url}/invocations", {"dataframe_records": raw.drop(columns=["zip"]).head(3).to_dict("records")})
        assert status == 400 and "zip" in answer["message"] and "missing" in answer["message"]
        status, answer = post(f"{url}/invocations", {"inputs": ["just text", "more"]})
        assert status == 400 and all(f in answer["message"] for f in ("x", "n", "zip", "flag", "member", "city"))
    # a named estimator is served where this project's params.yaml names it (the server's working folder)
    (root / "params.yaml").write_text(yaml.safe_dump(to_raw(params)))
    with served("models:/flags.MyGBT@cutoff-2002", params.tracking.uri, root / "serve-custom.log", cwd=root) as url:
        status, answer = post(f"{url}/invocations", body)
        assert status == 200, answer
        got = np.array([[r[c] for c in ("0", "1")] for r in answer["predictions"]])
        np.testing.assert_allclose(got, in_process(params, paths, "MyGBT", CUTOFF, SEED, index), rtol=0, atol=1e-6)


def test_missing_or_bad_values_are_named_never_defaulted():
    numeric, categorical = ["x", "n"], ["zip", "flag", "city"]
    frame = pd.DataFrame({"x": [1.5, np.nan, 2.0], "n": np.array([1, 2, 3], dtype=np.int64),
                          "zip": [94110.0, np.nan, 2134.0], "flag": [True, False, True], "city": [" a", "b ", None]})
    out = transform.as_frame(frame, numeric, categorical)
    assert out["n"].dtype == np.float64 and out["n"].tolist() == [1.0, 2.0, 3.0]
    assert out["zip"].tolist() == ["94110", None, "2134"] and out["flag"].tolist() == ["1", "0", "1"]
    assert out["city"].tolist() == ["a", "b", None]
    # text as a file holds it is the same category as the typed value
    as_text = transform.as_frame(frame.astype({"zip": object, "flag": object}).assign(
        zip=["94110", "", "02134"], flag=["True", "false", "TRUE"]), numeric, categorical)
    assert as_text["zip"].tolist() == out["zip"].tolist() and as_text["flag"].tolist() == out["flag"].tolist()
    with pytest.raises(DataError, match=r"\['zip'\] missing"):
        transform.as_frame(frame.drop(columns=["zip"]), numeric, categorical)
    with pytest.raises(DataError, match="row 1: field 'x': 'abc' is not a number"):
        transform.as_frame(frame.assign(x=["1", "abc", "2"]), numeric, categorical)


def _download(name: str, dest: Path) -> Path:
    from mlflow.artifacts import download_artifacts

    return Path(download_artifacts(f"models:/{name}", dst_path=str(dest)))


def test_the_loader_decides_what_skops_may_build_never_model_json(flags, tmp_path, monkeypatch):
    """An edited trust list or estimator in model.json, and skops bytes that would build a type this
    project does not trust for the model, are refused with one line naming the version and the type,
    by serving.load (before MLflow runs anything) and by the pyfunc loader itself."""
    from safetensors.torch import load_file, save_file

    from driftmatrix.models import spec as custom, tabular

    monkeypatch.chdir(tmp_path)  # no params.yaml here: what this process parsed is the project
    name = "flags.LogReg@cutoff-2002"
    folder = _download(name, tmp_path / "clean")
    edits = {"trust": lambda d: d["info"]["options"].update(trusted=["builtins.eval"]),
             "estimator": lambda d: d["info"]["options"].update(estimator="sklearn.svm.SVC")}
    for what, edit in edits.items():
        bad = Path(shutil.copytree(folder, tmp_path / what))
        desc = json.loads((bad / "artifacts" / "model.json").read_text())
        edit(desc)
        (bad / "artifacts" / "model.json").write_text(json.dumps(desc))
        for load in (lambda: serving.load(str(bad)), lambda: mlflow.pyfunc.load_model(str(bad))):
            with pytest.raises(Exception) as err:
                load()
            line = str(err.value).strip().splitlines()[-1]
            assert ("builtins.eval" if what == "trust" else "sklearn.svm.SVC") in line and "refused" in line
            assert "LogReg" in line
    # the LogReg version's skops bytes replaced by a tree ensemble's: a type LogReg is not trusted with
    tree = load_file(str(_download("flags.MyGBT@cutoff-2002", tmp_path / "tree") / "artifacts" / "model.safetensors"))
    bad = Path(shutil.copytree(folder, tmp_path / "skops"))
    state = load_file(str(bad / "artifacts" / "model.safetensors"))
    save_file({**state, "estimator.skops": tree["estimator.skops"]}, str(bad / "artifacts" / "model.safetensors"))
    for load in (lambda: serving.load(str(bad)), lambda: mlflow.pyfunc.load_model(str(bad))):
        with pytest.raises(tabular.UntrustedModel, match=r"LogReg cutoff 2002 seed 0: .*sklearn\.tree\._tree\.Tree"):
            load()
    # a named estimator is trusted because this project's params name it; a project that does not, refuses it
    assert serving.load("models:/flags.MyGBT@cutoff-2002") is not None
    monkeypatch.delitem(custom.ESTIMATORS, "MyGBT")
    with pytest.raises(serving.NotAModel, match=r"models:/flags\.MyGBT@cutoff-2002: .*GradientBoostingClassifier"):
        serving.load("models:/flags.MyGBT@cutoff-2002")


def test_estimate_data_reads_a_new_feature_table_as_the_served_model_does(flags, tmp_path):
    """`estimate --data` on next year's CSV without labels: every model and cutoff estimated, its
    outputs those of the registered model on the same raw rows."""
    from driftmatrix.stages import newperiod
    from driftmatrix.data.table import read_manifest
    from driftmatrix.stages.estimates import load_model

    params, paths, _, _ = flags
    new = write_table(tmp_path / "next.csv", years=[2006], seed=1, labels=False)
    records = newperiod.run(params, new, paths.slices, paths.scores, paths.checkpoints, tmp_path / "none",
                            tmp_path / "out")
    assert {(r["model"], r["cutoff_index"]) for r in records} == {(m, i) for m in MODELS for i in range(len(YEARS))}
    assert json.loads((tmp_path / "out" / "estimates.json").read_text())["rows"] == 120
    raw, _ = newperiod.read_period(params, new, paths.slices, DatasetMeta.from_dict(read_manifest(paths.slices)["dataset"]))
    for model in ("LightGBM", "MyGBT", "Prior"):
        ms = load_model(params, model, read_manifest(paths.slices), paths.scores)
        outputs = newperiod.unit_outputs(params, model, ms, raw, paths.checkpoints, paths.slices)
        served_probs = mlflow.pyfunc.load_model(f"models:/flags.{model}@cutoff-2002").predict(pd.read_csv(new))
        np.testing.assert_allclose(transform.outputs_to_scores(outputs[0, CUTOFF], "binary"), served_probs.to_numpy(),
                                   rtol=0, atol=1e-6)
