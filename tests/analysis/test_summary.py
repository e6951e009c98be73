import math

import numpy as np
import pytest

from driftmatrix.analysis import summary


def test_whole_matrix_statistics(hand):
    s = summary.summarize(hand, higher_is_better=True)
    assert s.in_distribution == pytest.approx((80 + 82 + 85) / 3)
    assert s.future == pytest.approx((70 + 60 + 72) / 3)
    assert s.decay == pytest.approx(15.0)
    assert s.backward == pytest.approx((78 + 75 + 79) / 3)


def test_empty_cells_are_skipped_not_zero(hand):
    hand[0, 2] = np.nan
    hand[1, 1] = np.nan
    s = summary.summarize(hand)
    assert s.in_distribution == pytest.approx((80 + 85) / 2)
    assert s.future == pytest.approx((70 + 72) / 2)
    assert s.decay == pytest.approx(82.5 - 71)


def test_lower_is_better_decay_is_future_minus_id():
    err = np.array([[0.5, 0.7], [0.6, 0.4]])
    s = summary.summarize(err, higher_is_better=False)
    assert s.in_distribution == pytest.approx(0.45)
    assert s.future == pytest.approx(0.7)
    assert s.decay == pytest.approx(0.25)  # positive = worse on the future


def test_all_empty_matrix_gives_nan_without_error():
    s = summary.summarize(np.full((3, 3), np.nan))
    assert all(math.isnan(v) for v in s.as_dict().values())


def test_seed_mean_and_std_with_missing_seed_cells(hand):
    other = hand + 2.0
    other[2, :] = np.nan  # seed 1 never finished cutoff 2
    stack = np.stack([hand, other])
    mean, std = summary.seed_mean(stack), summary.seed_std(stack)
    assert mean[0, 0] == pytest.approx(81.0)
    assert std[0, 0] == pytest.approx(np.sqrt(2.0))  # ddof=1: two values 2 apart
    assert mean[2, 2] == 85.0  # only seed 0 counts
    assert np.isnan(std[2, 2])  # one seed: std undefined


def test_single_matrix_is_one_seed(hand):
    assert summary.as_seed_stack(hand).shape == (1, 3, 3)
    assert summary.as_seed_stack([[1, None], [None, 2]])[0, 0, 1] != summary.as_seed_stack(
        [[1, None], [None, 2]])[0, 0, 1]  # None -> NaN


@pytest.mark.parametrize("k, expected", [(104, [0, 34, 68, 102]), (20, [0, 6, 12, 18]),
                                         (26, [0, 8, 16, 24]), (3, [0, 1]), (1, [])])
def test_cutoff_indices(k, expected):
    # 20 half-years 2014-H1..2023-H2 -> 2014-H1, 2017-H1, 2020-H1, 2023-H1; 26 years from 2000
    # -> 2000, 2008, 2016, 2024 (protocol section 2)
    assert summary.cutoff_indices(k) == expected


def test_cutoff_row(hand):
    row = summary.cutoff_row(hand, 0)
    assert (row.in_distribution, row.future, row.decay) == (80.0, 65.0, 15.0)
    last = summary.cutoff_row(hand, 2)
    assert math.isnan(last.future)
    low = summary.cutoff_row(hand, 1, higher_is_better=False)
    assert low.decay == pytest.approx(72 - 82)
