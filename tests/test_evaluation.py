import numpy as np

from driftmatrix.evaluation import eval_mask, row_summary, score_cell


def test_eval_sets_are_the_test_split_up_to_cutoff_and_the_whole_slice_after():
    slice_ids = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    split = np.array(["train", "train", "test", "test"] * 2)
    assert np.flatnonzero(eval_mask(slice_ids, split, 0, 0)).tolist() == [2, 3]
    assert np.flatnonzero(eval_mask(slice_ids, split, 0, 1)).tolist() == [4, 5, 6, 7]
    assert np.flatnonzero(eval_mask(slice_ids, split, 1, 1)).tolist() == [6, 7]


def test_a_cell_scores_its_rows_and_an_empty_cell_is_null_not_zero():
    outputs = np.array([[0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    cell = score_cell(outputs, np.array([1, 1, 0, 1]), "binary")
    assert cell == {"value": 50.0, "n_eval": 4, "left_out": []}
    empty = score_cell(np.zeros((0, 2)), np.zeros(0, int), "binary")
    assert empty["value"] is None and empty["n_eval"] == 0
    assert row_summary([50.0, None, 100.0], 0) == {"in_distribution": 50.0, "future_mean": 100.0}
    assert row_summary([None, 80.0, 100.0], 1) == {"in_distribution": 80.0, "future_mean": 100.0}
