"""Rows of model inputs: ``take_rows`` is indexing, value for value and layout for layout."""

from __future__ import annotations

import pytest
import torch

from driftmatrix.features.inputs import take_rows


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced", "1-d", "bool"])
def test_take_rows_equals_indexing_and_keeps_the_layout(layout):
    g = torch.Generator().manual_seed(0)
    t = {"contiguous": lambda: torch.randn(30, 3, 8, 8, generator=g),
         "channels_last": lambda: torch.randn(30, 3, 8, 8, generator=g).contiguous(memory_format=torch.channels_last),
         "sliced": lambda: torch.randn(30, 12, 5, generator=g)[:, :7],  # a view: not contiguous
         "1-d": lambda: torch.randint(0, 5, (30,), generator=g),
         "bool": lambda: torch.rand(30, 6, generator=g) > 0.5}[layout]()
    idx = torch.tensor([29, 0, 3, 3, 17])
    got = take_rows(t, idx)
    assert got.dtype == t.dtype and torch.equal(got, t[idx])
    if layout == "channels_last":
        assert got.is_contiguous(memory_format=torch.channels_last) and not got.is_contiguous()
    else:
        assert got.is_contiguous()
    assert take_rows(t, idx[:0]).shape == (0, *t.shape[1:])
