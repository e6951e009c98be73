"""Hyperparameter search (Optuna) that never reads a row from after the tuning cutoff.

For cutoff ``c`` and ``v`` validation periods the tuner reads only the train splits of slices 0..c:
inner train 0..c-v, validation c-v+1..c (:func:`restrict`; docs/explain-and-tune.md). A study per
(dataset, model) lives in sqlite and resumes up to ``tune.n_trials``; the driver alone tells it and
logs runs, in trial order, so the study is the same on every executor. The best settings become
``presets/tuned/<dataset>-<model>.yaml`` and apply to every cutoff (:func:`caveat` says so)."""

from __future__ import annotations

import copy
import logging
import textwrap
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from driftmatrix.config import AT_LEAST_1, ConfigError, Params, TrainConfig, build, fingerprint, runtime_config
from driftmatrix.tracking import runs as tracking

log = logging.getLogger(__name__)

DEFAULT_SPACE: dict[str, Any] = {
    "lr": {"low": 1e-4, "high": 3e-3, "log": True},
    "weight_decay": {"low": 1e-6, "high": 1e-2, "log": True},
    "epochs": {"low": 3, "high": 12},
    "batch_size": [32, 64, 128],
    "dropout": {"low": 0.0, "high": 0.3},
}
TUNABLE = ("lr", "weight_decay", "epochs", "batch_size", "dropout", "grad_clip", "optimizer")


@dataclass(frozen=True)
class TuneConfig:
    cutoff: str  # label of the tuning cutoff slice: the last period the tuner may read
    validation_periods: int = field(default=2, metadata=AT_LEAST_1)
    n_trials: int = 20  # finished trials wanted in the study (a re-run tops it up)
    timeout: float | None = None  # seconds per invocation
    seed: int = 0  # model seed of every trial, and sampler seed
    storage: str = "sqlite:///outputs/tuning/optuna.db"
    presets_dir: str = "presets/tuned"
    pruner_startup_trials: int = 3  # median pruning starts after this many finished trials
    pruner_warmup_epochs: int = 1  # and never prunes before this many epochs of a trial
    parallel: int = field(default=1, metadata=AT_LEAST_1)  # trials per round, run at once; see earlier rounds only
    space: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_SPACE))


def tune_config(params: Params) -> TuneConfig:
    raw = dict(params.extra.get("tune") or {})
    if "cutoff" not in raw:
        raise ConfigError("params.yaml: tune.cutoff (the tuning cutoff slice label) is required")
    raw["cutoff"] = str(raw["cutoff"])
    cfg = build(TuneConfig, raw, "params.yaml: tune")
    for name, spec in cfg.space.items():
        if name not in TUNABLE:
            raise ConfigError(f"params.yaml: tune.space.{name} is not tunable; choose from {TUNABLE}")
        ok = spec is None or (isinstance(spec, (list, tuple)) and len(spec) > 0) or (
            isinstance(spec, Mapping) and {"low", "high"} <= set(spec) <= {"low", "high", "log", "step"})
        if not ok:
            raise ConfigError(f"params.yaml: tune.space.{name}: a list of choices or {{low, high, log?, step?}}, "
                              f"got {spec!r}")
    return cfg


# --- pure pieces: the inner split, the restricted data, the objective -----------------------------
def inner_split(slice_ids: np.ndarray, split: np.ndarray, cutoff: int, v: int) -> tuple[np.ndarray, np.ndarray]:
    """(inner train rows, validation rows) inside D_<=cutoff; global row indices, sorted."""
    from driftmatrix.learn.fit import cutoff_train_rows

    first_val = cutoff - v + 1
    if first_val < 1:
        raise ConfigError(f"tune: cutoff index {cutoff} with {v} validation periods leaves no slice to train on")
    allowed = cutoff_train_rows(slice_ids, split, cutoff)
    return allowed[slice_ids[allowed] < first_val], allowed[slice_ids[allowed] >= first_val]


