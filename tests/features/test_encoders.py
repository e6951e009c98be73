"""Encoders: the catalogue, offline weights (MiniLM-L6, EffNet-L0), any HF encoder by local path,
and the image path (embed -> pooled cache -> frozen head) on a tiny synthetic yearbook."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch

from driftmatrix.analysis.families import PAPER_FAMILIES
from driftmatrix.features import cache, encoders
from driftmatrix.stages import embed as embed_stage

PAPER_VISION = {n for n, f in PAPER_FAMILIES.items() if f == "Transfer"}
PAPER_TEXT = {n for n, f in PAPER_FAMILIES.items() if f == "Frozen"}


def test_catalogue_covers_the_papers_encoders_plus_effnet():
    assert set(encoders.CATALOGUE) == PAPER_VISION | PAPER_TEXT | {"EffNet-L0"}
    assert encoders.CATALOGUE["RoBERTa"].source == "roberta-base"
    assert encoders.CATALOGUE["MAE-B"].source == "vit_base_patch16_224.mae"
    assert encoders.info_for("my-org/my-encoder") == encoders.EncoderInfo("text", "hf", "my-org/my-encoder")


def test_bundled_weights_are_used_offline_and_overrides_win(tmp_path):
    source = Path(encoders.resolve_source("MiniLM-L6"))
    assert (source / "config.json").exists() and (source / "model.safetensors").exists()
    assert Path(encoders.resolve_source("EffNet-L0")).is_file()
    assert encoders.resolve_source("RoBERTa") == "roberta-base"
    assert encoders.resolve_source("RoBERTa", {"RoBERTa": str(tmp_path)}) == str(tmp_path)


def test_minilm_states_are_padded_truncated_and_masked():
    enc = encoders.load("MiniLM-L6", device="cpu")
    states, mask = enc.encode(["short text", "a much longer document " * 20], max_len=16)
    assert enc.dim == 384 and states.shape == (2, 16, 384) and mask.shape == (2, 16)
    assert mask[1].all() and 2 < mask[0].sum() < 16  # [CLS] short text [SEP]
    assert np.abs(states[0, ~mask[0]]).max() == 0 and np.abs(states[0, mask[0]]).sum() > 0
    again, _ = enc.encode(["short text"], max_len=16)
    np.testing.assert_allclose(again[0], states[0], atol=1e-4)  # padding to another length changes nothing


def test_any_hugging_face_encoder_by_local_path(tmp_path):
    from transformers import AutoTokenizer, BertConfig, BertModel

    tokenizer = AutoTokenizer.from_pretrained(encoders.resolve_source("MiniLM-L6"))
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=64)
    torch.manual_seed(0)
    BertModel(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    enc = encoders.load(str(tmp_path), device="cpu")
    states, mask = enc.encode(["one", "two words here"], max_len=8)
    assert enc.dim == 32 and states.shape == (2, 8, 32) and mask.sum(1).tolist() == [3, 5]


def test_effnet_lite0_runs_offline_as_a_frozen_backbone():
    enc = encoders.load("EffNet-L0", device="cpu")
    assert enc.dim == 1280 and enc.mean == enc.std == (0.5, 0.5, 0.5)
    assert not any(p.requires_grad for p in enc.model.parameters())
    images = np.random.default_rng(0).integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)
    feats = enc.encode(images)
    assert feats.shape == (3, 1280) and np.isfinite(feats).all()
    np.testing.assert_allclose(enc.encode(images[:1]), feats[:1], rtol=1e-4, atol=1e-4)
    assert np.abs(feats[0] - feats[1]).max() > 1e-3  # different images, different features
    x01 = torch.from_numpy(images[:1]).permute(0, 3, 1, 2).float().div(255).requires_grad_(True)
    grad_path = enc.features(x01)  # the same features, differentiable (saliency maps)
    np.testing.assert_allclose(grad_path.detach().numpy(), feats[:1], rtol=1e-4, atol=1e-4)
    grad_path.sum().backward()
    assert x01.grad.abs().sum() > 0


def test_weights_map_in_order_with_shapes_checked():
    target = OrderedDict(a=torch.zeros(2, 3), b=torch.zeros(4))
    mapped = encoders.map_in_order(target, OrderedDict(x=torch.ones(2, 3), y=torch.ones(4)))
    assert list(mapped) == ["a", "b"]
    with pytest.raises(ValueError, match="does not fit"):
        encoders.map_in_order(target, OrderedDict(x=torch.ones(3, 2), y=torch.ones(4)))


def test_image_heads_train_on_cached_pooled_features(tmp_path, tiny_params):
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.data import synthetic
    from driftmatrix.stages import ingest
    from driftmatrix.units.experiment import Experiment

    params = tiny_params(tmp_path, synthetic={"per_year": 16, "years": 3}, slicing={"min_samples": 5},
                         models={"EffNet-L0": {}, "MLP-S": {}})
    synthetic.write_dataset(params.synthetic, params.dataset.path)
    ingest.run(params, tmp_path / "ingested")
    slice_stage.run(params, tmp_path / "ingested", tmp_path / "slices")
    (made,) = embed_stage.run(params, tmp_path / "slices", tmp_path / "features")  # MLP-S reads pixels: no cache
    assert made["encoder"] == "EffNet-L0" and made["dim"] == 1280 and not made["has_states"]
    assert Path(made["path"]).name.startswith("EffNet-L0-224px-")
    exp = Experiment(params, "EffNet-L0", tmp_path / "slices", tmp_path / "features")
    assert exp.cfg.lr == 1e-4 and exp.info["dim"] == 1280 and exp.spec.family == "Transfer"
    model, losses, n = exp.train_unit(exp.plan.unit(0, 1))
    assert sum(p.numel() for p in model.parameters()) == 1280 * 2 + 2 and np.isfinite(losses).all()
