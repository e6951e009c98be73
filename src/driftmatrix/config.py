"""Typed, frozen views of ``params.yaml``: unknown keys are errors (a typo never falls back to a default)."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from driftmatrix.errors import ConfigError

PARAMS_FILE = Path("params.yaml")


# Allowed values of keys, as dataclass field metadata: checked by :func:`build` (None passes).
def _bound(test, text: str) -> dict[str, Any]:
    return {"bound": (test, text)}


def _one_of(*choices: str) -> dict[str, Any]:
    return _bound(lambda v: v in choices, f"{', '.join(choices[:-1])} or {choices[-1]}")


POSITIVE = _bound(lambda v: v > 0, "a value > 0")
AT_LEAST_1 = _bound(lambda v: v >= 1, "a value >= 1")
NON_NEGATIVE = _bound(lambda v: v >= 0, "a value >= 0")
FRACTION = _bound(lambda v: 0 < v < 1, "a value between 0 and 1, both excluded")
DROP_RATE = _bound(lambda v: 0 <= v < 1, "a value in [0, 1)")
#: train.precision: fp32, bf16 (mixed-precision autocast), auto (bf16 where the device has bf16 units)
PRECISIONS = ("fp32", "bf16", "auto")


@dataclass(frozen=True)
class DatasetConfig:
    name: str = "synthetic-yearbook"
    source: str = "yearbook"
    path: str = "data/synthetic-yearbook"
    task: str = "binary"
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SyntheticConfig:
    scenario: str = "fading-cue"
    seed: int = 0
    first_year: int = 1950
    years: int = field(default=20, metadata=AT_LEAST_1)
    per_year: int = field(default=60, metadata=AT_LEAST_1)
    size: int = field(default=32, metadata=AT_LEAST_1)
    # years over which the drift schedule runs; fixed, so appending years keeps earlier ones
    span: int = field(default=20, metadata=AT_LEAST_1)


@dataclass(frozen=True)
class SlicingConfig:
    period: str = field(default="year", metadata=_one_of("year", "half-year", "quarter", "month"))
    width: int = field(default=1, metadata=AT_LEAST_1)
    min_samples: int = field(default=20, metadata=AT_LEAST_1)
    test_fraction: float = field(default=0.3, metadata=FRACTION)
    split_seed: int = 42


@dataclass(frozen=True)
class TrainConfig:
    seeds: tuple[int, ...] = (0, 1)
    epochs: int = field(default=10, metadata=NON_NEGATIVE)  # 0: no training (the Prior baseline)
    batch_size: int = field(default=64, metadata=AT_LEAST_1)
    lr: float = field(default=5e-4, metadata=POSITIVE)
    weight_decay: float = field(default=0.0, metadata=NON_NEGATIVE)
    device: str = "auto"
    eval_batch_size: int = field(default=256, metadata=AT_LEAST_1)
    grad_clip: float | None = field(default=None, metadata=POSITIVE)
    optimizer: str = "adam"  # adam | adamw
    dropout: float | None = field(default=None, metadata=DROP_RATE)  # None: the model's own default
    precision: str = field(default="auto", metadata=_one_of(*PRECISIONS))
    window: Any = "cumulative"  # cumulative (the paper) | single | {sliding: N} (units.parse_window)


@dataclass(frozen=True)
class TrackingConfig:
    uri: str = "sqlite:///mlflow.db"
    artifact_root: str = "mlruns"
    experiment: str = "driftmatrix"
    log_models: bool = True
    register: bool | None = None  # None: as log_models (a registry version is the run's logged model)
    #: units written at once through an HTTP tracking server (each a dozen round trips); a local
    #: store (sqlite, a database URI) is written one unit at a time
    server_threads: int = field(default=8, metadata=_bound(lambda v: v >= 1, "a whole number of at least 1"))

    def __post_init__(self):
        if self.register is None:
            object.__setattr__(self, "register", self.log_models)


@dataclass(frozen=True)
class EstimateConfig:
    """``estimate:`` (label-free estimates of a new period; docs/estimates.md)."""

    label_shift: float = field(default=0.1, metadata=_bound(lambda v: 0 <= v <= 1, "a value in [0, 1]"))
    min_ess: float = field(default=30.0, metadata=NON_NEGATIVE)  # IW weights' effective sample size below: flagged
    cap_slack: float = field(default=1.0, metadata=NON_NEGATIVE)  # class-balance cap: standard errors of the label shares
    iw_inputs: bool = False  # IW-inputs: a domain classifier on the inputs per (window, period); opt-in (cost)


def estimate_config(params: "Params") -> EstimateConfig:
    """The ``estimate:`` section (it lives in ``params.extra``), checked like the others."""
    return build(EstimateConfig, params.extra.get("estimate"), "params.yaml: estimate")


@dataclass(frozen=True)
class PolicyConfig:
    """``policy:`` (retraining policies replayed on the matrices; docs/policy.md)."""

    retrain_cost: float = field(default=0.1, metadata=NON_NEGATIVE)  # points of served score one retrain costs
    budget: int | None = field(default=None, metadata=NON_NEGATIVE)  # at most this many retrains (None: no cap)
    label_delay: int = field(default=0, metadata=NON_NEGATIVE)  # periods until a period's labels arrive


def policy_config(params: "Params") -> PolicyConfig:
    return build(PolicyConfig, params.extra.get("policy"), "params.yaml: policy")


@dataclass(frozen=True)
class EvaluationConfig:
    """``evaluation:``: the cell metric; binary and multiclass tasks choose (``tasks.metric_for``)."""

    metric: str = field(default="accuracy", metadata=_one_of(
        "accuracy", "balanced_accuracy", "macro_auc", "log_loss", "balanced_mse"))


def evaluation_metric(params: "Params") -> str:
    return build(EvaluationConfig, params.extra.get("evaluation"), "params.yaml: evaluation").metric


@dataclass(frozen=True)
class Params:
    dataset: DatasetConfig = DatasetConfig()
    synthetic: SyntheticConfig = SyntheticConfig()
    slicing: SlicingConfig = SlicingConfig()
    train: TrainConfig = TrainConfig()
    models: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: {"MLP-S": {}})
    tracking: TrackingConfig = TrackingConfig()
    extra: Mapping[str, Any] = field(default_factory=dict)  # sections owned by other stages

    def train_for(self, model: str) -> TrainConfig:
        """The training config of one model: ``train`` with that model's overrides applied (its
        estimator options, ``models.custom.OPTIONS``, configure the estimator instead)."""
        from driftmatrix.models.spec import training_overrides

        overrides = training_overrides(self.models.get(model))
        return build(TrainConfig, {**_asdict(self.train), **overrides}, f"models.{model}")


def _asdict(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


def build(cls: type, raw: Mapping[str, Any] | None, where: str) -> Any:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys with a named error."""
    raw = dict(raw or {})
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")
    values = {}
    for name, value in raw.items():
        f = known[name]
        value = _typed(value, str(f.type), f"{where}.{name}")
        if value is not None and "bound" in f.metadata:
            test, text = f.metadata["bound"]
            if not test(value):
                raise ConfigError(f"{where}.{name}: expected {text}, got {value!r}")
        values[name] = value
    return cls(**values)


