"""The estimates stage and `driftmatrix estimate` on a tiny real pipeline (temporary MLflow store)."""

import json
import shutil
from dataclasses import replace

import numpy as np
import pytest
from typer.testing import CliRunner

from tinyparams import TINY_RUN_MODELS as MODELS


@pytest.fixture
def finished(tiny_run):
    """The session's tiny pipeline (tests/conftest.py); what these tests write goes beside its outputs."""
    return tiny_run.params, tiny_run.paths, tiny_run.root


def test_stage_writes_backtest_metrics_model_files_and_one_mlflow_run(finished, monkeypatch):
    from mlflow.tracking import MlflowClient

    from driftmatrix.stages import estimates as stage
    from driftmatrix.estimate.methods import METHODS
    from driftmatrix.tracking.runs import configure

    params, paths, tmp = finished
    out, metrics = tmp / "out" / "estimates", tmp / "metrics" / "estimates.json"
    # IW-inputs is opt-in (estimate.iw_inputs): off, the stage fits no domain classifier
    off = stage.run(params, paths.slices, paths.scores, tmp / "off", None)
    assert all("IW-inputs" not in s and "IW" in s for s in off.values())
    params = replace(params, extra={**params.extra, "estimate": {"iw_inputs": True}})
    result = stage.run(params, paths.slices, paths.scores, out, metrics, track=True)
    backtest = json.loads((out / "backtest.json").read_text())
    assert backtest == json.loads(json.dumps(result)) and set(backtest) == set(MODELS)
    K, S = 4, 2
    for model, s in backtest.items():
        assert s["noise_floor"] > 0 and s["n_future_cells"] == S * K * (K - 1) // 2
        assert s["hindsight_method"] in METHODS
        for m in METHODS:
            assert {"mae", "bias", "n_cells", "mae_label_shift", "mae_no_label_shift", "rho"} <= set(s[m])
        # the same cells one period ahead: carry-forward is now M[i, j - 1], not M[i, i]
        ahead = s["previous_period"]
        assert ahead["hindsight_method"] in METHODS and ahead["carry-forward"]["n_cells"] == s["n_future_cells"]
        assert ahead["carry-forward"]["mae"] != s["carry-forward"]["mae"]
        doc = json.loads((out / f"{model}.json").read_text())
        est = np.array(doc["methods"]["AC"]["estimate"], dtype=float)
        assert est.shape == (S, K, K) and np.isnan(est[:, np.tril_indices(K)[0], np.tril_indices(K)[1]]).all()
        assert np.isfinite(est[:, 0, 1:]).all()
        # the retraining policies' E: one period ahead, the method chosen for each period from earlier ones
        E = np.array(doc["policy_estimates"], dtype=float)
        assert E.shape == (S, K, K) and np.isnan(E[:, np.tril_indices(K)[0], np.tril_indices(K)[1]]).all()
        assert np.isfinite(E[:, np.triu_indices(K, 1)[0], np.triu_indices(K, 1)[1]]).all()
        assert list(s["chosen_methods"]) == doc["slices"][1:] and s["chosen_methods"][doc["slices"][1]] == "carry-forward"
        assert ahead["trusted_method"] in METHODS and ahead["causal_mae"] >= ahead[ahead["hindsight_method"]]["mae"]
        # period t = 1: carry-forward (no evidence), and from the held-out rows (both references agree)
        assert E[:, 0, 1] == pytest.approx(np.array(doc["truth"], dtype=float)[:, 0, 0])
    dvc = json.loads(metrics.read_text())
    assert set(dvc["MLP-S"]) >= {"noise_floor", "best_mae", "mae_trend", "mae_AC", "best_mae_previous_period"}
    assert dvc["MLP-S"]["best_mae"] == backtest["MLP-S"]["causal_mae"]
    assert dvc["MLP-S"]["best_mae_previous_period"] == backtest["MLP-S"]["previous_period"]["causal_mae"]
    csv = (out / "backtest.csv").read_text()
    assert "MLP-S,window,carry-forward," in csv and "MLP-S,previous,carry-forward," in csv
    exp_id = configure(params.tracking)
    runs = MlflowClient().search_runs([exp_id], filter_string="tags.kind = 'estimates'")
    assert len(runs) == 1 and {"MLP-S.trend.mae", "MLP-S.previous_period.trend.mae", "MLP-S.causal_mae",
                               "MLP-S.previous_period.causal_mae"} <= set(runs[0].data.metrics)

    from driftmatrix.stages import report

    html = report.run(paths.matrices, tmp / "report" / "report.html", audit=None).read_text()
    assert 'id="estimates"' in html and "noise floor" in html and html.count('class="errmap"') == len(MODELS)
    assert "one period ahead" in html and "@prev" in html
    # as a DVC stage the report logs the estimates' run too (one MLflow start for both)
    report.run(paths.matrices, tmp / "report" / "report.html", audit=None, params=params)
    runs = MlflowClient().search_runs([exp_id], filter_string="tags.kind = 'estimates'", order_by=["start_time DESC"])
    assert len(runs) == 2 and runs[0].data.metrics == runs[1].data.metrics
    logged = {a.path for a in MlflowClient().list_artifacts(runs[0].info.run_id, "estimates")}
    assert {"estimates/backtest.json", "estimates/backtest.csv", "estimates/MLP-S.json"} <= logged


