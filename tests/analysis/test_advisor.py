import numpy as np
import pytest

from driftmatrix.analysis import advisor


def toeplitz(curve):
    """Matrix whose forgetting curve is exactly ``curve`` (backward cells empty)."""
    k = len(curve)
    m = np.full((k, k), np.nan)
    for i in range(k):
        for j in range(i, k):
            m[i, j] = curve[j - i]
    return m


@pytest.fixture
def stacks():
    # Served scores over periods 1..3 (period j by the latest retrain before j; lag 0 never served)
    # A: sharp, seeds (90, 84, 72, 50) and (92, 86, 74, 52): H=1 85, H=2 (84+72+84)/3 = 81, H=3 69.7
    # B: flat (80, 76, 72, 68): H=1 76, H=2 74.7, H=3 72 -> B takes over at H=3
    a = np.stack([toeplitz([90, 84, 72, 50]), toeplitz([92, 86, 74, 52])])
    return {"A": a, "B": toeplitz([80, 76, 72, 68])[None]}


def test_horizon_score_with_seed_uncertainty(stacks):
    s = advisor.horizon_score(stacks["A"], 2)
    assert s.mean == pytest.approx(81.0)  # seeds: 80 and 82
    assert s.std == pytest.approx(np.sqrt(2.0))
    assert np.isnan(advisor.horizon_score(stacks["B"], 2).std)  # single seed


def test_rank_and_crossover(stacks):
    assert [s.model for s in advisor.rank_for_horizon(stacks, 3)] == ["B", "A"]
    lead = advisor.leaders(stacks)
    assert [s.model for s in lead] == ["A", "A", "B"]
    assert advisor.crossovers(lead) == [advisor.Crossover(3, "A", "B")]


def test_lower_is_better_prefers_small(stacks):
    assert advisor.rank_for_horizon(stacks, 1, higher_is_better=False)[0].model == "B"


def test_horizon_must_be_positive(stacks):
    with pytest.raises(ValueError):
        advisor.horizon_score(stacks["A"], 0)


def test_cadence_is_the_longest_horizon_within_the_tolerance(stacks):
    # against retraining every period: A 85, 81 at H=2, 69.7 at H=3; B 76, 74.7 at H=2, 72 at H=3
    c = advisor.cadence("B", stacks["B"], 2.5)
    assert (c.model, c.horizon, c.every_period, c.expected) == ("B", 2, 76.0, pytest.approx(224 / 3))
    assert advisor.cadence("B", stacks["B"], 5.0).horizon == 3
    assert advisor.cadence("A", stacks["A"], 3.0).horizon == 1  # already 4 points down at H=2
    assert advisor.cadence("A", stacks["A"], 0.0).expected == pytest.approx(85.0)
    lower = toeplitz([1.0, 1.5, 1.6, 3.0])[None]  # a loss: H=1 1.5, H=2 1.53, H=3 2.03
    assert advisor.cadence("L", lower, 0.3, higher_is_better=False).horizon == 2
    with pytest.raises(ValueError):
        advisor.cadence("A", stacks["A"], -1)


def test_recommend_prints_the_cadence_per_model(tmp_path):
    import json

    from typer.testing import CliRunner

    from driftmatrix.cli import app

    for name, curve in (("A", [90, 70, 50]), ("B", [80, 75, 70])):
        doc = {"dataset": "toy", "title": name, "metric": "accuracy", "unit": "%", "higherIsBetter": True,
               "slices": ["1", "2", "3"], "values": [[None if v != v else v for v in row]
                                                       for row in toeplitz(curve).tolist()]}
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
    out = CliRunner().invoke(app, ["recommend", str(tmp_path), "--tolerance", "3"])
    assert out.exit_code == 0, out.output
    lines = [line.split() for line in out.output.splitlines() if line.startswith(("A ", "B "))]
    assert [(row[0], row[2]) for row in lines] == [("B", "2"), ("A", "1")]
