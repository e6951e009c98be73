"""Registered versions as MLflow pyfunc models: packaged from code, loaded without pickle, served.

Each unit's MLflow run holds its ``model`` artifact as an MLflow model folder::

    MLmodel                      pyfunc flavour (loader: models from code), signature, config
    pyfunc_model.py              the model's code: ``set_model(UnitModel())`` (driftmatrix/pyfunc_model.py)
    artifacts/model.safetensors  the unit's weights (the checkpoint's, byte for byte)
    artifacts/model.json         how to rebuild the network (``checkpoints.load_model_folder``)
    artifacts/unit.json          the unit's record (what trained it, on which rows)
    input_example.json, serving_input_example.json, requirements.txt, python_env.yaml, conda.yaml

Nothing in it is a pickle, and loading unpickles nothing: MLflow runs ``pyfunc_model.py``, which
builds :class:`UnitModel`; that rebuilds the network from ``model.json`` and reads the weights
with safetensors (a tabular unit: its skops parts with its trusted types, a LightGBM booster
from its text, MLP-Tab's tensors; ``checkpoints.load_model_folder``). What a user has goes in:
images as uint8 arrays (N, H, W, 3) for image models (file paths through :func:`read_images`),
raw strings for text models (the model runs the encoder the embed stage ran, from the same
local sources), a DataFrame of the raw feature columns for tabular models (numbers, categories
as text, missing values as None / NaN); class probabilities (or the regression value) come out
as a DataFrame with one named column per class.

Writing a model with ``mlflow.pyfunc.save_model`` takes most of a second, so
:class:`ModelFolders` saves it once per model (a template) and makes each unit's folder from
it: the template's files, the unit's weights, description and record, and a fresh ``MLmodel``
identity (a few milliseconds).

:func:`load` is the one loading path of this package (``tracking.load_registered`` calls it):
it checks that a downloaded folder is such a model (only the pyfunc flavour, loaded from this
package's own code file, no pickled model) and then calls ``mlflow.pyfunc.load_model``.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd
from mlflow.pyfunc import PythonModel

from driftmatrix.checkpoints import DESCRIPTION, RECORD, WEIGHTS

#: ``model_logged`` tag of a run whose ``model`` artifact is this format (others are logged again).
MODEL_FORMAT = "driftmatrix-pyfunc-1"
CODE_MODULE = "driftmatrix.pyfunc_model"
CODE_FILE = "pyfunc_model.py"
ARTIFACTS = {"weights": WEIGHTS, "description": DESCRIPTION, "record": RECORD}
LOADER = "mlflow.pyfunc.loaders.code_model"
#: Model inputs packaged as MLflow models (``models.registry.INPUTS``).
INPUT_KINDS = ("pixels", "token_states", "pooled", "none", "table")
log = logging.getLogger(__name__)
#: What an image model's predict also accepts: file paths (a list, Series or one-column frame).
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


# --- the model ------------------------------------------------------------------------------------
class UnitModel(PythonModel):
    """One trained unit: ``predict`` turns images, texts or feature rows into class probabilities.

    ``context.model_config`` (the ``config`` of the MLmodel's pyfunc flavour, see
    :func:`serving_config`) says what the network reads (``inputs``), the output columns, the
    image shape, the encoder of cached-feature models and the precision its unit was scored in.
    Pass ``model_config={"device": "cuda"}`` to ``mlflow.pyfunc.load_model`` to predict on a GPU.
    """

    # The signature in MLmodel, not predict's type hints, says what goes in (MLflow enforces it
    # before predict): no type-hint wrapper, and no advice to add hints at every load.
    _skip_type_hint_validation = True

    def load_context(self, context) -> None:
        import torch

        from driftmatrix.checkpoints import load_model_folder

        self.config = dict(context.model_config or {})
        weights = Path(context.artifacts["weights"])
        if Path(context.artifacts["description"]).parent != weights.parent:
            raise ValueError("model.json and model.safetensors must lie in one folder")
        self.device = torch.device(self.config.get("device") or "cpu")
        self.network = load_model_folder(weights.parent, device=str(self.device))
        self.channels_last = self.config.get("inputs") == "pixels" and self.config.get("family") != "MLP"
        if self.channels_last:  # as the evaluate stage scores it (training.Experiment.new_model)
            self.network = self.network.to(memory_format=torch.channels_last)
        self.encoder = None
        if self.config.get("inputs") in ("token_states", "pooled"):
            from driftmatrix.features import encoders

            self.encoder = encoders.load(self.config["encoder"], self.embed().sources, self.device)

    def embed(self):
        from driftmatrix.features.cache import embed_config

        return embed_config(self.config.get("embed") or {})

    def inputs(self, model_input):
        """The network's inputs (``features.inputs`` objects) for a batch of user data."""
        kind, modality = self.config.get("inputs"), self.config.get("modality")
        if kind == "none":
            from driftmatrix.features.inputs import RowCountInputs

            return RowCountInputs(len(as_texts(model_input) if modality == "text" else
                                      as_images(model_input, self.config.get("image_shape"))))
        if kind == "pixels":
            from driftmatrix.features.inputs import PixelInputs

            inputs = PixelInputs(as_images(model_input, self.config.get("image_shape"))).to(self.device)
            inputs.channels_last = self.channels_last
            return inputs
        return self.encoded(model_input, kind, modality)

    def encoded(self, model_input, kind: str, modality: str):
        """Run the embed stage's own shard encoder (``cache.encode_shard``) over the batch: the same
        code, batching by token length and float16 token states as the feature cache."""
        from driftmatrix.features import cache

        info = {"dim": None, "encoder": self.config["encoder"]}
        items = as_texts(model_input) if modality == "text" else as_images(model_input, self.config.get("image_shape"))
        ctx = cache.LoadedEncoder(self.encoder, self.embed(), modality)
        arrays = cache.encode_shard(ctx, cache.Shard(0, items, kind == "token_states"))
        info["dim"] = int(arrays["pooled"].shape[1])
        if kind == "pooled":
            return cache.PooledInputs(arrays["pooled"], info).to(self.device)
        info["max_len"] = self.embed().max_length
        return cache.TokenStateInputs([arrays["states"]], [arrays["mask"]], max(len(items), 1), info,
                                      self.device)

    def predict(self, context, model_input, params=None) -> pd.DataFrame:
        from driftmatrix.training import predict as forward

        columns = list(self.config["columns"])
        if self.config.get("inputs") == "table":  # the tabular model maps the raw columns itself
            frame = as_frame(model_input, self.config["numeric"], self.config["categorical"])
            logits = self.network.predict_frame(frame) if len(frame) else np.zeros((0, len(columns)))
            return pd.DataFrame(outputs_to_scores(logits, self.config["task"]), columns=columns)
        inputs = self.inputs(model_input)
        if len(inputs) == 0:
            return pd.DataFrame({c: np.zeros(0) for c in columns})
        batch = int((params or {}).get("batch_size") or self.config.get("batch_size") or 256)
        logits = forward(self.network, inputs, batch_size=batch, precision=self.config.get("precision", "fp32"))
        return pd.DataFrame(outputs_to_scores(logits, self.config["task"]), columns=columns)


