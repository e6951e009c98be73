"""Registered versions as MLflow pyfunc models: packaged from code, loaded without pickle, served.

A unit's ``model`` artifact holds ``pyfunc_model.py`` (``set_model(UnitModel())``), the checkpoint's
weights as safetensors, ``model.json`` (how to rebuild the network) and ``unit.json`` (its record):
nothing in it is a pickle. What is served is what was scored: raw records are read as ingestion
reads them (``features.transform``) and the network runs as the evaluate stage runs it.
:class:`ModelFolders` saves one template per model (``save_model`` takes most of a second) and
stamps each unit's folder from it. :func:`load`, the package's one loading path, verifies a
downloaded folder before ``mlflow.pyfunc.load_model``."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from driftmatrix.features.transform import (as_frame, forward, load_encoder, load_network, model_inputs,
                                            output_columns, outputs_to_scores)
from driftmatrix.models.spec import DESCRIPTION, PYFUNC_FORMAT, RECORD, TABULAR_FORMAT, TORCH_FORMAT, WEIGHTS
from driftmatrix.data.table import DataError
from driftmatrix.units.store import file_digest

CODE_MODULE = "driftmatrix.tracking.pyfunc_model"
CODE_FILE = "pyfunc_model.py"
ARTIFACTS = {"weights": WEIGHTS, "description": DESCRIPTION, "record": RECORD}
LOADER = "mlflow.pyfunc.loaders.code_model"
#: Model inputs packaged as MLflow models (``models.registry.INPUTS``).
INPUT_KINDS = ("pixels", "token_states", "pooled", "none", "table")


# --- the model ------------------------------------------------------------------------------------
class UnitModel(PythonModel):
    """One trained unit: ``predict`` turns images, texts or feature rows into class probabilities.
    ``context.model_config`` (:func:`serving_config`) says what the network reads; pass
    ``model_config={"device": "cuda"}`` to ``mlflow.pyfunc.load_model`` to predict on a GPU."""

    # The signature in MLmodel, not predict's type hints, says what goes in (MLflow enforces it
    # before predict): no type-hint wrapper, and no advice to add hints at every load.
    _skip_type_hint_validation = True

    def load_context(self, context) -> None:
        import torch

        self.config = dict(context.model_config or {})
        weights = Path(context.artifacts["weights"])
        if Path(context.artifacts["description"]).parent != weights.parent:
            raise ValueError("model.json and model.safetensors must lie in one folder")
        if self.config.get("family") == "Custom":  # a process that only serves: the project's own params
            project_params(self.config.get("model"))
        self.device = torch.device(self.config.get("device") or "cpu")
        self.network = load_network(weights.parent, self.config, self.device)
        self.encoder = load_encoder(self.config, self.device)

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        try:
            inputs = model_inputs(self.config, model_input, self.encoder, self.device)
        except DataError as exc:  # a 400 that names the field, from `mlflow models serve`
            raise BadInput(str(exc)) from None
        logits = forward(self.network, inputs, self.config, (params or {}).get("batch_size"))
        return pd.DataFrame(outputs_to_scores(logits, self.config["task"]), columns=list(self.config["columns"]))


def project_params(model: str | None) -> None:
    """Parse the working folder's ``params.yaml`` unless this process already knows ``model``'s
    estimator: the loading project decides what a stored estimator may build."""
    from driftmatrix.config import ConfigError, load_params
    from driftmatrix.models import spec as custom

    if model not in custom.ESTIMATORS:
        with contextlib.suppress(ConfigError):
            load_params()


# --- what goes in ---------------------------------------------------------------------------------
class BadInput(MlflowException, DataError):
    """Input a model cannot read: an HTTP 400 when served, one line on the command line."""

    def __init__(self, message: str):
        super().__init__(message, error_code=INVALID_PARAMETER_VALUE)


def serving_config(params, exp, image_shape: Sequence[int] | None) -> dict[str, Any]:
    """The pyfunc flavour's ``config``: all a model's units need to ``predict`` beyond their weights."""
    from driftmatrix.features import cache, encoders

    spec, meta = exp.spec, exp.meta
    modality = meta.input_kind if meta.input_kind in ("image", "table") else "text"
    config: dict[str, Any] = {
        "format": PYFUNC_FORMAT, "dataset": exp.dataset, "model": spec.name, "family": spec.family,
        "task": meta.task, "inputs": spec.inputs, "modality": modality, "columns": output_columns(meta),
        "precision": exp.env.precision, "batch_size": int(exp.cfg.eval_batch_size), "device": "cpu",
        "image_shape": [int(s) for s in image_shape] if modality == "image" and image_shape is not None else None}
    if spec.inputs in ("token_states", "pooled"):
        embed = cache.embed_config(params.extra.get("embed"))
        name = cache.encoder_of(spec.inputs, spec.encoder, embed)
        sources = {name: str(embed.sources[name])} if embed.sources.get(name) else {}
        config.update(encoder=name, encoder_source=encoders.resolve_source(name, sources),
                      embed={"max_length": embed.max_length, "batch_size": embed.batch_size, "sources": sources,
                             "token_encoder": embed.token_encoder, "shard_size": embed.shard_size,
                             "device": "cpu", "progress": False},
                      features=cache.encoder_identity(spec.inputs, spec.encoder, embed))
    if modality == "table":  # every model of a feature table takes its raw feature columns, Prior too
        config.update(numeric=[str(f) for f in meta.numeric], categorical=[str(f) for f in meta.categorical])
        na = dict(params.dataset.options or {}).get("na_values")
        if na is not None:
            config["na_values"] = [str(v) for v in na]
    return config


def signature(config: Mapping[str, Any]):
    """Inputs: uint8 images (-1, H, W, 3), a table's raw feature columns of any type (MLflow would
    refuse an integer for a double; :func:`as_frame` reads them as ingestion does) or one text
    column. Outputs: one double column per class (or ``prediction``)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, DataType, Schema, TensorSpec
    from mlflow.types.schema import AnyType

    if config["modality"] == "image":
        h, w, c = config["image_shape"] or (-1, -1, 3)
        inputs = Schema([TensorSpec(np.dtype(np.uint8), (-1, h, w, c))])
    elif config["modality"] == "table":
        inputs = Schema([ColSpec(AnyType(), f) for f in (*config["numeric"], *config["categorical"])])
    else:
        inputs = Schema([ColSpec(AnyType())])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec(DataType.double, c) for c in config["columns"]]))


