"""`driftmatrix estimate --data PATH --registry` end to end: a tiny pipeline trained with
registration on (temporary MLflow store), then the same new period estimated from the MLflow
registry (no checkpoints folder at all) and from the checkpoints. The versions hold the
checkpoints' weights, so every record must be the same numbers; a missing version is a one-line
error naming model, seed and cutoff."""

import json
import logging
from dataclasses import replace

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from testkit.pipeline import Paths, prepare, train_and_evaluate

MODELS = {"MLP-S": {}, "Prior": {}}
YEARS = 3


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_params):
    """Trained and scored units with one registry version (and cutoff aliases) each, the params
    as a params.yaml, and the next year's images (labels dropped) as an .npy."""
    from driftmatrix.config import to_raw
    from driftmatrix.data import synthetic

    tmp = tmp_path_factory.mktemp("estimate-registry")
    params = tiny_params(tmp, models=MODELS, synthetic={"years": YEARS}, train={"seeds": [0]},
                         tracking={"log_models": True, "register": True})
    paths = Paths(tmp / "out")
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)  # the params' temporary store, never another
        prepare(params, paths, generate=True)
        train_and_evaluate(params, paths)
    images, _, years = synthetic.generate(replace(params.synthetic, years=YEARS + 1))
    np.save(tmp / "next.npy", images[years == params.synthetic.first_year + YEARS])
    (tmp / "params.yaml").write_text(yaml.safe_dump(to_raw(params)))
    return params, paths, tmp


def estimate(paths, tmp, params_file, out, registry: bool):
    """`driftmatrix estimate` on the next year; from the registry with a checkpoints folder that
    does not exist (the registry and the scores are all it may read)."""
    from driftmatrix.cli import app

    checkpoints = tmp / "no-checkpoints" if registry else paths.checkpoints
    return CliRunner().invoke(app, ["estimate", "--data", str(tmp / "next.npy"), "-p", str(params_file),
                                    "--slices", str(paths.slices), "--scores", str(paths.scores),
                                    "--checkpoints", str(checkpoints), "--estimates", str(tmp / "no-backtest"),
                                    "--out", str(out)] + ["--registry"] * registry)


def test_registry_versions_give_the_checkpoints_estimates_for_every_cutoff(trained, monkeypatch):
    from mlflow.tracking import MlflowClient

    from driftmatrix.tracking.runs import alias_for, configure, registered_name

    params, paths, tmp = trained
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cutoffs = [str(params.synthetic.first_year + k) for k in range(YEARS)]
    configure(params.tracking)
    for model in MODELS:
        aliases = MlflowClient().get_registered_model(registered_name(params.dataset.name, model)).aliases
        assert {alias_for(c, 0) for c in cutoffs} <= set(aliases)

    docs = {}
    for registry in (False, True):
        out = tmp / ("from-registry" if registry else "from-checkpoints")
        got = estimate(paths, tmp, tmp / "params.yaml", out, registry)
        assert got.exit_code == 0, got.output
        assert "MLP-S: trusts" in got.output and "Prior: trusts" in got.output
        docs[registry] = json.loads((out / "estimates.json").read_text())

    records = docs[True]["records"]
    assert docs[True]["rows"] == params.synthetic.per_year
    assert {(r["model"], r["cutoff"]) for r in records} == {(m, c) for m in MODELS for c in cutoffs}
    assert all(r["seeds"] == 1 and set(r["estimates"]) >= {"trend", "AC", "DoC"} for r in records)
    assert records == docs[False]["records"]


def test_a_missing_registry_version_is_a_one_line_error_naming_the_unit(trained, monkeypatch, caplog):
    """Another dataset name: no registered model of that name, every model is skipped with one
    line saying which unit the registry did not give, and the command ends on a DataError (one
    ``error:`` line from ``cli.main``), not a traceback."""
    from driftmatrix.config import to_raw
    from driftmatrix.data.table import DataError

    params, paths, tmp = trained
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    raw = to_raw(params)
    raw["dataset"]["name"] = "renamed"  # unit keys do not include the name: the scores still match
    renamed = tmp / "renamed.yaml"
    renamed.write_text(yaml.safe_dump(raw))
    with caplog.at_level(logging.WARNING, logger="driftmatrix.stages.newperiod"):
        got = estimate(paths, tmp, renamed, tmp / "missing", registry=True)
    assert isinstance(got.exception, DataError) and "could be estimated" in str(got.exception)
    lines = [r.getMessage() for r in caplog.records if "registry" in r.getMessage()]
    assert len(lines) == len(MODELS)
    for model, line in zip(MODELS, lines):
        assert line.startswith(f"estimate: {model} seed 0 cutoff {params.synthetic.first_year}: the MLflow registry "
                               "did not give a model") and "without --registry" in line and "\n" not in line


def test_a_version_of_another_key_or_other_weights_is_never_used(trained, monkeypatch, caplog):
    """The version in a unit's slot holds another unit key (an old configuration, another clone),
    or this unit's key with weights other than those the scores came from (another CPU): the model
    is skipped with one line naming the unit, the version and the mismatch, instead of mixing that
    version's outputs with this plan's statistics; the other model is still estimated."""
    from mlflow.tracking import MlflowClient

    from driftmatrix.tracking.runs import configure, registered_name
    from driftmatrix.units.plan import planned_unit

    params, paths, tmp = trained
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    configure(params.tracking)
    client = MlflowClient()
    cutoff = str(params.synthetic.first_year)
    unit = planned_unit(params, "MLP-S", cutoff, 0, paths.slices, paths.checkpoints)
    name = registered_name(params.dataset.name, "MLP-S")
    (version,) = [v for v in client.search_model_versions(f"name = '{name}'") if v.tags["unit_key"] == unit.key]
    why = {"unit_key": f"has unit key 0123456789ab, this plan's is {unit.key} (trained under other code, data, "
                       "settings or environment): not used",
           "weights_digest": f"holds this unit but weights ffffffffffff (computed on {version.tags['hardware']}), "
                             f"its scores came from {version.tags['weights_digest'][:12]}: not used"}
    for tag, value in (("unit_key", "0123456789ab"), ("weights_digest", "f" * 64)):
        caplog.clear()
        client.set_model_version_tag(name, version.version, tag, value)
        try:
            with caplog.at_level(logging.WARNING, logger="driftmatrix.stages.newperiod"):
                got = estimate(paths, tmp, tmp / "params.yaml", tmp / f"other-{tag}", registry=True)
        finally:
            client.set_model_version_tag(name, version.version, tag, version.tags[tag])
        assert got.exit_code == 0, got.output
        assert "Prior: trusts" in got.output and "MLP-S" not in got.output
        (line,) = [r.getMessage() for r in caplog.records if "registry" in r.getMessage()]
        assert line == (f"estimate: MLP-S seed 0 cutoff {cutoff}: the MLflow registry did not give a model "
                        f"({name} version {version.version} {why[tag]}); without --registry the checkpoints are read")
