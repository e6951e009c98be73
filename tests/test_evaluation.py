import numpy as np

from driftmatrix.evaluation import row_summary, score_row


def test_score_row_uses_test_split_up_to_cutoff_and_whole_slice_after():
    slice_ids = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    split = np.array(["train", "train", "test", "test"] * 2)
    targets = np.array([0, 1, 0, 1, 0, 1, 0, 1])
    # the model predicts class 1 everywhere except on the two training rows of slice 1
    outputs = np.tile([[0.0, 1.0]], (8, 1))
    outputs[4] = [1.0, 0.0]
    outputs[5] = [1.0, 0.0]
    row0 = score_row(outputs, targets, slice_ids, split, cutoff=0, n_slices=2, task="binary")
    row1 = score_row(outputs, targets, slice_ids, split, cutoff=1, n_slices=2, task="binary")
    assert row0["n_eval"] == [2, 4] and row1["n_eval"] == [2, 2]
    assert row0["values"] == [50.0, 50.0]  # future cell scores all 4 rows: rows 4 (right), 5 (wrong), 6, 7
    assert row1["values"] == [50.0, 50.0]
    assert row_summary(row0["values"], 0) == {"in_distribution": 50.0, "future_mean": 50.0}


def test_empty_cells_are_null_not_zero():
    slice_ids = np.array([0, 0, 2, 2])
    split = np.array(["train", "test", "train", "test"])
    row = score_row(np.zeros((4, 2)), np.zeros(4, int), slice_ids, split, 0, 3, "binary")
    assert row["values"][1] is None and row["n_eval"][1] == 0
    assert row_summary(row["values"], 1) == {"future_mean": 100.0}