def input_example(config: Mapping[str, Any], slices_dir: str | Path | None):
    """One image (the first of the slices, or zeros), two texts or three feature rows of the slices."""
    from driftmatrix.data.slicing import load_slices

    rows = images = None
    if slices_dir is not None and (Path(slices_dir) / "rows.parquet").exists():
        rows, _, images = load_slices(slices_dir)
    if config["modality"] == "table":
        from driftmatrix.data.table import feature_column

        names = [*config["numeric"], *config["categorical"]]
        if rows is not None and len(rows) and all(feature_column(f) in rows.columns for f in names):
            head = rows[[feature_column(f) for f in names]].head(3).set_axis(names, axis=1)
        else:
            head = pd.DataFrame({f: [None] for f in names})
        return as_frame(head, config["numeric"], config["categorical"], config.get("na_values"))
    if config["modality"] == "image":
        if images is not None and len(images):
            return np.ascontiguousarray(images[:1])
        h, w, c = config["image_shape"]
        return np.zeros((1, h, w, c), np.uint8)
    if rows is not None and "text" in rows.columns and len(rows):
        return [str(t)[:500] for t in rows["text"].fillna("").head(2)]
    return ["an example document", "another one"]


def requirements(config: Mapping[str, Any] | None = None) -> list[str]:
    """Pinned pip requirements of a model: the libraries its code imports."""
    from driftmatrix.units.environment import package_version

    names = ["mlflow", "torch", "safetensors", "numpy", "pandas", "pillow"]
    if (config or {}).get("inputs") == "table":
        names += ["scikit-learn", "skops", "lightgbm"]
    versions = {name: package_version(name) for name in names}
    return [name if v == "absent" else f"{name}=={v}" for name, v in versions.items()]


def code_file() -> Path:
    """This package's ``pyfunc_model.py`` (found without importing it: importing runs ``set_model``)."""
    return Path(importlib.util.find_spec(CODE_MODULE).origin)


def save_template(path: Path, unit_folder: Path, config: Mapping[str, Any], example) -> None:
    """``mlflow.pyfunc.save_model`` of one unit as a model from code (no pickle is written)."""
    import mlflow

    with quiet_mlflow(), no_requirement_check():
        mlflow.pyfunc.save_model(
            str(path), python_model=str(code_file()),
            artifacts={name: str(unit_folder / file) for name, file in ARTIFACTS.items()},
            signature=signature(config), input_example=example, pip_requirements=requirements(config),
            model_config=dict(config))


