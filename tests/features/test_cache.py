"""Feature caches: one encoder pass per document, keyed invalidation, resume, memory-mapped reads."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
from textfixtures import TOY, CountingEncoder

from driftmatrix.data.table import DataError
from driftmatrix.features import cache, encoders
from driftmatrix.stages import embed as embed_stage
from driftmatrix.features.cache import EmbedConfig, cache_key, load_cached_inputs
from driftmatrix.data.slicing import load_slices
from driftmatrix.units.experiment import Experiment


def n_rows(slices) -> int:
    return len(load_slices(slices)[0])


def with_embed(params, **embed):
    return replace(params, extra={**params.extra, "embed": {**params.extra["embed"], **embed}})


def test_encoder_runs_once_per_document_across_models_cutoffs_and_seeds(review_slices, counting_encoder, tmp_path):
    params, slices = review_slices
    models = {"FFN-S": {}, "TX-S": {}, "TextCNN-S": {}, "BiGRU-S": {}}
    params = replace(params, models=models, train=replace(params.train, seeds=(0, 1)))
    features = tmp_path / "features"
    embed_stage.run(params, slices, features)
    embed_stage.run(params, slices, features)  # a second embed run finds the cache complete
    assert len(counting_encoder) == 1 and counting_encoder[0].docs == n_rows(slices)
    for model in models:
        exp = Experiment(params, model, slices, features)
        for seed in (0, 1):
            for cutoff in (0, len(exp.labels) - 1):
                exp.train_unit(exp.plan.unit(seed, cutoff))
    assert len(counting_encoder) == 1 and counting_encoder[0].docs == n_rows(slices)


def test_changed_max_length_or_encoder_or_data_gives_a_new_cache(review_slices, counting_encoder, tmp_path):
    params, slices = review_slices
    features = tmp_path / "features"
    embed_stage.run(params, slices, features)
    embed_stage.run(with_embed(params, max_length=8), slices, features)
    embed_stage.run(with_embed(params, token_encoder="other-encoder"), slices, features)
    embed_stage.run(with_embed(params, sources={TOY: "/elsewhere/weights"}), slices, features)
    assert [e.docs for e in counting_encoder] == [n_rows(slices)] * 4
    index = json.loads((features / "index.json").read_text())
    assert len(index) == 4 and {v["max_len"] for v in index.values()} == {8, 16}
    cfg = EmbedConfig(token_encoder=TOY)
    assert cache_key(TOY, cfg, "v1") != cache_key(TOY, cfg, "v2")
    assert cache_key(TOY, cfg, "v1") == cache_key(TOY, EmbedConfig(token_encoder=TOY), "v1")
    short = load_cached_inputs("token_states", slices, features, "RoBERTa", with_embed(params, max_length=8).extra["embed"])
    assert short.info["max_len"] == 8 and short.info["encoder"] == TOY


def test_interrupted_caching_resumes_at_the_first_missing_shard(review_slices, monkeypatch, tmp_path):
    params, slices = review_slices
    features = tmp_path / "features"
    cfg = cache.embed_config(params.extra["embed"])
    first = CountingEncoder(fail_after=2 * cfg.shard_size)
    monkeypatch.setattr(encoders, "load", lambda *a, **k: first)
    with pytest.raises(KeyboardInterrupt):
        embed_stage.run(params, slices, features)
    (folder,) = features.iterdir()
    assert sorted(p.name for p in folder.glob("states-*.npy")) == ["states-00000.npy", "states-00001.npy"]
    assert not json.loads((folder / "manifest.json").read_text())["complete"]
    with pytest.raises(DataError, match="incomplete"):
        load_cached_inputs("token_states", slices, features, "RoBERTa", params.extra["embed"])
    second = CountingEncoder()
    monkeypatch.setattr(encoders, "load", lambda *a, **k: second)
    embed_stage.run(params, slices, features)
    assert second.docs == n_rows(slices) - 2 * cfg.shard_size
    fresh = CountingEncoder()
    monkeypatch.setattr(encoders, "load", lambda *a, **k: fresh)
    embed_stage.run(params, slices, tmp_path / "fresh")
    resumed = load_cached_inputs("token_states", slices, features, "RoBERTa", params.extra["embed"])
    whole = load_cached_inputs("token_states", slices, tmp_path / "fresh", "RoBERTa", params.extra["embed"])
    idx = torch.arange(len(whole))
    for a, b in zip(resumed.batch(idx), whole.batch(idx)):
        assert torch.equal(a, b)


def test_reads_match_the_encoder_output(review_slices, counting_encoder, tmp_path):
    params, slices = review_slices
    features = tmp_path / "features"
    embed_stage.run(params, slices, features)
    rows = load_slices(slices)[0]
    states = load_cached_inputs("token_states", slices, features, "RoBERTa", params.extra["embed"])
    pooled = load_cached_inputs("pooled", slices, features, TOY, params.extra["embed"])
    assert len(states) == len(pooled) == len(rows)
    assert states.info == {"dim": 8, "max_len": 16, "encoder": TOY, "cache": states.info["cache"]}
    idx = torch.tensor([len(rows) - 1, 0, 70, 3])  # across shards, unsorted
    x, mask = states.batch(idx)
    ref_states, ref_mask = CountingEncoder().encode([rows["text"][int(i)] for i in idx], 16)
    longest = int(ref_mask.sum(1).max())
    assert x.dtype == torch.float32 and x.shape == (4, longest, 8)  # cut to the longest document
    assert torch.equal(mask, torch.from_numpy(ref_mask[:, :longest]))
    np.testing.assert_allclose(x.numpy(), ref_states[:, :longest], atol=2e-3)  # stored as float16
    for got, want in zip(states.resident(torch.device("cpu")).batch(idx), (x, mask)):  # the GPU-resident path
        assert torch.equal(got, want)
    (p,) = pooled.batch(idx)
    expected = (ref_states * ref_mask[..., None]).sum(1) / ref_mask.sum(1, keepdims=True)
    np.testing.assert_allclose(p.numpy(), expected, rtol=1e-5, atol=1e-6)  # pooled from float32 states


def test_pooled_only_cache_is_upgraded_when_token_states_are_needed(review_slices, counting_encoder, tmp_path):
    params, slices = review_slices
    features = tmp_path / "features"
    assert cache.needed(["FFN-S", "MiniLM-L6", "CNN-S"], EmbedConfig()) == {"RoBERTa": True, "MiniLM-L6": False}
    assert cache.needed(["TX-S", "MiniLM-L6"], EmbedConfig(token_encoder="MiniLM-L6")) == {"MiniLM-L6": True}
    cfg = cache.embed_config(params.extra["embed"])
    items = load_slices(slices)[0]["text"].to_numpy()
    version = json.loads((slices / "manifest.json").read_text())["data_version"]
    out = features / cache_key(TOY, cfg, version)
    embed_stage.build_cache(TOY, items, out, cfg, False, version)
    assert not any(out.glob("states-*")) and counting_encoder[-1].docs == len(items)
    with pytest.raises(DataError, match="pooled features only"):
        load_cached_inputs("token_states", slices, features, "RoBERTa", params.extra["embed"])
    load_cached_inputs("pooled", slices, features, TOY, params.extra["embed"])
    embed_stage.build_cache(TOY, items, out, cfg, True, version)
    assert json.loads((out / "manifest.json").read_text())["has_states"]
    load_cached_inputs("token_states", slices, features, "RoBERTa", params.extra["embed"])


def test_missing_cache_names_the_embed_command(review_slices, tmp_path):
    params, slices = review_slices
    with pytest.raises(DataError, match="driftmatrix embed"):
        load_cached_inputs("token_states", slices, tmp_path, "RoBERTa", params.extra["embed"])


def test_image_only_models_leave_an_empty_index(review_slices, counting_encoder, tmp_path):
    params, slices = review_slices
    assert embed_stage.run(replace(params, models={"MLP-S": {}}), slices, tmp_path / "features") == []
    assert json.loads((tmp_path / "features" / "index.json").read_text()) == {} and not counting_encoder


def test_embed_section_is_checked():
    from driftmatrix.config import ConfigError

    with pytest.raises(ConfigError, match="embed.*max_len"):
        cache.embed_config({"max_len": 64})
    assert cache.embed_config({"sources": None}).sources == {}
    assert cache.embed_config(None) == EmbedConfig()


def test_ray_executor_writes_the_same_shards_as_local(review_slices, tmp_path, ray_cluster):
    from textfixtures import load_counting

    from driftmatrix.runtime.executor import RayExecutor
    from driftmatrix.config import RuntimeConfig

    params, slices = review_slices
    cfg = cache.embed_config(params.extra["embed"])
    items = load_slices(slices)[0]["text"].to_numpy()
    version = json.loads((slices / "manifest.json").read_text())["data_version"]
    local = embed_stage.build_cache(TOY, items, tmp_path / "local", cfg, True, version, load=load_counting)
    ray = embed_stage.build_cache(TOY, items, tmp_path / "ray", cfg, True, version, load=load_counting,
                            executor=RayExecutor(RuntimeConfig(executor="ray"), progress=False))
    assert local == ray and local["complete"] and local["n_shards"] >= 3  # several shards, in any order
    files = sorted(p.name for p in (tmp_path / "local").iterdir())
    assert files == sorted(p.name for p in (tmp_path / "ray").iterdir()) and len(files) == 1 + 3 * local["n_shards"]
    for name in files:
        assert (tmp_path / "local" / name).read_bytes() == (tmp_path / "ray" / name).read_bytes(), name


def test_embed_sources_are_keyed_by_their_contents(tmp_path):
    """A local encoder's weights and config key exactly the units that read its features, and its
    cache folder: a changed weight or config file rekeys them and nothing else; the same bytes
    again, a moved folder or a hidden file beside the weights change nothing."""
    import os

    from driftmatrix.config import parse_params
    from driftmatrix.units.environment import Environment
    from driftmatrix.units.plan import model_plan

    folder, weights = tmp_path / "minilm", tmp_path / "effnet.safetensors"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 384}')
    (folder / "model.safetensors").write_bytes(b"\x00" * 4096)
    weights.write_bytes(b"\x01" * 4096)
    models = ("MiniLM-L6", "EffNet-L0", "DINOv2-S", "FFN-S", "MLP-S")
    manifest = {"dataset": {"name": "toy", "task": "binary", "input_kind": "text", "class_names": ["a", "b"]},
                "slices": [{"index": 0, "label": "2000", "hash": "h0"}, {"index": 1, "label": "2001", "hash": "h1"}]}

    def keys(text_source=folder):
        embed = {"sources": {"MiniLM-L6": str(text_source), "EffNet-L0": str(weights)}}
        params = parse_params({"dataset": {"name": "toy"}, "models": {m: {} for m in models}, "embed": embed})
        cfg = cache.embed_config(embed)
        units = {m: tuple(u.key for u in model_plan(params, m, manifest, Environment("fp32", "cpu", 1)).units)
                 for m in models}
        return {**units, "cache MiniLM-L6": cache_key("MiniLM-L6", cfg, "v"), "cache EffNet-L0": cache_key("EffNet-L0", cfg, "v")}

    def rewrite(path, data):  # the same size, a later modification time
        before = path.stat().st_mtime_ns
        path.write_bytes(data)
        os.utime(path, ns=(before + 10**9, before + 10**9))

    def changed(a, b):
        return {k for k in a if a[k] != b[k]}

    base = keys()
    rewrite(folder / "model.safetensors", b"\x00" * 4095 + b"\x02")  # the last bits of the weights
    new_weights = keys()
    assert changed(base, new_weights) == {"MiniLM-L6", "cache MiniLM-L6"}
    rewrite(folder / "model.safetensors", b"\x00" * 4096)  # the old bytes again: keyed by content, not time
    assert keys() == base
    rewrite(weights, b"\x01" * 4095 + b"\x03")
    assert changed(base, keys()) == {"EffNet-L0", "cache EffNet-L0"}
    rewrite(weights, b"\x01" * 4096)
    (folder / ".cache").mkdir()
    (folder / ".cache" / "download.lock").write_text("x")  # hidden: not part of the weights
    moved = folder.rename(tmp_path / "moved")
    assert keys(moved) == base
    (moved / "config.json").write_text('{"hidden_size": 385}')
    assert changed(base, keys(moved)) == {"MiniLM-L6", "cache MiniLM-L6"}
