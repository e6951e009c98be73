"""Feature caches: run each frozen encoder once over every row of the slices, reuse it everywhere.

``<features>/<key>/`` (key: encoder, max length or image size, and a hash of the weights, the
slices' ``data_version`` and the shard size) holds a ``manifest.json`` and per shard the pooled
features, and for text models the float16 token states and their mask. Shards are executor work
items: workers encode, the driver alone writes each shard atomically, so an interrupted run redoes
only the missing ones. Readers memory-map the shards, so token states never have to fit in memory."""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from driftmatrix.config import build, fingerprint
from driftmatrix.data.table import DataError
from driftmatrix.features import encoders

log = logging.getLogger(__name__)

FORMAT = 1
GPU_SHARE = 0.6  # token states go resident on a GPU when they take under this share of its free memory


@dataclass(frozen=True)
class EmbedConfig:
    """``params.yaml: embed`` (all optional)."""

    token_encoder: str | None = None  # encoder of the token-state models; None: theirs (RoBERTa)
    max_length: int = 128  # tokens per document (paper: 128 Amazon, 256 arXiv)
    batch_size: int = 64
    shard_size: int = 4096  # documents or images per shard file
    device: str = "auto"
    sources: Mapping[str, str] = field(default_factory=dict)  # name -> local folder / weight file
    progress: bool = True


def embed_config(raw: Mapping[str, Any] | EmbedConfig | None) -> EmbedConfig:
    if isinstance(raw, EmbedConfig):
        return raw
    values = dict(raw or {})
    if "sources" in values and values["sources"] is None:  # `sources:` left empty in YAML
        values["sources"] = {}
    return build(EmbedConfig, values, "params.yaml: embed")


def encoder_of(inputs: str, spec_encoder: str | None, cfg: EmbedConfig) -> str:
    """The encoder whose cache a model reads (token-state models follow ``embed.token_encoder``)."""
    if inputs == "token_states" and cfg.token_encoder:
        return cfg.token_encoder
    if not spec_encoder:
        raise DataError(f"a model with inputs {inputs!r} needs an encoder")
    return spec_encoder


def needed(model_names: Iterable[str], cfg: EmbedConfig) -> dict[str, bool]:
    """Encoders the configured models read -> whether token states (not only pooled) are needed."""
    from driftmatrix.models.catalog import get

    out: dict[str, bool] = {}
    for name in model_names:
        spec = get(name)
        if spec.inputs in ("pixels", "table", "none"):  # raw pixels, features or no inputs: nothing to cache
            continue
        enc = encoder_of(spec.inputs, spec.encoder, cfg)
        out[enc] = out.get(enc, False) or spec.inputs == "token_states"
    return out


def features_identity(encoder: str, cfg: EmbedConfig) -> tuple[str, Any, dict[str, str], str]:
    """What computes an encoder's features: (name, weights, library versions, extent); the weights
    are an ``embed.sources`` path by content, else the hub id (the bundled copy is the same weights)."""
    from driftmatrix.units.environment import content_digest, package_version

    info = encoders.info_for(encoder)
    source = cfg.sources.get(encoder)
    weights = {"content": content_digest(source)} if source and Path(source).exists() else source or info.source
    extent = f"len{cfg.max_length}" if info.modality == "text" else f"{encoders.IMAGE_SIZE}px"
    return encoder, weights, {lib: package_version(lib) for lib in encoders.BACKEND_LIBRARIES[info.backend]}, extent


def encoder_identity(inputs: str, spec_encoder: str | None, embed: Mapping[str, Any] | EmbedConfig | None) -> str:
    """What a model's cached inputs are, apart from the data ('' for none); part of every unit key."""
    if inputs not in ("token_states", "pooled"):
        return ""
    cfg = embed_config(embed)
    return fingerprint(FORMAT, *features_identity(encoder_of(inputs, spec_encoder, cfg), cfg))


def cache_key(encoder: str, cfg: EmbedConfig, data_version: str) -> str:
    """Folder name of a cache; any change of weights, libraries, length, data or sharding gives a new one."""
    _, _, _, extent = identity = features_identity(encoder, cfg)
    digest = fingerprint(FORMAT, *identity, data_version, cfg.shard_size)
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", encoder).strip("_")[-60:]
    return f"{slug}-{extent}-{digest}"


def shard_files(shard: int, with_states: bool) -> list[str]:
    names = ["pooled"] + (["mask", "states"] if with_states else [])
    return [f"{n}-{shard:05d}.npy" for n in names]


