"""Feature tables as tensors: numeric values (NaN missing) and category hashes (0 missing).

:func:`category_hash` names a category the same way in every dataset, period and process, so a model
fitted on one window recognises a category it never saw in any later period. Nothing here imports
``driftmatrix.data``: this module is on the tabular models' training path (code keys)."""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Sequence

import numpy as np

MISSING = 0  # the hash of a missing category


def category_hash(text: str) -> int:
    """A positive 63-bit integer naming the category ``text`` (blake2b of its UTF-8 bytes)."""
    digest = hashlib.blake2b(str(text).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return (int.from_bytes(digest, "little") & ((1 << 63) - 1)) or 1


def hash_column(values: Iterable[Any]) -> np.ndarray:
    """int64 hashes of a column of categories (missing: :data:`MISSING`), each value hashed once."""
    import pandas as pd

    series = pd.Series(list(values) if not hasattr(values, "__len__") else values, dtype=object)
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    table = np.array([MISSING if (isinstance(u, str) and not u.strip()) else category_hash(u) for u in uniques]
                     + [MISSING], dtype=np.int64)
    return table[codes]  # code -1 (missing) reads the trailing MISSING


class TableInputs:
    """Numeric values (N x n_num float32) and category hashes (N x n_cat int64); ``batch(idx)`` -> both."""

    def __init__(self, num: np.ndarray, cat: np.ndarray, numeric: Sequence[str], categorical: Sequence[str]):
        import torch

        self.num = torch.as_tensor(np.ascontiguousarray(num, dtype=np.float32))
        self.cat = torch.as_tensor(np.ascontiguousarray(cat, dtype=np.int64))
        self.info = {"numeric": list(numeric), "categorical": list(categorical)}

    @classmethod
    def from_frame(cls, frame, numeric: Sequence[str], categorical: Sequence[str],
                   columns: Sequence[str] | None = None) -> "TableInputs":
        """From a DataFrame; ``columns``: the frame's column of each feature (default: its name)."""
        columns = list(columns or [*numeric, *categorical])
        n = len(frame)
        num = np.empty((n, len(numeric)), dtype=np.float32)
        for k, col in enumerate(columns[:len(numeric)]):
            num[:, k] = np.asarray(frame[col], dtype=np.float64)
        cat = np.empty((n, len(categorical)), dtype=np.int64)
        for k, col in enumerate(columns[len(numeric):]):
            cat[:, k] = hash_column(frame[col].to_numpy(dtype=object))
        return cls(num, cat, numeric, categorical)

    def __len__(self) -> int:
        return len(self.num)

    def to(self, device) -> "TableInputs":
        return self  # tabular models compute on the CPU; MLP-Tab moves its own batches

    def batch(self, idx) -> tuple:
        idx = idx.cpu()
        return self.num[idx], self.cat[idx]