def outputs_to_scores(logits: np.ndarray, task: str) -> np.ndarray:
    """Network outputs -> what a user reads: softmax probabilities (binary, multiclass), sigmoid
    probabilities per category (multilabel), the value itself (regression); float64."""
    x = np.asarray(logits, dtype=np.float64)
    if task in ("binary", "multiclass"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if task == "multilabel":
        return 1.0 / (1.0 + np.exp(-x))
    return x.reshape(len(x), -1)


# --- what goes in ---------------------------------------------------------------------------------
def _is_paths(values: Sequence[Any]) -> bool:
    return len(values) > 0 and all(isinstance(v, (str, os.PathLike)) for v in values)


def as_images(model_input, shape: Sequence[int] | None = None) -> np.ndarray:
    """uint8 (N, H, W, 3) from an array, a list of arrays, or file paths (list, Series, frame)."""
    data = model_input
    if isinstance(data, dict):  # a named tensor
        data = next(iter(data.values()))
    if isinstance(data, pd.DataFrame):
        data = data.iloc[:, 0].tolist() if data.shape[1] == 1 else data.to_numpy()
    if isinstance(data, pd.Series):
        data = data.tolist()
    if isinstance(data, (list, tuple)) and _is_paths(data):
        return read_images(data, shape)
    if isinstance(data, np.ndarray) and data.dtype.kind in "UO" and data.ndim == 1 and _is_paths(list(data)):
        return read_images(list(data), shape)
    arr = np.asarray(data)
    if arr.ndim == 3:
        arr = arr[None]
    if arr.ndim != 4 or arr.shape[-1] != 3:
        raise ValueError(f"images must be (N, H, W, 3) uint8 arrays or file paths, got shape {arr.shape}")
    if shape is not None and tuple(arr.shape[1:3]) != tuple(shape[:2]):
        raise ValueError(f"images must be {shape[0]} x {shape[1]} pixels, got {arr.shape[1]} x {arr.shape[2]} "
                         f"(driftmatrix.serving.read_images resizes files)")
    if arr.dtype != np.uint8:
        if arr.size and (arr.min() < 0 or arr.max() > 255 or not np.all(np.equal(np.mod(arr, 1), 0))):
            raise ValueError("image values must be integers in 0..255")
        arr = arr.astype(np.uint8)
    return np.ascontiguousarray(arr)


def read_images(paths: Iterable[str | os.PathLike], shape: Sequence[int] | None = None) -> np.ndarray:
    """Image files -> uint8 (N, H, W, 3), RGB, resized (bilinear) to ``shape`` (H, W) when given:
    what an image model's ``predict`` takes."""
    from PIL import Image

    out = []
    for path in paths:
        with Image.open(path) as im:
            im = im.convert("RGB")
            if shape is not None and im.size != (shape[1], shape[0]):
                im = im.resize((int(shape[1]), int(shape[0])), Image.BILINEAR)
            out.append(np.asarray(im, dtype=np.uint8))
    return np.stack(out) if out else np.zeros((0, *(shape or (0, 0))[:2], 3), np.uint8)


def as_texts(model_input) -> list[str]:
    """Raw strings from a list, array, Series, one-column frame (or a ``text`` column), or a str."""
    data = model_input
    if isinstance(data, str):
        return [data]
    if isinstance(data, dict):
        data = data.get("text", next(iter(data.values())))
    if isinstance(data, pd.DataFrame):
        data = data["text"] if "text" in data.columns else data.iloc[:, 0]
    return ["" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in list(np.ravel(data))]


def as_frame(model_input, numeric: Sequence[str], categorical: Sequence[str]) -> pd.DataFrame:
    """The feature columns of a tabular model's input (a DataFrame, a dict of columns or a list of
    row dicts): numbers as float64 (NaN missing), categories as text (None missing); a feature the
    input lacks is missing in every row, other columns are ignored."""
    frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
    out = {}
    for name in numeric:
        out[name] = (pd.to_numeric(frame[name], errors="coerce").astype(np.float64) if name in frame
                     else np.full(len(frame), np.nan))
    for name in categorical:
        values = frame[name].to_numpy(dtype=object) if name in frame else np.full(len(frame), None, dtype=object)
        out[name] = [None if v is None or (isinstance(v, float) and np.isnan(v)) else str(v) for v in values]
    return pd.DataFrame(out, index=frame.index)


# --- packaging ------------------------------------------------------------------------------------
def output_columns(meta) -> list[str]:
    """One column per output: class names (binary, multiclass), categories (multilabel) or
    ``prediction`` (regression)."""
    n = meta.num_outputs
    if meta.task == "regression":
        return ["prediction"]
    names = [str(c) for c in meta.class_names]
    if meta.task == "multilabel" and len(names) != n:
        names = [c.removeprefix("label_") for c in meta.label_columns]
    return names if len(names) == n and len(set(names)) == n else [f"class_{k}" for k in range(n)]


def serving_config(params, exp, image_shape: Sequence[int] | None) -> dict[str, Any]:
    """The pyfunc flavour's ``config`` of one model: all a unit's ``predict`` needs beyond its
    weights (the same for every unit of the model)."""
    from driftmatrix.features import cache, encoders

    spec, meta = exp.spec, exp.meta
    modality = meta.input_kind if meta.input_kind in ("image", "table") else "text"
    config: dict[str, Any] = {
        "format": MODEL_FORMAT, "dataset": exp.dataset, "model": spec.name, "family": spec.family,
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
    if spec.inputs == "table":
        config.update(numeric=[str(f) for f in meta.numeric], categorical=[str(f) for f in meta.categorical])
    return config


def signature(config: Mapping[str, Any]):
    """Inputs: a uint8 tensor (-1, H, W, 3) for image datasets, one string column for text ones,
    the feature columns for tabular models (numeric as double, categorical as string, each
    optional: missing values allowed); outputs: one double column per class (or ``prediction``)."""
    from mlflow.models import ModelSignature
    from mlflow.types import ColSpec, DataType, Schema, TensorSpec

    if config["modality"] == "image":
        h, w, c = config["image_shape"] or (-1, -1, 3)
        inputs = Schema([TensorSpec(np.dtype(np.uint8), (-1, h, w, c))])
    elif config.get("inputs") == "table":
        inputs = Schema([ColSpec(DataType.double, f, required=False) for f in config["numeric"]]
                        + [ColSpec(DataType.string, f, required=False) for f in config["categorical"]])
    else:
        inputs = Schema([ColSpec(DataType.string)])
    return ModelSignature(inputs=inputs, outputs=Schema([ColSpec(DataType.double, c) for c in config["columns"]]))


def input_example(config: Mapping[str, Any], slices_dir: str | Path | None):
    """One image (the first of the slices, or zeros), two texts or three feature rows of the slices."""
    from driftmatrix.slicing import load_slices

    rows = images = None
    if slices_dir is not None and (Path(slices_dir) / "rows.parquet").exists():
        rows, _, images = load_slices(slices_dir)
    if config.get("inputs") == "table":
        from driftmatrix.data.table import feature_column

        names = [*config["numeric"], *config["categorical"]]
        if rows is not None and len(rows) and all(feature_column(f) in rows.columns for f in names):
            head = rows[[feature_column(f) for f in names]].head(3).set_axis(names, axis=1)  # no internal column
            return as_frame(head, config["numeric"], config["categorical"]).reset_index(drop=True)
        return as_frame(pd.DataFrame(index=range(1)), config["numeric"], config["categorical"])
    if config["modality"] == "image":
        if images is not None and len(images):
            return np.ascontiguousarray(images[:1])
        h, w, c = config["image_shape"]
        return np.zeros((1, h, w, c), np.uint8)
    if rows is not None and "text" in rows.columns and len(rows):
        return [str(t)[:500] for t in rows["text"].fillna("").head(2)]
    return ["an example document", "another one"]


def requirements(config: Mapping[str, Any] | None = None) -> list[str]:
    """Pinned pip requirements of a model (the libraries its code imports; driftmatrix itself
    is this project's package, installed in the environment that loads it)."""
    from importlib import metadata

    names = ["mlflow", "torch", "safetensors", "numpy", "pandas", "pillow"]
    if (config or {}).get("inputs") == "table":
        names += ["scikit-learn", "skops", "lightgbm"]
    out = []
    for name in names:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(name)
    return out


def code_file() -> Path:
    """This package's ``pyfunc_model.py`` (found without importing it: importing runs ``set_model``)."""
    return Path(importlib.util.find_spec(CODE_MODULE).origin)


def save_template(path: Path, unit_folder: Path, config: Mapping[str, Any], example) -> None:
    """``mlflow.pyfunc.save_model`` of one unit as a model from code (no pickle is written)."""
    import mlflow

    with quiet_mlflow():
        mlflow.pyfunc.save_model(
            str(path), python_model=str(code_file()),
            artifacts={name: str(unit_folder / file) for name, file in ARTIFACTS.items()},
            signature=signature(config), input_example=example, pip_requirements=requirements(config),
            model_config=dict(config))


@contextlib.contextmanager
def quiet_mlflow():
    """MLflow's per-call notices stay off the terminal: "Created version ..." lines, type-hint
    advice and artifact download bars (its logger at ERROR; warnings, stdout and stderr caught).
    Here rather than in ``tracking``, which imports this module (and not the reverse)."""
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


def stamp(template: Path, unit_folder: Path, dest: Path) -> Path:
    """The unit's model folder from a template: its files (linked where the file system allows),
    the unit's artifacts, and an ``MLmodel`` with its own uuid, creation time and size."""
    import yaml

    dest.mkdir(parents=True)
    for src in template.rglob("*"):
        rel = src.relative_to(template)
        if src.is_dir() or rel.parts[0] == "artifacts" or rel.name == "MLmodel":
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(src, dest / rel)
    (dest / "artifacts").mkdir(exist_ok=True)
    for file in ARTIFACTS.values():
        _link_or_copy(unit_folder / file, dest / "artifacts" / file)
    doc = yaml.safe_load((template / "MLmodel").read_text())
    flavor = doc["flavors"]["python_function"]
    flavor["model_code_path"] = CODE_FILE
    for name, file in ARTIFACTS.items():
        flavor["artifacts"][name] = {"path": f"artifacts/{file}", "uri": file}
    doc["model_uuid"] = uuid.uuid4().hex
    doc["utc_time_created"] = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    doc["model_size_bytes"] = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    (dest / "MLmodel").write_text(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    return dest


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copyfile(src, dst)


class ModelFolders(Mapping):
    """unit key -> the unit's MLflow model folder, made on first access (in a temporary folder
    that lives as long as the ``with`` block): what ``tracking.sync_units`` logs as each run's
    ``model``. The template is saved at the first access (once per model and sync)."""

    def __init__(self, params, exp, folders: Mapping[str, Path], slices_dir: str | Path | None = None):
        self.params, self.exp, self.folders = params, exp, dict(folders)
        self.slices_dir = slices_dir
        self.made: dict[str, Path] = {}
        self.tmp: tempfile.TemporaryDirectory | None = None
        self.template: Path | None = None

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
        self.made[key] = stamp(self.template, Path(self.folders[key]), root / "units" / key)
        return self.made[key]


# --- loading --------------------------------------------------------------------------------------
class NotAModel(ValueError):
    """A folder that is not a driftmatrix pyfunc model (refused before MLflow runs any of it)."""


def verify(folder: str | Path) -> dict[str, Any]:
    """Refuse (``NotAModel``) a downloaded model folder unless it is what :class:`ModelFolders`
    writes: only the pyfunc flavour, MLflow's models-from-code loader, this package's own code file
    (byte for byte), no pickled Python model, no extra code paths, its artifacts inside the folder.
    Returns the flavour's config."""
    import yaml

    folder = Path(folder)
    try:
        doc = yaml.safe_load((folder / "MLmodel").read_text())
        flavors = doc["flavors"]
        flavor = flavors["python_function"]
    except (OSError, KeyError, TypeError, yaml.YAMLError) as exc:
        raise NotAModel(f"{folder}: no readable MLmodel with a python_function flavour ({exc!r}), refused before "
                        f"loading") from None
    problems = []
    if set(flavors) != {"python_function"}:
        problems.append(f"flavours {sorted(flavors)}")
    if flavor.get("loader_module") != LOADER:
        problems.append(f"loader {flavor.get('loader_module')!r}")
    if flavor.get("python_model") or flavor.get("code"):
        problems.append("a pickled Python model or extra code paths")
    code = folder / os.path.basename(str(flavor.get("model_code_path") or ""))
    if not code.is_file() or _digest(code) != _digest(code_file()):
        problems.append(f"model code {code.name!r} is not this package's {CODE_FILE}")
    for name, art in (flavor.get("artifacts") or {}).items():
        path = (folder / str(art.get("path", ""))).resolve()
        if not path.is_file() or folder.resolve() not in path.parents:
            problems.append(f"artifact {name} outside the model")
    if problems:
        raise NotAModel(f"{folder}: not a driftmatrix model, refused before loading: " + "; ".join(problems))
    return dict(flavor.get("config") or {})


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load(uri: str, model_config: Mapping[str, Any] | None = None):
    """``mlflow.pyfunc.load_model`` of a driftmatrix model (``models:/...``, ``runs:/...`` or a
    folder), after :func:`verify` has checked the downloaded folder. Its ``predict`` takes images,
    texts or feature rows and returns class probabilities; ``.unwrap_python_model().network`` is
    the torch module (a tabular model: ``models.tabular.TabularModel``)."""
    import mlflow

    with tempfile.TemporaryDirectory(prefix="driftmatrix-load-") as tmp:
        local = Path(uri) if Path(uri).is_dir() else Path(mlflow.artifacts.download_artifacts(uri, dst_path=tmp))
        verify(local)
        return mlflow.pyfunc.load_model(str(local), model_config=dict(model_config or {}) or None)
