"""Embed stage: each frozen encoder the configured models need runs once over every row of the
slices (``features.cache`` holds the cache's format and readers); resumable shard by shard, the
shards as work items of the stage executor (this process, or Ray tasks)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from driftmatrix.data.table import DataError
from driftmatrix.features import encoders
from driftmatrix.features.cache import (FORMAT, EmbedConfig, EncoderRecipe, Shard, _save_atomic, cache_key,
                                        embed_config, encode_shard, needed, shard_files, write_index)

log = logging.getLogger(__name__)


def build_cache(encoder_name: str, items, out_dir: str | Path, cfg: EmbedConfig, with_states: bool,
                data_version: str, load: Callable[..., Any] | None = None, executor=None) -> dict[str, Any]:
    """Encode every item into ``out_dir``, redoing only missing shards; ``load`` is top-level for Ray."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    info = encoders.info_for(encoder_name)
    n = len(items)
    n_shards = max(1, -(-n // cfg.shard_size))
    todo = [s for s in range(n_shards)
            if not all((out_dir / f).exists() for f in shard_files(s, with_states))]
    manifest_path = out_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    if not todo and manifest.get("complete") and (manifest.get("has_states") or not with_states):
        return manifest
    manifest = {"format": FORMAT, "encoder": encoder_name, "modality": info.modality,
                "source": cfg.sources.get(encoder_name) or info.source,
                "max_len": cfg.max_length if info.modality == "text" else None,
                "image_size": encoders.IMAGE_SIZE if info.modality == "image" else None,
                "data_version": data_version, "n": n, "shard_size": cfg.shard_size, "n_shards": n_shards,
                "has_states": False, "complete": False, "dim": None}
    manifest_path.write_text(json.dumps(manifest, indent=2))
    if todo:
        _encode_shards(EncoderRecipe(encoder_name, cfg, load), items, out_dir, with_states, todo, executor)
    manifest["dim"] = int(np.load(out_dir / "pooled-00000.npy", mmap_mode="r", allow_pickle=False).shape[1])
    manifest["has_states"] = all((out_dir / f).exists() for s in range(n_shards) for f in shard_files(s, True))
    manifest["complete"] = True
    manifest_path.write_text(json.dumps(manifest, indent=2))
    return manifest


def _encode_shards(recipe: EncoderRecipe, items, out_dir: Path, with_states: bool, todo: list[int],
                   executor=None) -> None:
    from driftmatrix.runtime.executor import LocalExecutor

    n, size = len(items), recipe.cfg.shard_size
    executor = executor or LocalExecutor(progress=recipe.cfg.progress)
    log.info("embed %s: %d shard(s) to encode (%d rows in all) -> %s", recipe.name, len(todo), n, out_dir)
    shards = [Shard(s, items[s * size:min(n, (s + 1) * size)], with_states) for s in todo]
    for shard, arrays in executor.map(encode_shard, recipe, shards, label=f"embed {recipe.name}"):
        for stem in ("pooled", "mask", "states"):  # the driver alone writes, each file atomically
            if stem in arrays:
                _save_atomic(out_dir / f"{stem}-{shard.index:05d}.npy", arrays[stem])


def run(params, slices_dir: str | Path, features_dir: str | Path,
        models: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Embed stage: cache every encoder the configured models read (skips finished caches)."""
    from driftmatrix.data.slicing import load_slices

    cfg = embed_config(params.extra.get("embed"))
    wanted = needed(models or list(params.models), cfg)
    Path(features_dir).mkdir(parents=True, exist_ok=True)  # the stage output exists even when unused
    if not wanted:
        log.info("embed: no configured model reads cached features; nothing to do")
        write_index(features_dir)
        return []
    from driftmatrix.runtime.executor import make_executor
    from driftmatrix.config import runtime_config

    rows, manifest, images = load_slices(slices_dir)
    version = manifest["data_version"]
    executor = make_executor(runtime_config(params), progress=cfg.progress)
    done = []
    for name, with_states in wanted.items():
        modality = encoders.info_for(name).modality
        if modality == "text":
            if "text" not in rows.columns:
                raise DataError(f"{slices_dir}: encoder {name} needs a text column; the slices have none")
            items = rows["text"].fillna("").to_numpy()
        else:
            if images is None:
                raise DataError(f"{slices_dir}: image encoder {name} needs images.npy; the slices have none")
            items = images
        out = Path(features_dir) / cache_key(name, cfg, version)
        done.append({**build_cache(name, items, out, cfg, with_states, version, executor=executor),
                     "path": str(out)})
    write_index(features_dir)
    return done