@contextlib.contextmanager
def no_requirement_check():
    """Skip the check of the pip requirements against this environment that ``save_model`` runs
    (about 1.2 s a stage: MLflow maps every installed file to its distribution) only to print a
    warning, which :func:`quiet_mlflow` drops: :func:`requirements` pins the installed versions."""
    from mlflow.utils import environment

    name = "warn_dependency_requirement_mismatches"
    check = getattr(environment, name, None)
    if check is None:  # another MLflow: it runs whatever check it has
        yield
        return
    setattr(environment, name, lambda requirements: None)
    try:
        yield
    finally:
        setattr(environment, name, check)


@contextlib.contextmanager
def quiet_mlflow():
    """Keep MLflow's per-call notices (version lines, type-hint advice, download bars) off the terminal."""
    import warnings

    logger = logging.getLogger("mlflow")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()), \
                contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)


def template_parts(template: Path) -> tuple[list[Path], dict]:
    """What :func:`stamp` takes from a saved template, read once: the files units share, its ``MLmodel``."""
    import yaml

    shared = [src.relative_to(template) for src in sorted(template.rglob("*")) if not src.is_dir()]
    shared = [rel for rel in shared if rel.parts[0] != "artifacts" and rel.name != "MLmodel"]
    return shared, yaml.load((template / "MLmodel").read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def stamp(template: Path, parts: tuple[list[Path], dict], unit_folder: Path, dest: Path) -> Path:
    """The unit's model folder from a template (``parts``: its :func:`template_parts`): its files
    linked, its artifacts, a fresh ``MLmodel`` (libyaml's emitter where PyYAML has it: 10x faster)."""
    import copy

    import yaml

    shared, mlmodel = parts
    dest.mkdir(parents=True)
    for rel in shared:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(template / rel, dest / rel)
    (dest / "artifacts").mkdir(exist_ok=True)
    for file in ARTIFACTS.values():
        _link_or_copy(unit_folder / file, dest / "artifacts" / file)
    doc = copy.deepcopy(mlmodel)
    flavor = doc["flavors"]["python_function"]
    flavor["model_code_path"] = CODE_FILE
    for name, file in ARTIFACTS.items():
        flavor["artifacts"][name] = {"path": f"artifacts/{file}", "uri": file}
    doc["model_uuid"] = uuid.uuid4().hex
    doc["utc_time_created"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    doc["model_size_bytes"] = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    (dest / "MLmodel").write_text(yaml.dump(doc, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper),
                                            sort_keys=False, default_flow_style=False))
    return dest


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


class ModelFolders(Mapping):
    """unit key -> the unit's MLflow model folder, made on first access inside the ``with`` block."""

    def __init__(self, params, exp, folders: Mapping[str, Path], slices_dir: str | Path | None = None):
        self.params, self.exp, self.folders, self.slices_dir = params, exp, dict(folders), slices_dir
        self.made: dict[str, Path] = {}
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.template: Path | None = None
        self.parts: tuple[list[Path], dict] = ([], {})

    def __enter__(self) -> "ModelFolders":
        self.tmp = tempfile.TemporaryDirectory(prefix="driftmatrix-models-")
        return self

    def __exit__(self, *exc) -> None:
        if self.tmp is not None:
            self.tmp.cleanup()
            self.tmp = None

    def __len__(self) -> int:
        return len(self.folders)

    def __iter__(self):
        return iter(self.folders)

    def __contains__(self, key) -> bool:
        return key in self.folders

    def image_shape(self) -> tuple[int, int, int] | None:
        if self.exp.meta.input_kind != "image":
            return None
        if self.slices_dir is not None and (Path(self.slices_dir) / "images.npy").exists():
            return tuple(np.load(Path(self.slices_dir) / "images.npy", mmap_mode="r", allow_pickle=False).shape[1:])
        data = getattr(getattr(self.exp, "inputs", None), "data", None)  # an Experiment's PixelInputs
        if data is not None and data.ndim == 4:
            return int(data.shape[2]), int(data.shape[3]), int(data.shape[1])
        raise ValueError(f"{self.exp.spec.name}: cannot tell the image size for the model signature "
                         f"(pass slices_dir)")

    def __getitem__(self, key: str) -> Path:
        if key in self.made:
            return self.made[key]
        if self.exp.spec.inputs not in INPUT_KINDS:
            raise ValueError(f"{self.exp.spec.name}: {self.exp.spec.inputs!r} inputs cannot be packaged as an "
                             f"MLflow model")
        if self.tmp is None:
            raise RuntimeError("ModelFolders is used inside a `with` block")
        root = Path(self.tmp.name)
        if self.template is None:
            config = serving_config(self.params, self.exp, self.image_shape())
            self.template = root / "template"
            save_template(self.template, Path(self.folders[key]), config, input_example(config, self.slices_dir))
            self.parts = template_parts(self.template)
        self.made[key] = stamp(self.template, self.parts, Path(self.folders[key]), root / "units" / key)
        return self.made[key]


# --- loading --------------------------------------------------------------------------------------
class NotAModel(ValueError):
    """A folder that is not a driftmatrix pyfunc model (refused before MLflow runs any of it)."""


def verify(folder: str | Path, name: str | None = None) -> dict[str, Any]:
    """Refuse (``NotAModel``) a downloaded model folder unless it is what :class:`ModelFolders`
    writes: only the pyfunc flavour from this package's own code file, no pickled model or extra
    code paths, and a ``model.json`` that asks for nothing this project does not trust. Returns
    the config."""
    import yaml

    folder = Path(folder)
    label = name or str(folder)
    try:
        doc = yaml.safe_load((folder / "MLmodel").read_text())
        flavors = doc["flavors"]
        flavor = flavors["python_function"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise NotAModel(f"{label}: no readable MLmodel with a python_function flavour ({exc!r}), refused before "
                        f"loading") from None
    problems = []
    if set(flavors) != {"python_function"}:
        problems.append(f"flavours {sorted(flavors)}")
    if flavor.get("loader_module") != LOADER:
        problems.append(f"loader {flavor.get('loader_module')!r}")
    if flavor.get("python_model") or flavor.get("code"):
        problems.append("a pickled Python model or extra code paths")
    code = folder / os.path.basename(str(flavor.get("model_code_path") or ""))
    if not code.is_file() or file_digest(code) != file_digest(code_file()):
        problems.append(f"model code {code.name!r} is not this package's {CODE_FILE}")
    for name, art in (flavor.get("artifacts") or {}).items():
        path = (folder / str(art.get("path", ""))).resolve()
        if not path.is_file() or folder.resolve() not in path.parents:
            problems.append(f"artifact {name} outside the model")
    config = dict(flavor.get("config") or {})
    problems += _description_problems(folder / "artifacts" / DESCRIPTION, config)
    if problems:
        raise NotAModel(f"{label}: not a driftmatrix model, refused before loading: " + "; ".join(problems))
    return config


def _description_problems(path: Path, config: Mapping[str, Any]) -> list[str]:
    """What is wrong with a version's ``model.json`` for the loader, if anything."""
    try:
        desc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return [f"no readable {DESCRIPTION} ({type(exc).__name__})"]
    if desc.get("model") != config.get("model"):
        return [f"{DESCRIPTION} describes {desc.get('model')!r}, MLmodel {config.get('model')!r}"]
    if desc.get("format") == TABULAR_FORMAT:
        from driftmatrix.models.tabular import UntrustedModel, loading_trust

        if (desc.get("info") or {}).get("kind") == "Custom":
            project_params(desc.get("model"))
        try:
            loading_trust(str(desc["model"]), desc.get("info") or {})
        except UntrustedModel as exc:
            return [str(exc)]
    elif desc.get("format") != TORCH_FORMAT:
        return [f"{DESCRIPTION} format {desc.get('format')!r}"]
    return []


def load(uri: str, model_config: Mapping[str, Any] | None = None):
    """``mlflow.pyfunc.load_model`` of a driftmatrix model after :func:`verify` checked its folder."""
    import mlflow

    from driftmatrix.models.tabular import UntrustedModel

    with tempfile.TemporaryDirectory(prefix="driftmatrix-load-") as tmp:
        local = Path(uri) if Path(uri).is_dir() else Path(mlflow.artifacts.download_artifacts(uri, dst_path=tmp))
        verify(local, uri)
        try:
            return mlflow.pyfunc.load_model(str(local), model_config=dict(model_config or {}) or None)
        except UntrustedModel as exc:  # its skops bytes would build a type this project does not trust
            raise UntrustedModel(f"{uri}: {exc}") from None
