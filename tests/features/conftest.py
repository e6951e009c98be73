"""Fixtures of the feature tests: tiny generated review slices and a counting stand-in encoder."""

from __future__ import annotations

import pytest
from textfixtures import CountingEncoder, text_params


@pytest.fixture
def counting_encoder(monkeypatch):
    """Replace the encoder loader; returns the list of encoders handed out (one per load)."""
    from driftmatrix.features import encoders

    handed: list[CountingEncoder] = []

    def load(name, sources=None, device=None):
        handed.append(CountingEncoder())
        return handed[-1]

    monkeypatch.setattr(encoders, "load", load)
    return handed


@pytest.fixture(scope="session")
def review_slices(tmp_path_factory):
    """Generated reviews, ingested and sliced once: (params, slices dir)."""
    from driftmatrix.data import slicing
    from driftmatrix.stages import slice as slice_stage
    from driftmatrix.data import synthetic_text
    from driftmatrix.stages import ingest

    root = tmp_path_factory.mktemp("reviews")
    params = text_params(root)
    synthetic_text.write_reviews(params.synthetic, params.dataset.path)
    ingest.run(params, root / "ingested")
    slice_stage.run(params, root / "ingested", root / "slices")
    return params, root / "slices"
