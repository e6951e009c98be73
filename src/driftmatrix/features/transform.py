"""One transform per input kind, from a raw record to the model's input, and the forward pass as the
evaluate stage runs it: shared by the pyfunc model, ``estimate --data`` and the parity tests, so
what is served is what was scored. A record that cannot be read is a ``DataError`` naming it."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from driftmatrix.data.table import DataError

log = logging.getLogger(__name__)


def channels_last(config: Mapping[str, Any]) -> bool:
    """Whether the evaluate stage scores this model channels-last: pixel models but the flattening MLPs."""
    return config.get("inputs") == "pixels" and config.get("family") != "MLP"


def load_network(folder: str | Path, config: Mapping[str, Any], device="cpu"):
    """A unit's network from its folder (no pickle), in the memory layout the evaluate stage uses."""
    import torch

    from driftmatrix.models.catalog import load_model_folder

    network = load_model_folder(folder, device=str(device))
    return network.to(memory_format=torch.channels_last) if channels_last(config) else network


def load_encoder(config: Mapping[str, Any], device="cpu"):
    """The encoder the embed stage ran for a cached-feature model (None for the others)."""
    if config.get("inputs") not in ("token_states", "pooled"):
        return None
    from driftmatrix.features import encoders

    return encoders.load(config["encoder"], embed_of(config).sources, device)


def embed_of(config: Mapping[str, Any]):
    from driftmatrix.features.cache import embed_config

    return embed_config(config.get("embed") or {})


def model_inputs(config: Mapping[str, Any], model_input, encoder=None, device="cpu"):
    """The network's inputs for raw records, each kind read as the pipeline reads it."""
    from driftmatrix.features.inputs import PixelInputs, RowCountInputs

    kind, modality = config.get("inputs"), config.get("modality")
    if modality == "table":
        frame = as_frame(model_input, config["numeric"], config["categorical"], config.get("na_values"))
        if kind == "none":
            return RowCountInputs(len(frame))
        from driftmatrix.features.table import TableInputs

        return TableInputs.from_frame(frame, config["numeric"], config["categorical"])
    items = as_texts(model_input) if modality == "text" else as_images(model_input, config.get("image_shape"))
    if kind == "none" or not len(items):
        return RowCountInputs(len(items))
    if kind == "pixels":
        inputs = PixelInputs(items).to(device)
        inputs.channels_last = channels_last(config)
        return inputs
    return encoded(config, items, encoder, device)


def encoded(config: Mapping[str, Any], items, encoder, device="cpu"):
    """Cached-feature inputs of ``items`` made by the embed stage's own code (``cache.encode_shard``
    over shards of ``embed.shard_size``: its batching by token length, float16 token states)."""
    from driftmatrix.features import cache

    embed, states = embed_of(config), config["inputs"] == "token_states"
    ctx = cache.LoadedEncoder(encoder, embed, config["modality"])
    size = embed.shard_size
    shards = [cache.encode_shard(ctx, cache.Shard(k, items[at:at + size], states))
              for k, at in enumerate(range(0, len(items), size))]
    info = {"dim": int(shards[0]["pooled"].shape[1]), "encoder": config["encoder"]}
    if not states:
        return cache.PooledInputs(np.concatenate([s["pooled"] for s in shards]), info).to(device)
    return cache.TokenStateInputs([s["states"] for s in shards], [s["mask"] for s in shards], size,
                                  {**info, "max_len": embed.max_length}, device)


def forward(network, inputs, config: Mapping[str, Any], batch_size: int | None = None) -> np.ndarray:
    """The network's outputs on ``inputs`` exactly as the evaluate stage computes them."""
    from driftmatrix.learn.fit import predict

    if len(inputs) == 0:
        return np.zeros((0, len(config["columns"])), np.float32)
    batch = int(batch_size or config.get("batch_size") or 256)
    return predict(network, inputs, batch_size=batch, precision=config.get("precision", "fp32"))


def outputs_to_scores(logits: np.ndarray, task: str) -> np.ndarray:
    """Network outputs -> what a user reads (probabilities, or the regression value), float64."""
    x = np.asarray(logits, dtype=np.float64)
    if task in ("binary", "multiclass"):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if task == "multilabel":
        return 1.0 / (1.0 + np.exp(-x))
    return x.reshape(len(x), -1)


def _missing(v: Any) -> bool:
    return v is None or (pd.api.types.is_scalar(v) and bool(pd.isna(v)))


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
        raise DataError(f"images must be (N, H, W, 3) uint8 arrays or file paths, got shape {arr.shape}")
    if shape is not None and tuple(arr.shape[1:3]) != tuple(shape[:2]):
        raise DataError(f"images must be {shape[0]} x {shape[1]} pixels, got {arr.shape[1]} x {arr.shape[2]} "
                        f"(driftmatrix.features.transform.read_images reads and resizes files as ingestion does)")
    if arr.dtype != np.uint8:
        if arr.size and (arr.min() < 0 or arr.max() > 255 or not np.all(np.equal(np.mod(arr, 1), 0))):
            raise DataError("image values must be integers in 0..255")
        arr = arr.astype(np.uint8)
    arr = np.ascontiguousarray(arr)
    return arr if arr.flags.writeable else arr.copy()  # a served request's buffer: torch warns on read-only