def _typed(value: Any, kind: str, where: str) -> Any:
    """``value`` as the field type ``kind`` names (its annotation text), or a ConfigError."""
    def fail(expected: str):
        raise ConfigError(f"{where}: expected {expected}, got {value!r}")

    if value is None and kind.endswith("| None"):
        return None
    kind = kind.removesuffix(" | None")
    if kind == "int":
        return value if isinstance(value, int) and not isinstance(value, bool) else fail("a whole number")
    if kind == "float":
        if isinstance(value, str):  # YAML reads `1e-04` (as DVC writes it) as text
            try:
                return float(value)
            except ValueError:
                fail("a number")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else fail("a number")
    if kind == "bool":
        return value if isinstance(value, bool) else fail("true or false")
    if kind == "str":
        return value if isinstance(value, str) else fail("text")
    if kind == "tuple[int, ...]":
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        return tuple(value) if ok else fail("a list of whole numbers, e.g. [0, 1]")
    if kind.startswith("Mapping"):
        return value if isinstance(value, Mapping) else fail("a mapping")
    return tuple(value) if isinstance(value, list) else value  # Any: checked where it is read


#: The sections typed as fields of :class:`Params`; the others stay raw in ``Params.extra``.
SECTIONS = {"dataset": DatasetConfig, "synthetic": SyntheticConfig, "slicing": SlicingConfig, "train": TrainConfig,
            "tracking": TrackingConfig}
