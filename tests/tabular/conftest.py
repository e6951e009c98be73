"""Tiny feature tables (the built-in generator, ``source: table``) under a test's folder."""

from __future__ import annotations

import pytest

from testkit.tables import make_table_params


@pytest.fixture
def table_params():
    return make_table_params


@pytest.fixture
def sliced(tmp_path, table_params):
    """(params, paths) of a generated, ingested and sliced tiny table (5 years)."""
    from testkit.pipeline import Paths, prepare

    params = table_params(tmp_path)
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    return params, paths