class RowSubset:
    """An inputs object seen through a row list: position p reads row ``rows[p]`` of ``inputs``."""

    def __init__(self, inputs, rows: np.ndarray):
        import torch

        self.inputs = inputs
        self.rows = torch.as_tensor(np.asarray(rows), dtype=torch.long)

    def __len__(self) -> int:
        return len(self.rows)

    def to(self, device) -> "RowSubset":
        return RowSubset(self.inputs.to(device), self.rows.numpy())

    def batch(self, idx):
        return self.inputs.batch(self.rows[idx.cpu()])


@dataclass(frozen=True)
class TuningData:
    """All the objective may read: D_<=cutoff re-indexed 0..n-1, with the inner split positions."""

    inputs: Any  # RowSubset of the experiment's inputs
    targets: Any  # torch tensor, rows of D_<=cutoff
    targets_np: np.ndarray
    slice_ids: np.ndarray
    train_pos: np.ndarray
    val_pos: np.ndarray
    rows: np.ndarray  # global row index of each position (for audit and tests)
    task: str
    metric: str = "accuracy"  # the cell metric (evaluation.metric)


def restrict(exp, cutoff: int, v: int) -> TuningData:
    """Cut an experiment's rows down to D_<=cutoff and lay out the inner temporal split."""
    import torch

    train_rows, val_rows = inner_split(exp.slice_ids, exp.split, cutoff, v)
    rows = np.concatenate([train_rows, val_rows])
    t = torch.as_tensor(rows, dtype=torch.long)
    return TuningData(inputs=RowSubset(exp.inputs, rows), targets=exp.targets[t.to(exp.targets.device)],
                      targets_np=exp.targets_np[rows].copy(), slice_ids=exp.slice_ids[rows].copy(),
                      train_pos=np.arange(len(train_rows)), val_pos=np.arange(len(train_rows), len(rows)),
                      rows=rows, task=exp.meta.task, metric=exp.metric.key)


def validation_score(model, data: TuningData, cfg: TrainConfig) -> float:
    """Mean over the validation slices of the task metric (reported unit)."""
    from driftmatrix.learn.tasks import cell_score
    from driftmatrix.learn.fit import predict

    out = predict(model, RowSubset(data.inputs, data.val_pos), cfg.eval_batch_size, cfg.precision)
    targets, slices = data.targets_np[data.val_pos], data.slice_ids[data.val_pos]
    return float(np.nanmean([cell_score(data.task, out[slices == k], targets[slices == k], metric=data.metric)[0]
                             for k in np.unique(slices)]))


def objective(data: TuningData, cfg: TrainConfig, new_model: Callable[[int], Any], seed: int, device,
              report: Callable[[int, float], None] | None = None) -> float:
    """Train on the inner train rows from their output prior; validation score after the last epoch."""
    from driftmatrix.models.heads import init_output_bias
    from driftmatrix.learn.tasks import make_loss
    from driftmatrix.learn.fit import fit

    model = new_model(seed)
    scores: list[float] = []

    def on_epoch(epoch: int, _loss: float) -> None:
        scores.append(validation_score(model, data, cfg))
        model.train()  # predict() switched to eval mode; fit() goes on training
        if report:
            report(epoch, scores[-1])

    if hasattr(model, "predict_arrays"):  # a tabular model: preprocessing and model fitted on the inner train rows
        model.fit(data.inputs, data.train_pos, data.targets_np, cfg, seed, device, on_epoch, loop=fit)
        if not scores:  # fitted by its library in one go: one report
            on_epoch(0, 0.0)
        return scores[-1]
    init_output_bias(model, data.task, data.targets_np[data.train_pos])
    loss_fn = make_loss(data.task, data.targets_np[data.train_pos])
    fit(model, data.inputs, data.targets, data.train_pos, cfg, loss_fn, seed, device, on_epoch)
    return scores[-1] if scores else validation_score(model, data, cfg)