def read_images(paths: Iterable[str | os.PathLike], shape: Sequence[int]) -> np.ndarray:
    """Image files -> uint8 (N, H, W, 3) as ingestion reads them (OpenCV INTER_AREA to the model's
    ``shape``); a file ingestion would drop is an error naming it."""
    from driftmatrix.data.jsonl import Drop
    from driftmatrix.data.sources.yearbook import decode

    if shape is None or int(shape[0]) != int(shape[1]):
        raise ValueError(f"read_images: images are read square, as ingestion reads them; got shape {shape}")
    out = []
    for path in paths:
        try:
            out.append(decode(Path(path).read_bytes(), int(shape[0])))
        except Drop as exc:
            raise DataError(f"{path}: {exc.describe()}") from None
    return np.stack(out) if out else np.zeros((0, int(shape[0]), int(shape[1]), 3), np.uint8)


def as_texts(model_input) -> list[str]:
    """Documents from a list, array, Series, frame or str, as ingestion reads a text field (None: '')."""
    data = model_input
    if isinstance(data, str):
        return [data.strip()]
    if isinstance(data, dict):
        data = data.get("text", next(iter(data.values())))
    if isinstance(data, pd.DataFrame):
        data = data["text"] if "text" in data.columns else data.iloc[:, 0]
    out = []
    for row, v in enumerate(data.tolist() if isinstance(data, pd.Series) else list(np.ravel(data))):
        if isinstance(v, (dict, list, tuple, bytes, bytearray)):
            raise DataError(f"text row {row}: a {type(v).__name__} is not a document")
        out.append("" if _missing(v) else str(v).strip())
    return out


def as_frame(model_input, numeric: Sequence[str], categorical: Sequence[str],
             na_values: Sequence[str] | None = None) -> pd.DataFrame:
    """Feature rows (a DataFrame, a dict of columns or a list of row dicts) as ingestion keeps them,
    value by value through the table reader's ``parse_number`` and ``parse_category``; a missing
    feature column or a value ingestion would drop is an error naming it."""
    from driftmatrix.data.sources.tabular import NA_VALUES, parse_category, parse_number

    na = frozenset(NA_VALUES if na_values is None else na_values)
    frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input)
    absent = [f for f in (*numeric, *categorical) if f not in frame.columns]
    if absent:
        raise DataError(f"feature column(s) {absent} missing from the input (its columns: "
                        f"{[str(c) for c in frame.columns][:20]}); send every feature, null where a value is missing")
    out = {name: pd.Series(_parsed(frame[name], parse_number, name, na), dtype=np.float64) for name in numeric}
    out.update({name: pd.Series(_parsed(frame[name], parse_category, name, na), dtype=object) for name in categorical})
    return pd.DataFrame(out, index=range(len(frame)))


def _parsed(column: pd.Series, parse, name: str, na: frozenset) -> list:
    """``parse(value, name, na)`` of every value of a column, each distinct value once."""
    from driftmatrix.data.jsonl import Drop
    from driftmatrix.data.sources.tabular import parse_number

    if parse is parse_number and column.dtype.kind in "iufb":  # what parse_number does, at once
        x = column.to_numpy(dtype=np.float64, na_value=np.nan)
        if np.isinf(x).any():
            raise DataError(f"row {int(np.flatnonzero(np.isinf(x))[0])}: field {name!r}: not a finite number")
        return list(x)
    done: dict = {}
    out = []
    for row, v in enumerate(column.tolist()):
        v = None if _missing(v) else v.item() if isinstance(v, np.generic) else v
        try:
            if v not in done:
                done[v] = parse(v, name, na)
        except Drop as exc:
            raise DataError(f"row {row}: {exc.describe()}") from None
        except TypeError:  # unhashable: a list or a mapping
            raise DataError(f"column {name!r} row {row}: a {type(v).__name__} is not a feature value") from None
        out.append(done[v])
    return out


# --- packaging ------------------------------------------------------------------------------------
def output_columns(meta) -> list[str]:
    """One column per output: class names, categories (multilabel) or ``prediction`` (regression)."""
    n = meta.num_outputs
    if meta.task == "regression":
        return ["prediction"]
    names = [str(c) for c in meta.class_names]
    if meta.task == "multilabel" and len(names) != n:
        names = [c.removeprefix("label_") for c in meta.label_columns]
    return names if len(names) == n and len(set(names)) == n else [f"class_{k}" for k in range(n)]