def _save_atomic(path: Path, array: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as fh:
        np.save(fh, array)
    os.replace(tmp, path)


def _encode_text_shard(encoder, texts: list[str], cfg: EmbedConfig, with_states: bool):
    """(pooled, mask, states) of one shard; documents are batched by similar token length."""
    import torch

    from driftmatrix.features.pooling import masked_mean

    lengths = encoder.lengths(texts, cfg.max_length) if hasattr(encoder, "lengths") else np.array(
        [len(t) for t in texts])
    order = np.argsort(-lengths, kind="stable")
    pooled = np.zeros((len(texts), 0), np.float32)
    states = masks = None
    for start in range(0, len(texts), cfg.batch_size):
        idx = order[start:start + cfg.batch_size]
        s, m = encoder.encode([texts[i] for i in idx], cfg.max_length)
        p = masked_mean(torch.from_numpy(s), torch.from_numpy(m)).numpy()
        if pooled.shape[1] == 0:
            pooled = np.zeros((len(texts), p.shape[1]), np.float32)
            if with_states:
                states = np.zeros((len(texts), cfg.max_length, s.shape[2]), np.float16)
                masks = np.zeros((len(texts), cfg.max_length), bool)
        pooled[idx] = p
        if with_states:
            states[idx] = s.astype(np.float16)
            masks[idx] = m
    return pooled, masks, states


@dataclass(frozen=True)
class LoadedEncoder:
    """A worker's context: the encoder, ready on its device, and how to run it."""

    encoder: Any
    cfg: EmbedConfig
    modality: str


@dataclass(frozen=True)
class EncoderRecipe:
    """A picklable description of a :class:`LoadedEncoder`: each worker loads the weights once."""

    name: str
    cfg: EmbedConfig
    load: Callable[..., Any] | None = None  # None: encoders.load, looked up when built

    def build(self) -> LoadedEncoder:
        load = self.load or encoders.load
        encoder = load(self.name, self.cfg.sources, None if self.cfg.device == "auto" else self.cfg.device)
        return LoadedEncoder(encoder, self.cfg, encoders.info_for(self.name).modality)


@dataclass(frozen=True)
class Shard:
    """One work item of the embed stage: shard ``index`` and its rows (a view of the items)."""

    index: int
    rows: Any  # texts or uint8 images (N, H, W, 3)
    with_states: bool


def encode_shard(ctx: LoadedEncoder, shard: Shard) -> dict[str, np.ndarray]:
    """Worker side of one shard: its arrays by file stem (pooled; mask and states for text models)."""
    cfg = ctx.cfg
    if ctx.modality == "text":
        pooled, masks, states = _encode_text_shard(ctx.encoder, [str(t) for t in shard.rows], cfg, shard.with_states)
        return {"pooled": pooled, **({"mask": masks, "states": states} if shard.with_states else {})}
    pooled = np.concatenate([ctx.encoder.encode(np.asarray(shard.rows[b:b + cfg.batch_size]))
                             for b in range(0, len(shard.rows), cfg.batch_size)]).astype(np.float32)
    return {"pooled": pooled}


def write_index(features_dir: str | Path) -> dict[str, Any]:
    """``index.json``: every complete cache in the folder (key -> encoder, length, data, size)."""
    index = {}
    for manifest_path in sorted(Path(features_dir).glob("*/manifest.json")):
        m = json.loads(manifest_path.read_text())
        if m.get("complete"):
            index[manifest_path.parent.name] = {k: m.get(k) for k in (
                "encoder", "source", "max_len", "image_size", "dim", "n", "has_states", "data_version")}
    (Path(features_dir) / "index.json").write_text(json.dumps(index, indent=2, sort_keys=True))
    return index


# --- reading ------------------------------------------------------------------------------------
def open_cache(path: Path, data_version: str, with_states: bool) -> dict[str, Any]:
    manifest_path = path / "manifest.json"
    if not manifest_path.exists():
        raise DataError(f"{path}: no feature cache (run `driftmatrix embed` first)")
    manifest = json.loads(manifest_path.read_text())
    if not manifest.get("complete") or manifest.get("data_version") != data_version:
        raise DataError(f"{path}: feature cache incomplete or for other data (run `driftmatrix embed`)")
    if with_states and not manifest.get("has_states"):
        raise DataError(f"{path}: cache holds pooled features only; token states are needed "
                        f"(run `driftmatrix embed` with the token-state models configured)")
    return manifest


class PooledInputs:
    """Cached pooled features (N, D) as one float tensor; batch(idx) -> (features,)."""

    def __init__(self, data, info: Mapping[str, Any]):
        import torch

        self.data = data if isinstance(data, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(data))
        self.info = dict(info)

    def __len__(self) -> int:
        return len(self.data)

    def to(self, device) -> "PooledInputs":
        return PooledInputs(self.data.to(device), self.info)

    def batch(self, idx):
        import torch

        return (torch.index_select(self.data, 0, idx.to(self.data.device)),)


class TokenStateInputs:
    """Memory-mapped token-state shards; batch(idx) -> (states float32 (B, L', D), mask (B, L')),
    each batch cut to its longest document (the models ignore padding, so only the work changes)."""

    def __init__(self, states: list[np.ndarray], masks: list[np.ndarray], shard_size: int,
                 info: Mapping[str, Any], device=None):
        self.states, self.masks, self.shard_size = states, masks, shard_size
        self.info = dict(info)
        self.device = device
        self.n = sum(len(m) for m in masks)

    def __len__(self) -> int:
        return self.n

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes + m.nbytes for s, m in zip(self.states, self.masks))

    def to(self, device):
        """On a GPU with room for every state (float16), one resident copy; else batches from disk."""
        import torch

        device = torch.device(device)
        if device.type == "cuda" and self.nbytes < GPU_SHARE * torch.cuda.mem_get_info(device)[0]:
            return self.resident(device)
        return TokenStateInputs(self.states, self.masks, self.shard_size, self.info, device)

    def resident(self, device) -> "ResidentTokenStates":
        import torch

        first = self.states[0]
        states = torch.empty((self.n,) + first.shape[1:], dtype=torch.float16, device=device)
        masks = torch.empty((self.n, first.shape[1]), dtype=torch.bool, device=device)
        for k, (s, m) in enumerate(zip(self.states, self.masks)):
            lo = k * self.shard_size
            states[lo:lo + len(s)] = torch.from_numpy(np.array(s)).to(device)
            masks[lo:lo + len(m)] = torch.from_numpy(np.array(m)).to(device)
        return ResidentTokenStates(states, masks, self.info)

    def batch(self, idx):
        import torch

        rows = idx.cpu().numpy() if isinstance(idx, torch.Tensor) else np.asarray(idx)
        shard, local = np.divmod(rows, self.shard_size)
        first = self.states[0]
        states = np.empty((len(rows),) + first.shape[1:], first.dtype)
        masks = np.empty((len(rows), first.shape[1]), bool)
        for s in np.unique(shard):
            sel = shard == s
            states[sel] = self.states[s][local[sel]]
            masks[sel] = self.masks[s][local[sel]]
        longest = max(int(masks.sum(axis=1).max(initial=0)), 1)
        out_states = torch.from_numpy(states[:, :longest]).to(self.device).float()
        return out_states, torch.from_numpy(masks[:, :longest]).to(self.device)


