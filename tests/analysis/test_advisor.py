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


def test_cadence_is_the_longest_horizon_within_the_tolerance(curves):
    # A: fresh 91, expected 81 at H=2, 71 at H=3; B: fresh 80, 77.5 at H=2, 75 at H=3
    assert advisor.cadence("B", curves["B"], 2.5) == advisor.Cadence("B", 2, 80.0, 77.5)
    assert advisor.cadence("B", curves["B"], 5.0).horizon == 3
    assert advisor.cadence("A", curves["A"], 5.0).horizon == 1  # already 10 points down at H=2
    assert advisor.cadence("A", curves["A"], 0.0).expected == pytest.approx(91.0)
    lower = {"L": forgetting.seed_curves(toeplitz([1.0, 1.5, 3.0]))}  # a loss: higher is worse
    assert advisor.cadence("L", lower["L"], 0.3, higher_is_better=False).horizon == 2
    with pytest.raises(ValueError):
        advisor.cadence("A", curves["A"], -1)


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
