"""The policy stage on a tiny image pipeline (with the estimates and the audit that feed its
triggers) and on a feature table: the contract files, recomputed independently from the matrices."""

import csv
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from driftmatrix.analysis import matrixfile
from driftmatrix.config import ConfigError, PolicyConfig, parse_params, policy_config
from driftmatrix.stages import policy as stage
from testkit.pipeline import Paths, prepare, run_all, train_and_evaluate

MODELS = {"MLP-S": {}, "Prior": {}}


@pytest.fixture(scope="module")
def finished(tmp_path_factory, tiny_params):
    from driftmatrix.stages import audit, estimates

    tmp = tmp_path_factory.mktemp("policy")
    params = tiny_params(tmp, models=MODELS, synthetic={"years": 6})
    paths = Paths(tmp / "out")
    run_all(params, paths, generate=True)
    estimates.run(params, paths.slices, paths.scores, paths.root / "estimates", None)
    audit.run(params, paths.slices, paths.root / "audit", paths.validation)
    return params, paths, tmp


def brute_oracle(M, k):
    """Best mean served score of one seed's matrix with at most k retrains, every schedule tried."""
    K = M.shape[0]
    best = -math.inf
    for n in range(k + 1):
        for rows in itertools.combinations(range(1, K - 1), n):
            sched = [0, *rows]
            served = [M[max(r for r in sched if r <= j - 1), j] for j in range(1, K)]
            best = max(best, np.nanmean(served))
    return best


