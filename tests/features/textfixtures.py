"""Helpers of the feature tests: params of tiny generated reviews and a counting stand-in encoder."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from driftmatrix.config import parse_params

TOY = "toy-encoder"  # not in the catalogue: a text encoder by name, loaded through the patched loader


def text_raw(root: Path, **sections) -> dict:
    """A params.yaml mapping whose files all live under ``root``; ``sections`` update it."""
    raw = {
        "dataset": {"name": "tiny-reviews", "source": "amazon", "path": str(root / "raw"), "task": "regression",
                    "options": {"sample_size": 0, "start": "2014-01-01", "end": "2015-12-31", "progress": False}},
        "synthetic": {"scenario": "mixed", "seed": 0, "first_year": 2014, "years": 2, "per_year": 100},
        "slicing": {"period": "half-year", "min_samples": 10},
        "train": {"seeds": [0], "epochs": 1, "batch_size": 16},
        "models": {"FFN-S": {}},
        "embed": {"token_encoder": TOY, "max_length": 16, "shard_size": 64, "progress": False},
        "tracking": {"uri": f"sqlite:///{root / 'mlflow.db'}", "experiment": "text",
                     "artifact_root": str(root / "mlruns"), "log_models": False},
    }
    for name, value in sections.items():
        raw[name] = {**raw[name], **value} if isinstance(raw.get(name), dict) and name != "models" else value
    return raw


def text_params(root: Path, **sections):
    return parse_params(text_raw(root, **sections))


class CountingEncoder:
    """Word-hash token states (deterministic); counts every document it encodes."""

    dim = 8

    def __init__(self, fail_after: int | None = None):
        self.docs = 0
        self.fail_after = fail_after

    def encode(self, texts, max_len):
        if self.fail_after is not None and self.docs + len(texts) > self.fail_after:
            raise KeyboardInterrupt("simulated interruption")
        self.docs += len(texts)
        states = np.zeros((len(texts), max_len, self.dim), np.float32)
        masks = np.zeros((len(texts), max_len), bool)
        for i, text in enumerate(texts):
            for j, word in enumerate(text.split()[:max_len]):
                states[i, j] = np.random.default_rng(zlib.crc32(word.encode())).normal(size=self.dim)
                masks[i, j] = True
        return states, masks


def load_counting(name, sources=None, device=None) -> CountingEncoder:
    """A stand-in for ``encoders.load`` that Ray workers can import by name."""
    return CountingEncoder()
