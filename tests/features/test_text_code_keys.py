"""Text units over cached token states are keyed by every function that trains and scores them
(tests/units/test_code_keys.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from testkit.codekeys import untraced
from textfixtures import text_params



from driftmatrix.stages import embed as embed_stage
@pytest.mark.parametrize("model", ["FFN-S", "TX-S"])
def test_every_function_that_trains_or_scores_a_text_unit_is_in_its_keys(review_slices, counting_encoder,
                                                                         tmp_path, model):
    _, slices = review_slices
    params = text_params(tmp_path, models={model: {}})
    embed_stage.run(params, slices, tmp_path / "features")
    paths = SimpleNamespace(slices=slices, features=tmp_path / "features", checkpoints=tmp_path / "ckpt")
    assert untraced(params, paths, model) == set()
