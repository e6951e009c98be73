import numpy as np
import pytest

from driftmatrix.analysis import advisor, forgetting


def toeplitz(curve, k=3):
    """Matrix whose forgetting curve is exactly ``curve`` (backward cells empty)."""
    m = np.full((k, k), np.nan)
    for i in range(k):
        for j in range(i, k):
            m[i, j] = curve[j - i]
    return m


@pytest.fixture
def curves():
    # A: 90, 70, 50 (sharp, strong start); B: 80, 75, 70 (flat)
    # H=1: A 90 > B 80; H=2: A 80 > B 77.5; H=3: A 70 < B 75 -> B takes over at H=3
    a = np.stack([toeplitz([90, 70, 50]), toeplitz([92, 72, 52])])
    b = toeplitz([80, 75, 70])
    return {"A": forgetting.seed_curves(a), "B": forgetting.seed_curves(b)}


def test_horizon_score_with_seed_uncertainty(curves):
    s = advisor.horizon_score(curves["A"], 2)
    assert s.mean == pytest.approx(81.0)  # seeds: 80 and 82
    assert s.std == pytest.approx(np.sqrt(2.0))
    assert np.isnan(advisor.horizon_score(curves["B"], 2).std)  # single seed


def test_rank_and_crossover(curves):
    assert [s.model for s in advisor.rank_for_horizon(curves, 3)] == ["B", "A"]
    lead = advisor.leaders(curves)
    assert [s.model for s in lead] == ["A", "A", "B"]
    assert advisor.crossovers(lead) == [advisor.Crossover(3, "A", "B")]


def test_lower_is_better_prefers_small(curves):
    assert advisor.rank_for_horizon(curves, 1, higher_is_better=False)[0].model == "B"


def test_horizon_must_be_positive(curves):
    with pytest.raises(ValueError):
        advisor.horizon_score(curves["A"], 0)