def test_stage_holds_one_models_cell_statistics_at_a_time_and_summarises_as_all_at_once(finished, monkeypatch):
    """Each model's per-cell statistics (most of the stage's memory: at 20 models of 250 units,
    3 GB held at once) are freed once it is backtested, before the next model is read; the flags,
    calibrated across models, and every figure are those of all models backtested together."""
    import gc
    import weakref

    from driftmatrix.config import estimate_config
    from driftmatrix.data.table import read_manifest
    from driftmatrix.estimate.domain import WeightCache
    from driftmatrix.stages import estimates as stage

    class Tracked(list):  # a plain list takes no weak reference
        pass

    params, paths, tmp = finished
    real, alive, seen = stage.load_model, [], []

    def load_model(*args, **kwargs):
        gc.collect()
        seen.append(sum(ref() is not None for ref in alive))
        ms = real(*args, **kwargs)
        ms = replace(ms, stats=Tracked(ms.stats))
        alive.append(weakref.ref(ms.stats))
        return ms

    monkeypatch.setattr(stage, "load_model", load_model)
    result = stage.run(params, paths.slices, paths.scores, tmp / "one-at-a-time", None)
    assert seen == [0] * len(MODELS)  # no earlier model's statistics alive when the next is read
    monkeypatch.undo()
    cfg, manifest = estimate_config(params), read_manifest(paths.slices)
    together = stage.backtest_models({m: real(params, m, manifest, paths.scores) for m in MODELS}, cfg.min_ess,
                                     cfg.label_shift, cfg.cap_slack, WeightCache())
    assert len(MODELS) > 1 and result == {m: summary for m, (_, _, summary) in together.items()}
    assert {s["label_shift_flag_threshold"] for s in result.values()} == \
        {together[next(iter(MODELS))][2]["label_shift_flag_threshold"]}  # one threshold: calibrated on every model


def test_score_docs_and_matrices_carry_each_units_training_seconds(finished):
    """The evaluate stage copies each unit record's measured seconds into its score doc, and the
    matrices stage lays them out per (seed, cutoff): the cost side of a retraining policy."""
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.store import ScoreStore

    params, paths, tmp = finished
    store, ckpts = ScoreStore(paths.scores, "MLP-S"), CheckpointStore(paths.checkpoints, "MLP-S")
    assert store.keys() and all(store.read(k)["seconds"] == ckpts.record(k)["seconds"] > 0 for k in store.keys())
    doc = json.loads((paths.matrices / "MLP-S.json").read_text())
    assert doc["seconds"] == [[ckpts.record(k)["seconds"] for k in row] for row in doc["unit_keys"]]