def suggest(trial, space: Mapping[str, Any], skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """Training overrides of one trial from the declared space (ints when both bounds are ints)."""
    out: dict[str, Any] = {}
    for name, spec in space.items():
        if spec is None or name in skip:
            continue
        if isinstance(spec, (list, tuple)):
            out[name] = trial.suggest_categorical(name, list(spec))
            continue
        low, high = spec["low"], spec["high"]
        kwargs = {"log": bool(spec.get("log", False))}
        if spec.get("step") is not None:
            kwargs["step"] = spec["step"]
        if isinstance(low, int) and isinstance(high, int) and not isinstance(low, bool):
            out[name] = trial.suggest_int(name, low, high, **kwargs)
        else:
            out[name] = trial.suggest_float(name, float(low), float(high), **kwargs)
    return out


def with_config(exp, cfg: TrainConfig):
    """A shallow copy of ``exp`` training with ``cfg`` (shares slices, inputs and targets)."""
    out = copy.copy(exp)
    out.cfg = cfg
    return out


def has_dropout(model) -> bool:
    from torch import nn

    from driftmatrix.models.dropout import MaskDropout

    if not isinstance(model, nn.Module):  # a tabular model: MLP-Tab's network has dropout
        return getattr(model, "kind", "") == "MLP"
    return any(isinstance(m, (nn.Dropout, MaskDropout)) for m in model.modules())


# --- the study (side effects: storage, MLflow, preset file) ---------------------------------------
def _storage_url(url: str) -> str:
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    return url


def finished_trials(study) -> tuple:
    from optuna.trial import TrialState

    return tuple(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


def fail_leftovers(study) -> int:
    """Mark trials a killed process left RUNNING as FAIL (one tuner per study at a time)."""
    from optuna.trial import TrialState

    stale = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    for t in stale:
        study.tell(t.number, state=TrialState.FAIL)
    return len(stale)


# --- trials as work items (workers compute; the driver tells the study and writes MLflow) --------
@dataclass(frozen=True)
class TuneContext:
    """What every trial of a study reads: the experiment and its rows cut down to D_<=cutoff."""

    exp: Any  # training.Experiment
    data: TuningData


@dataclass(frozen=True)
class TuneRecipe:
    """A picklable description of a :class:`TuneContext`: each worker builds it once."""

    experiment: Any  # training.ExperimentRecipe
    cutoff: int
    validation_periods: int

    def build(self) -> TuneContext:
        exp = self.experiment.build()
        return TuneContext(exp, restrict(exp, self.cutoff, self.validation_periods))


@dataclass(frozen=True)
class Pruning:
    """The pruner's settings and the trials finished when a round was asked, for workers to judge by."""

    direction: str  # maximize | minimize
    startup_trials: int
    warmup_epochs: int
    finished: tuple = ()  # optuna FrozenTrials (COMPLETE and PRUNED)

    def judge(self):
        """A running trial of a throwaway in-memory study holding ``finished``, to report to."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(
            direction=self.direction, sampler=optuna.samplers.RandomSampler(seed=0),
            pruner=optuna.pruners.MedianPruner(n_startup_trials=self.startup_trials,
                                               n_warmup_steps=self.warmup_epochs))
        study.add_trials(self.finished)
        return study.ask()


@dataclass(frozen=True)
class TrialItem:
    number: int  # the Optuna trial number
    overrides: Mapping[str, Any]  # the trial's suggested training settings
    seed: int
    pruning: Pruning


def trial_task(ctx: TuneContext, item: TrialItem) -> dict[str, Any]:
    """Worker side of one trial: train, judge pruning after every epoch, return the epoch scores."""
    import optuna

    cfg = build(TrainConfig, {**asdict(ctx.exp.cfg), **item.overrides}, "tune trial")
    judge = item.pruning.judge()
    epochs: list[tuple[int, float, float]] = []  # (epoch, score, unix time)

    def report(epoch: int, score: float) -> None:
        epochs.append((epoch, score, time.time()))
        judge.report(score, epoch)
        if judge.should_prune():
            raise optuna.TrialPruned(f"epoch {epoch}: {score:.4f}")

    started = time.time()
    try:
        value, pruned = objective(ctx.data, cfg, with_config(ctx.exp, cfg).new_model, item.seed, ctx.exp.device,
                                  report), False
    except optuna.TrialPruned:
        value, pruned = None, True
    return {"epochs": epochs, "value": value, "pruned": pruned, "started": started, "ended": time.time()}


def optimize(study, n_trials: int, cfg: TuneConfig, skip: tuple[str, ...], executor, recipe: TuneRecipe,
             context: TuneContext | None, record: Callable[[Any, Mapping[str, Any], Any], None]) -> int:
    """Run ``n_trials`` trials in rounds of ``cfg.parallel`` through ``executor``, told with ``record``
    in trial order (each sees only earlier rounds); no round starts after ``cfg.timeout``. How many started."""
    from driftmatrix.runtime.executor import Progress

    started, done = time.perf_counter(), 0
    model = recipe.experiment.model  # its runtime resources (runtime.overrides) apply to its trials
    bar = Progress(f"tune {model}", n_trials)
    try:
        while done < n_trials and (cfg.timeout is None or time.perf_counter() - started < cfg.timeout):
            pruning = Pruning(study.direction.name.lower(), cfg.pruner_startup_trials, cfg.pruner_warmup_epochs,
                              finished_trials(study))
            asked = []
            for _ in range(min(cfg.parallel, n_trials - done)):
                trial = study.ask()
                asked.append((trial, suggest(trial, cfg.space, skip)))
            results: dict[int, Any] = {}
            bar.update(done, len(asked))
            try:
                items = [TrialItem(t.number, o, cfg.seed, pruning) for t, o in asked]
                for item, result in executor.map(trial_task, recipe, items, model=model, label="tune",
                                                 context=context):
                    results[item.number] = result
                    bar.update(done + len(results), len(asked) - len(results))
            finally:  # told in trial order; on an error the unfinished ones FAIL and the error goes on
                for trial, overrides in asked:
                    record(trial, overrides, results.get(trial.number))
            done += len(asked)
    finally:
        bar.close()
    return done


def tell(study, trial, result: Mapping[str, Any] | None) -> str:
    """Give the study a trial's result, its epochs reported first; returns complete, pruned or failed."""
    from optuna.trial import TrialState

    if result is None:
        study.tell(trial, state=TrialState.FAIL)
        return "failed"
    for epoch, score, _ in result["epochs"]:
        trial.report(score, epoch)
    if result["pruned"]:
        study.tell(trial, state=TrialState.PRUNED)
        return "pruned"
    study.tell(trial, result["value"])
    return "complete"


def run(params: Params, model: str, slices_dir: str | Path = "outputs/slices",
        n_trials: int | None = None, storage: str | None = None, presets_dir: str | Path | None = None,
        log_mlflow: bool = True, features_dir: str | Path = "outputs/features") -> dict[str, Any]:
    """Create or resume the study of ``model``, run the missing trials, write the preset."""
    import optuna

    from driftmatrix.runtime.executor import make_executor
    from driftmatrix.stages.saliency import slice_index  # label -> index with a named error
    from driftmatrix.units.experiment import Experiment, ExperimentRecipe

    cfg = tune_config(params)
    target = n_trials if n_trials is not None else cfg.n_trials
    exp = Experiment(params, model, slices_dir, features_dir)
    cutoff = slice_index(exp.labels, cfg.cutoff, "tune cutoff")
    data = restrict(exp, cutoff, cfg.validation_periods)
    higher = exp.metric.higher_is_better
    skip = () if has_dropout(exp.new_model(0)) else ("dropout",)
    setup = fingerprint(model, exp.manifest["data_version"], cfg.cutoff, cfg.validation_periods,
                        dict(cfg.space), exp.cfg, cfg.seed)
    name = f"{exp.dataset}-{model}"
    url = _storage_url(storage or cfg.storage)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        storage=url, study_name=name, load_if_exists=True,
        direction="maximize" if higher else "minimize",
        pruner=optuna.pruners.MedianPruner(n_startup_trials=cfg.pruner_startup_trials,
                                           n_warmup_steps=cfg.pruner_warmup_epochs))
    # A resumed study must not replay the first run's random draws: seed by the trials so far.
    study.sampler = optuna.samplers.TPESampler(seed=cfg.seed + len(study.trials))
    if study.user_attrs.get("setup", setup) != setup:
        raise ConfigError(f"tune: study {name!r} in {url} was run with another setup (data, cutoff, space or "
                          f"base config); delete it or point tune.storage elsewhere")
    for k, val in {"setup": setup, "cutoff": cfg.cutoff, "validation_periods": cfg.validation_periods,
                   "metric": exp.metric.key, "train_rows": len(data.train_pos),
                   "val_rows": len(data.val_pos)}.items():
        study.set_user_attr(k, val)
    failed = fail_leftovers(study)
    exp_id = _mlflow_setup(params, name) if log_mlflow else None
    info = {"dataset": exp.dataset, "model": model, "family": exp.spec.family, "study": name,
            "tuning_cutoff": cfg.cutoff, "validation_periods": str(cfg.validation_periods)}
    val_slices = sorted({exp.labels[k] for k in data.slice_ids[data.val_pos]})
    train_slices = (exp.labels[0], exp.labels[cutoff - cfg.validation_periods])
    commit = tracking.git_commit() if exp_id is not None else ""

    def record(trial, overrides: Mapping[str, Any], result: Mapping[str, Any] | None) -> None:
        state = tell(study, trial, result)
        if exp_id is not None:
            _log_trial(exp_id, f"tune · {model} · trial {trial.number}",
                       {**info, "trial": str(trial.number), "git_commit": commit},
                       {**overrides, "train_rows": len(data.train_pos), "val_rows": len(data.val_pos),
                        "train_slices": f"{train_slices[0]}..{train_slices[1]}",
                        "val_slices": ",".join(val_slices), "seed": cfg.seed}, result, state)

    started = time.perf_counter()
    remaining = max(0, target - len(finished_trials(study)))
    recipe = TuneRecipe(ExperimentRecipe.of(params, model, slices_dir, features_dir), cutoff, cfg.validation_periods)
    ran = optimize(study, remaining, cfg, skip, make_executor(runtime_config(params), progress=False), recipe,
                   TuneContext(exp, data), record) if remaining else 0
    seconds = time.perf_counter() - started
    result = {"study": name, "storage": url, "finished": len(finished_trials(study)), "ran": ran,
              "failed_leftovers": failed, "seconds": round(seconds, 1), "direction": study.direction.name.lower(),
              "train_slices": list(train_slices), "val_slices": val_slices}
    completed = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if completed:
        best = study.best_trial
        preset = write_preset(Path(presets_dir or cfg.presets_dir), exp.dataset, model, best.params,
                              header=_preset_header(name, url, best, len(completed), exp.metric.name, cfg,
                                                    train_slices, val_slices, model, exp.labels),
                              tuned={"cutoff": cfg.cutoff, "study": name})
        result.update(best_value=best.value, best_params=best.params, best_trial=best.number, preset=str(preset))
    log.info("tune %s: %d finished trials (%d run now, %.1f s)%s", name, result["finished"], ran, seconds,
             f", best {result['best_value']:.4f} (trial {result['best_trial']})" if completed else "")
    return result


def caveat(model: str, cutoff: str, labels: Sequence[str] | None = None) -> str:
    """The caveat of applying settings tuned at ``cutoff`` to every cutoff, naming the affected ``labels``."""
    cutoff = str(cutoff)
    before = ""
    if labels is not None and cutoff in [str(x) for x in labels]:
        k = [str(x) for x in labels].index(cutoff)
        before = f" ({k} cutoffs, {labels[0]}..{labels[k - 1]})" if k else " (none in this study)"
    return (f"{model}: hyperparameters tuned at cutoff {cutoff}, on data through {cutoff} only, are applied to "
            f"every cutoff, including those before {cutoff}{before}. Those rows train with settings chosen on "
            f"data from after their own cutoff, a look-ahead that can flatter them; rows from {cutoff} on are "
            f"strictly out of time.")


def _mlflow_setup(params: Params, study: str) -> str:
    """Configure MLflow; close runs of this study that a killed process left RUNNING."""
    from mlflow.tracking import MlflowClient

    exp_id = tracking.configure(params.tracking)
    client = MlflowClient()
    running = tracking.tag_filter({"kind": "tuning", "study": study}) + " and attributes.status = 'RUNNING'"
    for r in client.search_runs([exp_id], filter_string=running):
        client.set_terminated(r.info.run_id, status="KILLED")
    return exp_id


def _log_trial(exp_id: str, run_name: str, tags: Mapping[str, str], logged: Mapping[str, Any],
               result: Mapping[str, Any] | None, state: str) -> None:
    """A trial's MLflow run, written by the driver from its result with the worker's times."""
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    def ms(t: float) -> int:
        return int(t * 1000)

    client, now = MlflowClient(), time.time()
    started, ended = (result["started"], result["ended"]) if result else (now, now)
    run_id = client.create_run(exp_id, start_time=ms(started), tags={"kind": "tuning", **tags, "state": state},
                               run_name=run_name).info.run_id
    try:
        epochs = result["epochs"] if result else ()
        metrics = [Metric("val_score", float(score), ms(t), epoch) for epoch, score, t in epochs]
        if state == "complete":
            metrics.append(Metric("objective", float(result["value"]), ms(ended), 0))
        client.log_batch(run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in logged.items()])
        client.set_terminated(run_id, "FINISHED" if result else "FAILED", end_time=ms(ended))
    except BaseException:
        client.delete_run(run_id)  # never a half-written run
        raise


