import numpy as np
import pytest

from driftmatrix.analysis import cohort, forgetting, ranking
from driftmatrix.analysis.families import family_of


def test_forgetting_curve_by_hand(hand):
    f = forgetting.forgetting_curve(hand)
    assert f.tolist() == pytest.approx([(80 + 82 + 85) / 3, (70 + 72) / 2, 60.0])


def test_seed_curves_mean_and_std(hand):
    other = hand - 4.0
    other[0, 2] = np.nan  # seed 1 lacks the only lag-2 cell
    c = forgetting.seed_curves(np.stack([hand, other]))
    assert c.per_seed.shape == (2, 3)
    assert c.mean[0] == pytest.approx((80 + 82 + 85) / 3 - 2)
    assert c.std[0] == pytest.approx(np.sqrt(8.0))  # values 4 apart, ddof=1
    assert c.mean[2] == 60.0 and np.isnan(c.std[2])


def test_family_curves_average_members(hand):
    curves = {"A": forgetting.seed_curves(hand), "B": forgetting.seed_curves(hand + 10)}
    fam = forgetting.family_curves(curves, {"A": "X", "B": "X"})
    assert list(fam) == ["X"]
    assert fam["X"].mean[2] == pytest.approx(65.0)


def test_cohort_mean_only_where_every_model_fills(hand):
    b = hand + 2.0
    b[0, 1] = np.nan
    bar = cohort.cohort_mean({"a": hand, "b": b})
    assert bar[0, 0] == 81.0
    assert np.isnan(bar[0, 1])
    dev = cohort.deviations({"a": hand, "b": b})
    assert dev["a"][2, 2] == -1.0 and dev["b"][2, 2] == 1.0
    assert np.isnan(dev["a"][0, 1])


def test_rankings_and_direction():
    scores = {"a": 70.0, "b": 80.0, "c": float("nan"), "d": 75.0}
    assert ranking.rank_by_score(scores) == ["b", "d", "a", "c"]
    assert ranking.rank_by_score(scores, higher_is_better=False) == ["a", "d", "b", "c"]
    assert ranking.rank_by_decay({"a": 9.0, "b": 7.0}) == ["b", "a"]


def test_family_means():
    stats = {"a": {"future": 60.0}, "b": {"future": 70.0}, "c": {"future": 50.0}}
    out = ranking.family_means(stats, {"a": "F", "b": "F", "c": None})
    assert out == {"F": {"future": 65.0}, "other": {"future": 50.0}}


@pytest.mark.parametrize("name, fam", [("CNN-M", "CNN"), ("DINOv3-S", "Transfer"),
                                       ("ViT-S16-IN21k", "Transfer"), ("BiLSTM-Attn-L", "Recurrent"),
                                       ("TX-M", "Transformer"), ("DeBERTa-v3", "Frozen"),
                                       ("no-such-model", None)])
def test_families(name, fam):
    assert family_of(name) == fam
    assert family_of(name, declared="Mine") == "Mine"
