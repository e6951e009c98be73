"""Tabular units are keyed by every function that trains and scores them (tests/test_code_keys.py)."""

from __future__ import annotations

import pytest

from conftest import TABULAR
from test_code_keys import untraced


@pytest.mark.parametrize("model", TABULAR)
def test_every_function_that_trains_or_scores_a_tabular_unit_is_in_its_keys(sliced, model):
    params, paths = sliced
    assert untraced(params, paths, model) == set()