def test_stage_writes_the_contract_and_its_numbers_are_the_matrices(finished):
    params, paths, tmp = finished
    out, metrics = paths.root / "policy", tmp / "metrics" / "policy.json"
    o = stage.run(paths.matrices, out, policy_config(params), paths.root / "estimates", paths.root / "audit", metrics)
    with open(out / "policies.csv") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == ("model", "policy", "param", "label_delay", "retrains", "score", "std")
        rows = list(reader)
    assert {r["policy"] for r in rows} == {"never", "periodic", "oracle", "estimate", "cumulative", "label", "drift"}
    for model in MODELS:
        stack = matrixfile.read(paths.matrices / f"{model}.json").seed_values
        S, K, _ = stack.shape
        got = {(r["policy"], r["param"]): r for r in rows if r["model"] == model}
        for H in range(1, K - 1):  # periodic(H): period j served by cutoff ((j-1) // H) * H
            want = np.mean([np.nanmean([M[((j - 1) // H) * H, j] for j in range(1, K)]) for M in stack])
            assert float(got["periodic", str(H)]["score"]) == pytest.approx(want, abs=0.01)
        for k in range(K - 1):
            want = np.mean([brute_oracle(M, k) for M in stack])
            assert float(got["oracle", str(k)]["score"]) == pytest.approx(want, abs=0.01)
        for (p, _), r in got.items():  # at equal retrains no causal policy beats the oracle
            if p != "oracle":
                assert float(r["score"]) <= float(got["oracle", str(math.ceil(float(r["retrains"])))]["score"]) + 1e-6
        doc = json.loads((out / f"{model}.json").read_text())
        assert all(len(run["scores"]) == S and len(run["schedules"]) == S for run in doc["runs"])
        assert all(run["schedules"][0][0] == 0 and len(run["seconds"]) == S for run in doc["runs"])
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["model"] != "Prior" and rec["text"] == o.rec.text and set(rec["per_model"]) == set(MODELS)
    assert rec["model"] is not None or rec["text"].startswith("No model beats the Prior baseline")
    m = json.loads(metrics.read_text())
    assert m["recommended"] == (rec["model"] or "none") and {"never", "chosen_score", "estimate_score"} <= set(m["MLP-S"])
    assert not (out / "frontier.png").exists()  # the report stage draws it (matplotlib: seconds)


def test_report_shows_the_policy_and_logs_its_run(finished, monkeypatch):
    from mlflow.tracking import MlflowClient

    from driftmatrix.stages import report
    from driftmatrix.tracking.runs import configure

    params, paths, tmp = finished
    stage.run(paths.matrices, paths.root / "policy", policy_config(params), paths.root / "estimates", None, None)
    html = report.run(paths.matrices, paths.root / "report" / "report.html", params=params).read_text()
    assert 'id="policy"' in html and "never by lag 0" in html and 'alt="policy frontier"' in html
    assert (paths.root / "report" / "plots" / "policy_frontier.png").read_bytes()[:4] == b"\x89PNG"
    exp = configure(params.tracking)
    client = MlflowClient()
    (run,) = client.search_runs([exp], "tags.kind = 'policy'")
    assert run.data.tags["recommended"] in ("MLP-S", "none") and "MLP-S.score" in run.data.metrics
    logged = {Path(a.path).name for a in client.list_artifacts(run.info.run_id, "policy")}
    assert {"policies.csv", "recommendation.json", "MLP-S.json", "policy_frontier.png"} <= logged


def test_policy_command_reads_params_and_flags_override(finished, tmp_path, monkeypatch):
    import yaml

    from driftmatrix.cli import app
    from driftmatrix.config import to_raw

    params, paths, tmp = finished
    raw = to_raw(params)
    raw["policy"] = {"retrain_cost": 0.0, "budget": 1, "label_delay": 1}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    got = CliRunner().invoke(app, ["policy", str(paths.matrices), "--out", str(tmp_path / "p"), "-p",
                                   str(tmp_path / "params.yaml"), "--label-delay", "0"])
    assert got.exit_code == 0, got.output
    rec = json.loads((tmp_path / "p" / "recommendation.json").read_text())
    assert (rec["budget"], rec["label_delay"], rec["retrain_cost"]) == (1, 0, 0.0)
    assert all(r["retrains"] <= 1 for r in rec["per_model"].values())


def test_policy_section_is_checked_when_params_are_read(tiny_params, tmp_path):
    from driftmatrix.config import to_raw

    raw = to_raw(tiny_params(tmp_path))
    assert policy_config(parse_params(raw)) == PolicyConfig(retrain_cost=0.1, budget=None, label_delay=0)
    for bad, field in (({"retrain_cost": -1}, "retrain_cost"), ({"budget": 1.5}, "budget"),
                       ({"label_delay": "x"}, "label_delay"), ({"cost": 1}, "unknown")):
        with pytest.raises(ConfigError, match=f"policy.*{field}"):
            parse_params({**raw, "policy": bad})


def test_stage_on_a_feature_table(tmp_path):
    from driftmatrix.stages import matrices

    params = parse_params({  # a generated feature table, as tests/tabular's
        "dataset": {"name": "tinytab", "source": "table", "path": str(tmp_path / "raw"), "task": "binary",
                    "options": {"timestamp": "year", "label": "churn", "id": "id", "features": "auto"}},
        "synthetic": {"seed": 0, "first_year": 2000, "years": 5, "per_year": 200, "span": 6},
        "slicing": {"min_samples": 10}, "train": {"seeds": [0, 1]}, "models": {"LogReg": {}, "Prior": {}},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "tinytab",
                     "artifact_root": str(tmp_path / "mlruns"), "log_models": False},
        "runtime": {"workers": 1}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    train_and_evaluate(params, paths)
    matrices.run(params, paths.scores, paths.matrices, slices_dir=paths.slices)
    o = stage.run(paths.matrices, paths.root / "policy", PolicyConfig(), None, None, None)
    assert set(o.runs) == {"LogReg", "Prior"} and o.rec.model in ("LogReg", None)
    rows = (paths.root / "policy" / "policies.csv").read_text().splitlines()
    assert rows[0] == "model,policy,param,label_delay,retrains,score,std"
    assert {r.split(",")[1] for r in rows[1:]} == {"never", "periodic", "oracle", "label"}