#: Sections of ``Params.extra`` that :func:`parse_params` checks early.
EXTRA_SECTIONS = {"estimate": EstimateConfig, "policy": PolicyConfig, "evaluation": EvaluationConfig}


def to_raw(params: "Params") -> dict[str, Any]:
    """The ``params.yaml`` mapping that :func:`parse_params` turns back into ``params``."""
    raw = {name: _asdict(getattr(params, name)) for name in SECTIONS}
    return json.loads(json.dumps({**raw, "models": dict(params.models), **dict(params.extra)}, default=list))


def parse_params(raw: Mapping[str, Any], source: str = "params.yaml", estimators: bool = True) -> Params:
    """Typed params from an already-parsed YAML mapping. ``estimators``: also import each estimator
    named by path and check it can be built (1-3 s for scikit-learn); the stages that neither train
    nor check the configuration first skip it (``dvc repro`` runs ingest and train with it)."""
    raw = dict(raw or {})
    built = {name: build(cls, raw.get(name), f"{source}: {name}") for name, cls in SECTIONS.items()}
    if built["tracking"].register and not built["tracking"].log_models:
        raise ConfigError(f"{source}: tracking.register: true needs tracking.log_models: true "
                          "(a registry version is the run's logged model)")
    models = raw.get("models") or {}
    if isinstance(models, (list, tuple)):
        models = {m: {} for m in models}
    if not isinstance(models, Mapping) or not models:
        raise ConfigError(f"{source}: models must be a non-empty mapping of model name -> overrides")
    models = {str(k): dict(v or {}) for k, v in models.items()}
    from driftmatrix.models import spec as custom

    for name, entry in models.items():
        problem = custom.check(name, custom.options_of(entry), f"{source}: models.{name}")
        if problem:
            raise ConfigError(problem)
    custom.remember(models)
    if built["dataset"].source == "table" or any(map(custom.options_of, models.values())):
        from driftmatrix.models.catalog import model_problem  # (imports numpy: only where a model may be tabular)

        for name, entry in models.items():  # a task a model cannot do, an estimator that cannot work
            problem = model_problem(name, custom.options_of(entry), built["dataset"].task, f"{source}: models.{name}",
                                    estimators)
            if problem:
                raise ConfigError(problem)
    extra = {k: v for k, v in raw.items() if k not in SECTIONS and k != "models"}
    params = Params(models=models, extra=extra, **built)
    for name in models:  # validate every override early, with the model named
        params.train_for(name)
    checked = {name: build(cls, extra.get(name), f"{source}: {name}") for name, cls in EXTRA_SECTIONS.items()}
    try:
        metric_for(built["dataset"].task, checked["evaluation"].metric)
    except ValueError as exc:
        raise ConfigError(f"{source}: {exc} (dataset.task)") from None
    return params


def load_params(path: str | Path = PARAMS_FILE, estimators: bool = True) -> Params:
    """``params.yaml`` typed and checked (``estimators``: see :func:`parse_params`)."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: parameter file not found (run from the repository root)")
    with path.open() as fh:
        try:
            raw = yaml.safe_load(fh) or {}
        except yaml.YAMLError as exc:  # its message gives the line and column
            raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of sections (dataset:, train:, ...), got {type(raw).__name__}")
    return parse_params(raw, str(path), estimators)


def user_cache_dir() -> Path:
    """This machine's driftmatrix cache (``$XDG_CACHE_HOME/driftmatrix``, else ``~/.cache/driftmatrix``):
    what it holds is reused only while what made it is unchanged, so deleting it only costs time."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "driftmatrix"


