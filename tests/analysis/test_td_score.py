import math

import numpy as np
import pytest

from driftmatrix.analysis.td_score import label_positions, misalignment_penalty, td_score, td_slopes

# By hand (t' = slice index, every filled row t' including t' = t where D = 0; the slope is
# sum (x - xbar) D / sum (x - xbar)^2 with x = 0, 1, 2, xbar = 1, denominator 2):
# column 0 (S=80): D = [0, -(78-80)*(+1)=2, -(75-80)*(+1)=5]       -> (-0 + 5) / 2 = 2.5
# column 1 (S=82): D = [-(70-82)*(-1)=-12, 0, -(79-82)*(+1)=3]     -> (12 + 3) / 2 = 7.5
# column 2 (S=85): D = [-(60-85)*(-1)=-25, -(72-85)*(-1)=-13, 0]   -> (25 + 0) / 2 = 12.5
# TD = (2.5 + 7.5 + 12.5) / 3 = 7.5


def test_penalties_by_hand_include_the_aligned_point(hand):
    x, d = misalignment_penalty(hand, 1)
    assert x.tolist() == [0.0, 1.0, 2.0]
    assert d.tolist() == [-12.0, 0.0, 3.0]


def test_td_by_hand_fits_over_all_training_periods(hand):
    # without the aligned point (t' != t only) the slopes would be 3, 7.5 and 12
    assert td_slopes(hand).tolist() == pytest.approx([2.5, 7.5, 12.5])
    assert td_score(hand) == pytest.approx(7.5)


def test_td_matches_a_least_squares_line_through_every_filled_row():
    M = np.random.default_rng(3).uniform(40, 95, (6, 6))
    for t in range(6):
        x, d = misalignment_penalty(M, t)
        assert len(x) == 6 and d[t] == 0.0
        assert td_slopes(M)[t] == pytest.approx(np.polyfit(x, d, 1)[0])


def test_lower_is_better_flips_the_difference(hand):
    errors = 100.0 - hand  # same model, scored as an error rate
    assert td_score(errors, higher_is_better=False, absolute=False) == pytest.approx(7.5)
    assert td_score(errors, higher_is_better=True, absolute=False) == pytest.approx(-7.5)
    assert td_score(errors, higher_is_better=True) == pytest.approx(7.5)  # published: |TD(t)|


def test_published_score_averages_absolute_slopes_signed_variant_keeps_direction():
    # column 0 improves with misalignment (later cutoffs score higher on it): signed slope < 0
    M = np.array([[60.0, 70.0, 60.0],
                  [70.0, 82.0, 72.0],
                  [80.0, 79.0, 85.0]])
    slopes = td_slopes(M)
    assert slopes[0] == pytest.approx(-10.0)  # D = [0, -10, -20] -> slope -10
    assert td_score(M) == pytest.approx(np.mean(np.abs(slopes)))
    assert td_score(M, absolute=False) == pytest.approx(np.mean(slopes))
    assert td_score(M) > td_score(M, absolute=False)


def test_nan_cells_drop_out_of_the_fit(hand):
    hand[0, 2] = np.nan  # column 2 keeps t' = 1 and t' = 2: D = [-13, 0], slope 13
    assert td_slopes(hand)[2] == pytest.approx(13.0)
    hand[1, 2] = np.nan  # only the aligned point is left: undefined
    slopes = td_slopes(hand)
    assert math.isnan(slopes[2])
    assert td_score(hand) == pytest.approx((2.5 + 7.5) / 2)


def test_stationary_world_has_zero_td():
    assert td_score(np.full((5, 5), 70.0)) == pytest.approx(0.0)


def test_empty_diagonal_cell_skips_the_column(hand):
    hand[1, 1] = np.nan
    assert math.isnan(td_slopes(hand)[1])


def test_calendar_positions_put_gaps_on_the_x_axis(hand):
    assert label_positions(["1905", "1906", "1908"]).tolist() == [1905, 1906, 1908]
    assert label_positions(["2014-H1", "2014-H2", "2015-H1"]).tolist() == [4028, 4029, 4030]
    assert label_positions(["2014-Q4", "2015-01", "1950..1954"]).tolist() == [2014 * 4 + 3, 2015 * 12, 1950]
    # x = [0, 1, 3]: column 0, D = [0, 2, 5], xbar = 4/3 -> slope = sum(xc * D) / sum(xc^2)
    x = np.array([0.0, 1.0, 3.0])
    xc = x - x.mean()
    expected = float((xc * np.array([0.0, 2.0, 5.0])).sum() / (xc ** 2).sum())
    assert td_slopes(hand, positions=label_positions(["1905", "1906", "1908"]))[0] == pytest.approx(expected)
    assert td_slopes(hand, positions=[0, 1, 2]).tolist() == pytest.approx(td_slopes(hand).tolist())
    with pytest.raises(ValueError, match="'spring'"):
        label_positions(["spring"])
    with pytest.raises(ValueError, match="2 positions"):
        td_slopes(hand, positions=[0, 1])