def _preset_header(name, url, best, n_complete, metric_name, cfg: TuneConfig, train_slices, val_slices,
                   model: str, labels: Sequence[str] | None = None) -> str:
    from driftmatrix.tracking.server import redact

    return (f"Tuned by `driftmatrix tune`: study {name} ({redact(url)}), best of {n_complete} complete trials:\n"
            f"trial {best.number}, validation {metric_name} {best.value:.4f}.\n"
            f"Tuning cutoff {cfg.cutoff}: inner train = train splits of {train_slices[0]}..{train_slices[1]}, "
            f"validation = train splits of {', '.join(val_slices)}.\n"
            f"Apply: copy the entries under `models:` and `tuned:` into params.yaml (each replaces that model's\n"
            f"entry; `tuned` lets the report state the caveat below).\n"
            + "\n".join(textwrap.wrap("Caveat: " + caveat(model, cfg.cutoff, labels), 96)))


def write_preset(presets_dir: Path, dataset: str, model: str, best_params: Mapping[str, Any],
                 header: str = "", tuned: Mapping[str, Any] | None = None) -> Path:
    """``<presets_dir>/<dataset>-<model>.yaml``: the ``models:`` block, and ``tuned:`` saying where."""
    import yaml

    values = {k: (float(v) if isinstance(v, float) else v) for k, v in best_params.items()}
    build(TrainConfig, values, f"preset {model}")  # a preset must be a valid models.<name> entry
    presets_dir.mkdir(parents=True, exist_ok=True)
    path = presets_dir / f"{dataset}-{model}.yaml"
    comment = "".join(f"# {line}\n" for line in header.splitlines())
    doc: dict[str, Any] = {"models": {model: values}}
    if tuned is not None:
        doc["tuned"] = {model: {k: str(v) for k, v in tuned.items()}}
    path.write_text(comment + yaml.safe_dump(doc, sort_keys=True))
    return path