def keep_in_cache(path: Path, obj: Any) -> bool:
    """Write ``obj`` as JSON to ``path`` (under :func:`user_cache_dir`) atomically; False where the
    cache cannot be written, which only costs the work again next time."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(obj))
        tmp.replace(path)
        return True
    except OSError:
        with contextlib.suppress(OSError):  # also where no folder could be made
            tmp.unlink()
        return False


def fingerprint(*parts: Any) -> str:
    """Short stable hash of JSON-able parts (configs, data versions): keys resumable work."""
    def default(o: Any) -> Any:
        if dataclasses.is_dataclass(o):
            return _asdict(o)
        if isinstance(o, Path):
            return str(o)
        raise TypeError(type(o))

    blob = json.dumps(parts, sort_keys=True, default=default)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def effective_config(params: Params, model: str) -> TrainConfig:
    """``train`` < the model spec's own defaults (e.g. lr 1e-4 for frozen heads) < ``models.<name>``;
    ``precision`` and ``device`` stay as asked (``units.environment`` resolves them)."""
    from driftmatrix.models.catalog import get
    from driftmatrix.models.spec import training_overrides

    spec = get(model)
    merged = {**asdict(params.train), **dict(spec.train_defaults), **training_overrides(params.models.get(model))}
    cfg = build(TrainConfig, merged, f"models.{model}")
    parse_window(cfg.window, f"models.{model}.window")  # a clear error before any work
    repeated = sorted({s for s in cfg.seeds if list(cfg.seeds).count(s) > 1})
    if repeated:
        raise ConfigError(f"params.yaml: models.{model}.seeds (or train.seeds): seed {repeated[0]} is listed "
                          f"twice; each seed is one run of every cutoff")
    return cfg


def model_options(params: Params, model: str) -> dict[str, Any]:
    """The estimator options of ``models.<model>`` (``models.custom.OPTIONS``); empty for the torch models."""
    from driftmatrix.models.spec import options_of

    return options_of(params.models.get(model))


# --- runtime: ---------------------------------------------------------------------------------
EXECUTORS = ("local", "ray")
_WHERE = "params.yaml: runtime"


@dataclass(frozen=True)
class Resources:
    """What one unit asks Ray for. ``num_gpus`` below 1 shares a GPU; above 1 it must be whole."""

    num_cpus: float = field(default=1, metadata=NON_NEGATIVE)
    num_gpus: float = field(default=0, metadata=NON_NEGATIVE)


@dataclass(frozen=True)
class RuntimeConfig:
    executor: str = field(default="local", metadata=_one_of(*EXECUTORS))
    workers: int | str = 1
    address: str | None = None
    num_cpus: float = field(default=1, metadata=NON_NEGATIVE)
    num_gpus: float = field(default=0, metadata=NON_NEGATIVE)
    max_retries: int = field(default=3, metadata=_bound(lambda v: v >= -1, "an integer >= 0 (-1: retry forever)"))
    overrides: Mapping[str, Resources] = field(default_factory=dict)

    def resources_for(self, model: str | None) -> Resources:
        """The runtime defaults with ``overrides.<model>`` applied."""
        base = Resources(self.num_cpus, self.num_gpus)
        return self.overrides.get(model, base) if model is not None else base


def parse_runtime(raw: Mapping[str, Any] | None, models: Iterable[str] | None = None) -> RuntimeConfig:
    """``RuntimeConfig`` from the ``runtime:`` mapping (errors name the key under ``params.yaml: runtime``);
    ``models``, when given, are the only names ``overrides`` may hold."""
    if raw is None:
        return RuntimeConfig()
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{_WHERE}: expected a mapping, got {type(raw).__name__}")
    raw = dict(raw)
    over = raw.pop("overrides", None) or {}
    if not isinstance(over, Mapping):
        raise ConfigError(f"{_WHERE}.overrides: expected a mapping of model -> {{num_cpus, num_gpus}}")
    cfg = build(RuntimeConfig, raw, _WHERE)  # unknown keys, types and bounds
    if cfg.workers != "auto" and (not isinstance(cfg.workers, int) or isinstance(cfg.workers, bool)
                                  or cfg.workers < 1):
        raise ConfigError(f"{_WHERE}.workers: expected auto or a whole number >= 1, got {cfg.workers!r}")
    if cfg.address is not None and not cfg.address.strip():
        raise ConfigError(f"{_WHERE}.address: expected null, auto, ray://host:port or host:port, got {cfg.address!r}")
    _whole_gpus(Resources(cfg.num_cpus, cfg.num_gpus), _WHERE)
    models = set(models) if models is not None else None
    resolved = {}
    for name, value in over.items():
        where = f"{_WHERE}.overrides.{name}"
        if models is not None and name not in models:
            raise ConfigError(f"{where}: {name!r} is not a model of this experiment ({sorted(models)})")
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where}: expected a mapping with num_cpus and/or num_gpus")
        res = build(Resources, {"num_cpus": cfg.num_cpus, "num_gpus": cfg.num_gpus, **value}, where)
        resolved[str(name)] = _whole_gpus(res, where)
    return replace(cfg, overrides=resolved)


def runtime_config(params) -> RuntimeConfig:
    """The ``runtime:`` section of typed ``Params`` (it lives in ``params.extra``)."""
    return parse_runtime(params.extra.get("runtime"), params.models)


def unit_threads(res: Resources) -> int:
    """Torch threads a unit computes with, on every executor: floor(num_cpus), at least 1."""
    return max(1, math.floor(res.num_cpus))


def _whole_gpus(res: Resources, where: str) -> Resources:
    if res.num_gpus > 1 and res.num_gpus != int(res.num_gpus):
        raise ConfigError(f"{where}.num_gpus: above 1 it must be a whole number of GPUs, got {res.num_gpus}")
    return res


@dataclass(frozen=True)
class MetricInfo:
    key: str
    name: str
    unit: str
    higher_is_better: bool


METRICS = {
    "accuracy": MetricInfo("accuracy", "Accuracy", "%", True),
    "macro_auc": MetricInfo("macro_auc", "Macro AUC", "%", True),
    "balanced_mse": MetricInfo("balanced_mse", "Balanced MSE", "", False),
    "balanced_accuracy": MetricInfo("balanced_accuracy", "Balanced accuracy", "%", True),
    "log_loss": MetricInfo("log_loss", "Log loss", "nats", False),
}


#: ``evaluation.metric`` of binary and multiclass tasks (the first: the default).
CLASSIFICATION_METRICS = ("accuracy", "balanced_accuracy", "macro_auc", "log_loss")


def metric_for(task: str, chosen: str = "accuracy") -> MetricInfo:
    """The metric a task's cells are scored by: ``chosen`` (``evaluation.metric``) for binary and
    multiclass tasks; multi-label and regression tasks have one each (macro AUC, balanced MSE)."""
    own = {"multilabel": "macro_auc", "regression": "balanced_mse"}.get(task)
    if own is None and chosen in CLASSIFICATION_METRICS or chosen in ("accuracy", own):
        return METRICS[own or chosen]
    raise ValueError(f"evaluation.metric: a {task} task is scored by {own or ', '.join(CLASSIFICATION_METRICS)}, "
                     f"not {chosen}")


@dataclass(frozen=True)
class Window:
    """Which slices a cutoff trains on: ``cumulative`` (the paper), ``sliding`` N, or ``single``."""

    kind: str = "cumulative"
    size: int | None = None

    def slices(self, cutoff: int) -> range:
        if self.kind == "cumulative":
            return range(0, cutoff + 1)
        if self.kind == "single":
            return range(cutoff, cutoff + 1)
        return range(max(0, cutoff - self.size + 1), cutoff + 1)

    @property
    def name(self) -> str:
        return f"sliding-{self.size}" if self.kind == "sliding" else self.kind


def parse_window(value: Any, where: str = "train.window") -> Window:
    """``cumulative`` | ``single`` | ``{sliding: N}`` | ``sliding-N`` -> :class:`Window`."""
    if isinstance(value, Window):
        return value
    if isinstance(value, Mapping) and set(value) == {"sliding"}:
        size = value["sliding"]
    elif isinstance(value, str) and value in ("cumulative", "single"):
        return Window(value)
    elif isinstance(value, str) and value.startswith("sliding"):
        size = value.removeprefix("sliding").lstrip(":- ")
    else:
        raise ConfigError(f"params.yaml: {where} must be cumulative, single or {{sliding: N}}, got {value!r}")
    try:
        size = int(size)
    except (TypeError, ValueError):
        raise ConfigError(f"params.yaml: {where}: sliding needs a whole number of periods, got {size!r}") from None
    if size < 1:
        raise ConfigError(f"params.yaml: {where}: sliding window must be >= 1 period, got {size}")
    return Window("sliding", size)