class ResidentTokenStates:
    """Every token state in one device tensor (float16): batches are gathered on the device."""

    def __init__(self, states, masks, info: Mapping[str, Any]):
        self.states, self.masks, self.info = states, masks, dict(info)

    def __len__(self) -> int:
        return len(self.states)

    def to(self, device) -> "ResidentTokenStates":
        return ResidentTokenStates(self.states.to(device), self.masks.to(device), self.info)

    def batch(self, idx):
        import torch

        idx = idx.to(self.states.device)
        masks = torch.index_select(self.masks, 0, idx)
        longest = max(int(masks.sum(dim=1).max()) if len(idx) else 0, 1)
        return torch.index_select(self.states[:, :longest], 0, idx).float(), masks[:, :longest]


def load_cached_inputs(inputs: str, slices_dir: str | Path, features_dir: str | Path, encoder: str | None,
                       embed: Mapping[str, Any] | EmbedConfig | None = None):
    """Inputs of kind ``token_states`` or ``pooled`` for every row of the slices, from the cache."""
    if inputs not in ("token_states", "pooled"):
        raise DataError(f"unknown inputs kind {inputs!r}")
    cfg = embed_config(embed)
    name = encoder_of(inputs, encoder, cfg)
    version = json.loads((Path(slices_dir) / "manifest.json").read_text())["data_version"]
    key = cache_key(name, cfg, version)
    path = Path(features_dir) / key
    manifest = open_cache(path, version, inputs == "token_states")
    shards = range(manifest["n_shards"])
    info = {"dim": manifest["dim"], "encoder": name, "cache": key}
    if inputs == "pooled":
        pooled = np.concatenate([np.load(path / f"pooled-{s:05d}.npy", allow_pickle=False) for s in shards])
        return PooledInputs(pooled, info)
    states = [np.load(path / f"states-{s:05d}.npy", mmap_mode="r", allow_pickle=False) for s in shards]
    masks = [np.load(path / f"mask-{s:05d}.npy", mmap_mode="r", allow_pickle=False) for s in shards]
    return TokenStateInputs(states, masks, manifest["shard_size"], {**info, "max_len": manifest["max_len"]})
