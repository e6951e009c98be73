"""Optuna tuning: the objective reads D_<=cutoff only, and a killed study resumes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import yaml

from driftmatrix.config import ConfigError, parse_params, replace
from driftmatrix.units.experiment import Experiment
from driftmatrix.learn.fit import cutoff_train_rows

CUTOFF, V = 4, 2  # tune on slices 0..4: inner train 0..2, validation 3..4; slices 5..7 are the future
TUNE = {"cutoff": 1954, "validation_periods": V, "n_trials": 2, "seed": 0, "pruner_startup_trials": 1,
        "space": {"lr": {"low": 1e-3, "high": 1e-2, "log": True}, "epochs": {"low": 1, "high": 2},
                  "batch_size": [32, 64], "weight_decay": {"low": 0.0, "high": 1e-3},
                  "dropout": {"low": 0.0, "high": 0.2}}}


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.data import synthetic
    from driftmatrix.stages import ingest

    tmp = tmp_path_factory.mktemp("tune")
    raw = {
        "dataset": {"name": "fading", "path": str(tmp / "raw")},
        "synthetic": {"scenario": "fading-cue", "years": 8, "per_year": 100},
        "train": {"seeds": [0], "epochs": 2, "device": "cpu"},
        "models": {"MLP-S": {}},
        "tracking": {"experiment": "tune-test", "log_models": False, "register": False},
        "tune": TUNE}
    (tmp / "params.yaml").write_text(yaml.safe_dump(raw))
    params = parse_params(raw)
    synthetic.write_dataset(params.synthetic, tmp / "raw")
    ingest.run(params, tmp / "ingested")
    slice_stage.run(params, tmp / "ingested", tmp / "slices")
    torch.set_num_threads(2)
    return tmp, params


class Recording:
    """Inputs that remember every row index read through them."""

    def __init__(self, inputs):
        self.inputs, self.seen = inputs, set()

    def __len__(self):
        return len(self.inputs)

    def to(self, device):
        return self

    def batch(self, idx):
        self.seen.update(idx.tolist())
        return self.inputs.batch(idx)


def _flip(exp, rows):
    """Flip the binary labels of ``rows`` (numpy and tensor targets alike)."""
    targets = exp.targets_np.copy()
    targets[rows] = 1 - targets[rows]
    exp.targets_np, exp.targets = targets, torch.as_tensor(targets)


def _value(exp, cfg):
    from driftmatrix.stages import tune

    data = tune.restrict(exp, CUTOFF, V)
    return tune.objective(data, cfg, exp.new_model, 0, exp.device), data


def test_inner_split_is_inside_the_cutoffs_training_data(slices):
    from driftmatrix.stages import tune

    tmp, params = slices
    exp = Experiment(params, "MLP-S", tmp / "slices")
    train, val = tune.inner_split(exp.slice_ids, exp.split, CUTOFF, V)
    assert set(np.unique(exp.slice_ids[train])) == {0, 1, 2} and set(np.unique(exp.slice_ids[val])) == {3, 4}
    assert (exp.split[train] == "train").all() and (exp.split[val] == "train").all()
    assert np.array_equal(np.sort(np.concatenate([train, val])), cutoff_train_rows(exp.slice_ids, exp.split, CUTOFF))
    with pytest.raises(ConfigError, match="no slice to train on"):
        tune.inner_split(exp.slice_ids, exp.split, 1, 2)


def test_objective_starts_the_model_at_the_inner_train_prior(slices):
    from driftmatrix.stages import tune
    from driftmatrix.learn.tasks import cell_score

    tmp, params = slices
    exp = Experiment(params, "MLP-S", tmp / "slices")
    data = tune.restrict(exp, CUTOFF, V)
    with torch.no_grad():  # no signal from the inputs: the output is the bias alone
        models = []

        def silent(seed):
            models.append(exp.new_model(seed))
            for m in models[-1].modules():
                if isinstance(m, torch.nn.Linear):
                    m.weight.zero_()
            return models[-1]

        value = tune.objective(data, replace(exp.cfg, epochs=0), silent, 0, exp.device)
    majority = np.bincount(data.targets_np[data.train_pos]).argmax()
    val_y, val_s = data.targets_np[data.val_pos], data.slice_ids[data.val_pos]
    expected = np.mean([cell_score("binary", np.eye(2)[np.full((val_s == k).sum(), majority)], val_y[val_s == k])[0]
                        for k in np.unique(val_s)])
    assert value == pytest.approx(expected)
    shares = np.bincount(data.targets_np[data.train_pos], minlength=2) / len(data.train_pos)
    np.testing.assert_allclose(models[0].net[-1].bias.detach().numpy(), np.log(shares), rtol=1e-6)


def test_objective_never_reads_a_row_after_the_cutoff(slices):
    from driftmatrix.stages import tune

    tmp, params = slices
    exp = Experiment(params, "MLP-S", tmp / "slices")
    cfg = replace(exp.cfg, epochs=2)
    clean, _ = _value(exp, cfg)

    # Poison every row the tuner must not read: all of slices 5..7 and the test splits of 0..4.
    allowed = cutoff_train_rows(exp.slice_ids, exp.split, CUTOFF)
    banned = np.setdiff1d(np.arange(len(exp.slice_ids)), allowed)
    assert (exp.slice_ids[banned] > CUTOFF).sum() == 300
    gen = torch.Generator().manual_seed(1)
    exp.inputs.data[torch.as_tensor(banned)] = torch.randint(0, 256, exp.inputs.data[banned].shape,
                                                             generator=gen, dtype=torch.uint8)
    _flip(exp, banned)
    exp.inputs = Recording(exp.inputs)
    poisoned, data = _value(exp, cfg)

    assert poisoned == clean
    assert exp.inputs.seen == set(allowed.tolist())  # every row read lies in D_<=cutoff, and all of it
    assert exp.slice_ids[sorted(exp.inputs.seen)].max() == CUTOFF
    assert set(data.rows.tolist()) == set(allowed.tolist())

    # The check can fail: poisoning a validation slice does change the objective.
    val_rows = data.rows[data.val_pos]
    _flip(exp, val_rows)
    assert _value(exp, cfg)[0] != clean


def test_study_resumes_after_a_kill_and_writes_the_preset(slices, monkeypatch):
    import optuna
    from mlflow import MlflowClient

    from driftmatrix.tracking import runs as tracking
    from driftmatrix.stages import tune

    tmp, params = slices
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    storage = f"sqlite:///{tmp / 'tuning' / 'optuna.db'}"
    kw = dict(storage=storage, presets_dir=tmp / "presets")

    first = tune.run(params, "MLP-S", tmp / "slices", n_trials=2, **kw)
    assert first["finished"] == 2 and first["ran"] == 2
    # A process killed mid-trial leaves an Optuna trial and an MLflow run RUNNING.
    study = optuna.load_study(study_name="fading-MLP-S", storage=storage)
    study.ask()
    exp_id = tracking.configure(params.tracking)
    client = MlflowClient(tracking_uri=uri)
    orphan = client.create_run(exp_id, tags={"kind": "tuning", "study": "fading-MLP-S"}).info.run_id

    second = tune.run(params, "MLP-S", tmp / "slices", n_trials=4, **kw)
    assert second["failed_leftovers"] == 1 and second["ran"] == 2 and second["finished"] == 4
    study = optuna.load_study(study_name="fading-MLP-S", storage=storage)
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.FAIL) == 1
    assert len([t for t in study.trials if t.state.is_finished() and t.state.name != "FAIL"]) == 4
    assert all("dropout" not in t.params for t in study.trials)  # MLP-S has no dropout layer
    assert client.get_run(orphan).info.status == "KILLED"

    runs = client.search_runs([exp_id], "tags.kind = 'tuning' and attributes.status = 'FINISHED'")
    assert sorted(r.info.run_name for r in runs) == [f"tune · MLP-S · trial {n}" for n in (0, 1, 3, 4)]
    assert all(r.data.tags["tuning_cutoff"] == "1954" and r.data.params["val_slices"] == "1953,1954" for r in runs)
    assert all("val_score" in r.data.metrics for r in runs)

    text = (tmp / "presets" / "fading-MLP-S.yaml").read_text()
    preset = yaml.safe_load(text)
    assert set(preset) == {"models", "tuned"}
    assert preset["tuned"] == {"MLP-S": {"cutoff": "1954", "study": "fading-MLP-S"}}
    header = " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("#"))
    assert "Caveat: MLP-S: hyperparameters tuned at cutoff 1954" in header
    assert "before 1954 (4 cutoffs, 1950..1953)" in header  # the rows that use later data's settings
    assert set(preset["models"]["MLP-S"]) == {"lr", "epochs", "batch_size", "weight_decay"}
    assert preset["models"]["MLP-S"] == study.best_params
    merged = parse_params({"models": preset["models"], "tuned": preset["tuned"]})  # valid params entries
    assert merged.train_for("MLP-S").lr == pytest.approx(study.best_params["lr"])
    labels = [str(y) for y in range(1950, 1958)]  # the study's slices
    assert "Caveat: " + tune.caveat("MLP-S", merged.extra["tuned"]["MLP-S"]["cutoff"], labels) in header

    # Nothing to do when the study is complete.
    assert tune.run(params, "MLP-S", tmp / "slices", n_trials=4, **kw)["ran"] == 0


def test_a_changed_setup_is_refused(slices, monkeypatch):
    from driftmatrix.stages import tune

    tmp, params = slices
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow2.db'}")
    storage = f"sqlite:///{tmp / 'other.db'}"
    tune.run(params, "MLP-S", tmp / "slices", n_trials=1, storage=storage, presets_dir=tmp / "p2", log_mlflow=False)
    changed = replace(params, extra={"tune": {**TUNE, "validation_periods": 1}})
    with pytest.raises(ConfigError, match="another setup"):
        tune.run(changed, "MLP-S", tmp / "slices", n_trials=2, storage=storage, presets_dir=tmp / "p2",
                 log_mlflow=False)


def test_cli_runs_a_study(slices, monkeypatch):
    from typer.testing import CliRunner

    from driftmatrix.cli import app

    tmp, _ = slices
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp / 'mlflow3.db'}")
    result = CliRunner().invoke(app, ["tune", "-m", "MLP-S", "-p", str(tmp / "params.yaml"),
                                      "--slices", str(tmp / "slices"), "--n-trials", "1",
                                      "--storage", f"sqlite:///{tmp / 'cli.db'}", "--presets", str(tmp / "p3")])
    assert result.exit_code == 0, result.output
    assert "fading-MLP-S: 1 finished trials" in result.output and (tmp / "p3" / "fading-MLP-S.yaml").exists()


def test_tune_config_errors_name_the_key(slices):
    from driftmatrix.stages import tune

    _, params = slices
    for bad, match in (({k: v for k, v in TUNE.items() if k != "cutoff"}, "tune.cutoff"),
                       ({**TUNE, "space": {"seeds": [1, 2]}}, "not tunable"),
                       ({**TUNE, "space": {"lr": {"low": 1e-3}}}, "tune.space.lr"),
                       ({**TUNE, "validation_periods": 0}, "validation_periods"),
                       ({**TUNE, "parallel": 0}, "tune.parallel"),
                       ({**TUNE, "trials": 3}, "unknown")):
        with pytest.raises(ConfigError, match=match):
            tune.tune_config(replace(params, extra={"tune": bad}))
    assert tune.tune_config(params).cutoff == "1954"  # YAML ints become slice labels


def test_caveat_names_the_cutoffs_that_use_settings_chosen_on_later_data():
    from driftmatrix.stages import tune

    labels = ["2000", "2001", "2002", "2003"]
    text = tune.caveat("FFN-S", "2002", labels)
    assert text.startswith("FFN-S: hyperparameters tuned at cutoff 2002, on data through 2002 only")
    assert "including those before 2002 (2 cutoffs, 2000..2001)" in text and "from 2002 on are strictly out of time" in text
    assert "(none in this study)" in tune.caveat("FFN-S", "2000", labels)
    assert tune.caveat("FFN-S", 2002, labels) == text  # a YAML int cutoff names the same slice
    assert "before 2002. Those rows" in tune.caveat("FFN-S", "2002")  # without labels: no cutoffs named
    assert "before 2009. Those rows" in tune.caveat("FFN-S", "2009", labels)  # a cutoff not in the study


def test_a_pruning_copy_decides_as_the_live_study():
    import optuna
    from optuna.trial import TrialState

    from driftmatrix.stages import tune

    study = optuna.create_study(direction="maximize",
                                pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    for values in ([0.5, 0.6, 0.7], [0.7, 0.8, 0.9]):
        trial = study.ask()
        for step, v in enumerate(values):
            trial.report(v, step)
        study.tell(trial, values[-1])
    pruning = tune.Pruning("maximize", 1, 0, tuple(study.get_trials(states=(TrialState.COMPLETE,))))
    decisions = []
    for scores in ([0.65, 0.7, 0.8], [0.55, 0.6, 0.9]):
        live, judge = study.ask(), pruning.judge()
        for step, v in enumerate(scores):
            live.report(v, step)
            judge.report(v, step)
            decisions.append((judge.should_prune(), live.should_prune()))
        study.tell(live, state=TrialState.FAIL)
    assert [a for a, _ in decisions] == [b for _, b in decisions]
    assert True in [a for a, _ in decisions] and False in [a for a, _ in decisions]


def test_ray_executor_runs_the_same_study_as_local(slices, monkeypatch, ray_cluster):
    """Rounds of two trials (asked together, told in trial order): the same study on either executor."""
    import optuna
    from mlflow import MlflowClient

    from driftmatrix.stages import tune

    tmp, params = slices
    seen = {}
    for executor in ("local", "ray"):
        uri = f"sqlite:///{tmp / f'mlflow-{executor}.db'}"
        monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
        p = replace(params, extra={**params.extra, "tune": {**TUNE, "parallel": 2, "pruner_warmup_epochs": 0},
                                   "runtime": {"executor": executor}})
        storage = f"sqlite:///{tmp / f'study-{executor}.db'}"
        result = tune.run(p, "MLP-S", tmp / "slices", n_trials=4, storage=storage, presets_dir=tmp / executor)
        assert result["ran"] == 4 and result["finished"] == 4
        study = optuna.load_study(study_name="fading-MLP-S", storage=storage)
        client = MlflowClient(tracking_uri=uri)
        runs = client.search_runs([client.get_experiment_by_name("tune-test").experiment_id], "tags.kind = 'tuning'")
        seen[executor] = (
            [(t.number, t.state.name, t.params, t.value, t.intermediate_values) for t in study.trials],
            sorted((r.info.run_name, r.info.status, r.data.tags["state"], r.data.metrics.get("objective"),
                    tuple((m.step, m.value) for m in client.get_metric_history(r.info.run_id, "val_score")))
                   for r in runs),
            (tmp / executor / "fading-MLP-S.yaml").read_text().split("\n", 1)[1])  # the header names the storage
    assert seen["local"] == seen["ray"]
    trials, runs, _ = seen["ray"]
    assert [t[1] for t in trials].count("COMPLETE") >= 2 and len(runs) == 4
    assert all(r[1] == "FINISHED" and r[4] for r in runs)


def test_dropout_is_tuned_only_for_models_that_have_it():
    from driftmatrix.models.catalog import REGISTRY
    from driftmatrix.stages.tune import has_dropout

    assert has_dropout(REGISTRY["ViT-S"].build(2, {}))  # MaskDropout blocks
    assert has_dropout(REGISTRY["FFN-S"].build(2, {"dim": 16}))  # nn.Dropout head
    assert not has_dropout(REGISTRY["CNN-S"].build(2, {}))