def new_year_without_labels(params, tmp):
    """Year K+1 of the built-in data, its images in one folder: no class folders, no year in the names."""
    from driftmatrix.data import synthetic

    full = tmp / "next-full"
    synthetic.write_builtin("yearbook", replace(params.synthetic, years=params.synthetic.years + 1), full)
    year = params.synthetic.first_year + params.synthetic.years
    flat = tmp / "next"
    flat.mkdir(exist_ok=True)
    files = sorted(full.rglob(f"{year}_*.png"))
    for k, f in enumerate(files):
        shutil.copy(f, flat / f"img{k:04d}.png")
    return flat, len(files)


def test_estimate_command_on_a_folder_without_labels(finished, monkeypatch):
    from driftmatrix.cli import app
    from driftmatrix.config import to_raw

    import yaml

    params, paths, tmp = finished
    flat, n = new_year_without_labels(params, tmp)
    assert not any(p.is_dir() for p in flat.iterdir())
    raw = to_raw(params)
    raw["estimate"] = {"iw_inputs": True}
    (tmp / "params.yaml").write_text(yaml.safe_dump(raw))
    out = tmp / "new-period"
    got = CliRunner().invoke(app, ["estimate", "--data", str(flat), "-p", str(tmp / "params.yaml"),
                                   "--slices", str(paths.slices), "--scores", str(paths.scores),
                                   "--checkpoints", str(paths.checkpoints), "--estimates", str(tmp / "out" / "estimates"),
                                   "--out", str(out)])
    assert got.exit_code == 0, got.output
    assert "MLP-S: trusts" in got.output and "retrain:" in got.output
    doc = json.loads((out / "estimates.json").read_text())
    assert doc["rows"] == n and doc["noise_se"] == 2.0
    records = doc["records"]
    assert {(r["model"], r["cutoff"]) for r in records} == {(m, str(1950 + i)) for m in MODELS for i in range(4)}
    for r in records:
        assert r["lag"] == 4 - r["cutoff_index"] and r["trusted"] in r["estimates"] and r["seeds"] == 2
        assert r["retrain"] == (r["decision"]["signal"] > r["decision"]["tau"] and r["drop"] > r["noise"])
        assert "IW-inputs" in r["estimates"] and r["iw_inputs_ess"] > 0  # held-out rows vs the new images
        assert r["drop"] == pytest.approx(r["in_distribution"] - r["estimates"][r["trusted"]], abs=1e-2)
    assert (out / "estimates.csv").read_text().startswith("model,cutoff,method,estimate,drop")


def test_estimate_reads_no_labels_class_folders_give_the_same_estimates(finished):
    """The same images in F/ and M/ folders (labels present) give the same numbers: labels are ignored."""
    from driftmatrix.stages import newperiod

    params, paths, tmp = finished
    flat, _ = new_year_without_labels(params, tmp)
    year = params.synthetic.first_year + params.synthetic.years
    labelled = tmp / "next-full"
    a = newperiod.run(params, flat, paths.slices, paths.scores, paths.checkpoints, tmp / "out" / "estimates")
    sub = tmp / "labelled"
    for f in labelled.rglob(f"{year}_*.png"):
        (sub / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copy(f, sub / f.parent.name / f.name)
    images_a, _ = newperiod.read_images(flat, 32)
    images_b, _ = newperiod.read_images(sub, 32)
    assert sorted(map(bytes, images_a)) == sorted(map(bytes, images_b))
    b = newperiod.run(params, sub, paths.slices, paths.scores, paths.checkpoints, tmp / "out" / "estimates")
    for ra, rb in zip(a, b):  # AC, DoC ... are sums over rows: the order of the files does not matter
        for m, v in ra["estimates"].items():
            assert rb["estimates"][m] == pytest.approx(v, abs=1e-6)
