import math

import numpy as np
import pytest

from driftmatrix.analysis.td_score import misalignment_penalty, td_score, td_slopes

# By hand (t' = slice index, rows t' != t):
# column 0 (S=80): t'=1 D=-(78-80)*(+1)=2,  t'=2 D=-(75-80)*(+1)=5   -> slope 3
# column 1 (S=82): t'=0 D=-(70-82)*(-1)=-12, t'=2 D=-(79-82)*(+1)=3  -> slope 15/2 = 7.5
# column 2 (S=85): t'=0 D=-(60-85)*(-1)=-25, t'=1 D=-(72-85)*(-1)=-13 -> slope 12
# TD = (3 + 7.5 + 12) / 3 = 7.5


def test_penalties_by_hand(hand):
    x, d = misalignment_penalty(hand, 1)
    assert x.tolist() == [0.0, 2.0]
    assert d.tolist() == [-12.0, 3.0]


def test_td_by_hand(hand):
    assert td_slopes(hand).tolist() == pytest.approx([3.0, 7.5, 12.0])
    assert td_score(hand) == pytest.approx(7.5)


def test_lower_is_better_flips_the_difference(hand):
    errors = 100.0 - hand  # same model, scored as an error rate
    assert td_score(errors, higher_is_better=False) == pytest.approx(7.5)
    assert td_score(errors, higher_is_better=True) == pytest.approx(-7.5)


def test_nan_cells_drop_out_of_the_fit(hand):
    hand[0, 2] = np.nan  # column 2 keeps one point only -> undefined
    slopes = td_slopes(hand)
    assert math.isnan(slopes[2])
    assert td_score(hand) == pytest.approx((3.0 + 7.5) / 2)


def test_stationary_world_has_zero_td():
    assert td_score(np.full((5, 5), 70.0)) == pytest.approx(0.0)


def test_empty_diagonal_cell_skips_the_column(hand):
    hand[1, 1] = np.nan
    assert math.isnan(td_slopes(hand)[1])
