"""Each estimator on a constructed case with a known answer."""

import numpy as np
import pytest

from driftmatrix.estimate import methods
from estimate_cases import calibrated, class_conditional, logits_for, stats


def test_average_confidence_is_unbiased_for_a_calibrated_model():
    rng = np.random.default_rng(0)
    errors, inside = [], []
    for _ in range(300):
        logits, y = calibrated(rng, 200, 0.55, 0.95)
        cell = stats(logits, y)
        est = methods.average_confidence(cell.unlabelled())
        errors.append(est.value - 100 * cell.accuracy)
        inside.append(est.lo <= 100 * cell.accuracy <= est.hi)
    assert abs(np.mean(errors)) < 0.25  # unbiased (the per-cell spread is about 3 points)
    assert 0.85 <= np.mean(inside) <= 0.95  # the Poisson-binomial 90% interval covers 90%


def test_doc_atc_and_iw_recover_a_calibrated_models_accuracy_under_a_confidence_shift():
    """The held-out rows are confident, the new period less so; the model stays calibrated, so
    every confidence-based method should follow the accuracy down (carry-forward cannot)."""
    rng = np.random.default_rng(1)
    source = stats(*calibrated(rng, 20_000, 0.5, 1.0))
    target = stats(*calibrated(rng, 20_000, 0.5, 0.75))
    truth = 100 * target.accuracy
    assert truth < 100 * source.accuracy - 10
    t = target.unlabelled()
    assert abs(methods.average_confidence(t).value - truth) < 1.0
    assert abs(methods.difference_of_confidences(source, t).value - truth) < 1.0
    assert abs(methods.importance_weighted(source, t).value - truth) < 1.0
    # ATC is not exact for a calibrated model (its threshold counts rows, not probabilities): here it
    # overshoots the drop, but it moves the right way
    assert methods.average_thresholded_confidence(source, t).value < 100 * source.accuracy - 10


def test_atc_threshold_matches_the_held_out_accuracy():
    rng = np.random.default_rng(2)
    source = stats(*calibrated(rng, 5000, 0.5, 1.0))
    same = methods.average_thresholded_confidence(source, source.unlabelled()).value
    assert same == pytest.approx(100 * source.accuracy, abs=0.05)


def test_iw_reports_its_effective_sample_size_and_flags_it_when_low():
    rng = np.random.default_rng(3)
    source = stats(*calibrated(rng, 2000, 0.5, 1.0))
    near = methods.importance_weighted(source, stats(*calibrated(rng, 2000, 0.5, 1.0)).unlabelled())
    assert near.flags["ess"] > 1500 and not near.flags["low_ess"]
    # the new period sits where the held-out rows are thin: few rows carry all the weight
    far = methods.importance_weighted(source, stats(*calibrated(rng, 2000, 0.5, 0.52)).unlabelled(), min_ess=150)
    assert far.flags["ess"] < 150 and far.flags["low_ess"]
    assert near.flags["outside_support"] < 0.01
    # confidences the held-out rows never reached: no weight gets there, and IW says so
    above = stats(*calibrated(rng, 2000, 0.5, 0.7))
    assert methods.importance_weighted(above, stats(*calibrated(rng, 2000, 0.8, 1.0)).unlabelled()) \
        .flags["outside_support"] > 0.9


def test_pure_label_shift_is_detected_and_bbse_follows_it():
    rng = np.random.default_rng(4)
    y_src = (rng.random(20_000) < 0.5).astype(int)
    y_tgt = (rng.random(20_000) < 0.9).astype(int)  # class 1 (recall 0.7) now dominates
    source, target = stats(*class_conditional(rng, y_src)), stats(*class_conditional(rng, y_tgt))
    est = methods.bbse(source, target.unlabelled())
    assert est.flags["label_shift_tv"] == pytest.approx(0.4, abs=0.02) and est.flags["label_shift"]
    assert est.value == pytest.approx(100 * target.accuracy, abs=1.0)
    # the confidence-based estimates miss it (the model is as confident as before on each class)
    assert abs(methods.average_confidence(target.unlabelled()).value - 100 * target.accuracy) > 5
    # and without a shift the flag does not fire
    same = stats(*class_conditional(rng, (rng.random(20_000) < 0.5).astype(int)))
    assert methods.bbse(source, same.unlabelled()).flags["label_shift_tv"] < 0.02
    assert not methods.bbse(source, same.unlabelled()).flags["label_shift"]


def test_a_small_sample_needs_a_significant_move_before_the_label_shift_flag_fires():
    rng = np.random.default_rng(7)
    source = stats(*class_conditional(rng, (rng.random(300) < 0.5).astype(int)))
    fired = 0
    for _ in range(100):  # 60 rows of the same distribution: TV often above 0.1 by chance, flag rarely
        tgt = stats(*class_conditional(rng, (rng.random(60) < 0.5).astype(int)))
        fired += methods.bbse(source, tgt.unlabelled()).flags["label_shift"]
    assert fired <= 5
    moved = stats(*class_conditional(rng, (rng.random(60) < 0.95).astype(int)))
    assert methods.bbse(source, moved.unlabelled()).flags["label_shift"]


def test_the_trusted_method_is_the_best_backtested_one_but_never_carry_forward():
    from driftmatrix.stages.newperiod import choose

    summary = {"noise_floor": 2.0, "carry-forward": {"mae": 3.0}, "trend": {"mae": 4.0}, "AC": {"mae": 3.5},
               "BBSE": {"mae": 5.0}}
    assert choose(summary, shifted=False).method == "AC"
    got = choose(summary, shifted=True)
    assert got.method == "trend" and "label shift" in got.reason and "4.00" in got.reason
    assert choose(None, shifted=False).method == "trend"


def test_carry_forward_and_trend_on_a_known_linear_decay():
    K = 6
    M = np.array([[90.0 - 2 * max(j - i, 0) for j in range(K)] for i in range(K)])[None]
    assert methods.carry_forward(90).value == 90
    # lag 2 seen in rows 0..3 of the known 4 x 4 block
    assert methods.trend(M[:, :4, :4], 90, 2).value == pytest.approx(86)
    # lag 5 never seen: the longest lag seen (3) carries over, flat
    est = methods.trend(M[:, :4, :4], 90, 5)
    assert est.value == pytest.approx(84) and est.flags["extrapolated_from_lag"] == 3
    # nothing seen at all: carry-forward
    assert methods.trend(M[:, :1, :1], 90, 3).value == 90
    # lower is better: decay is added
    assert methods.trend(-M[:, :4, :4] + 100, 10, 2, higher_is_better=False).value == pytest.approx(14)


def test_estimate_all_refuses_a_labelled_target_and_skips_confidence_methods_without_stats():
    rng = np.random.default_rng(5)
    cell = stats(*calibrated(rng, 100))
    with pytest.raises(ValueError, match="without labels"):
        methods.estimate_all(90, np.full((1, 2, 2), 90.0), 1, cell, cell)
    only = methods.estimate_all(90, np.full((1, 2, 2), 90.0), 1, None, None)
    assert set(only) == set(methods.MATRIX_METHODS)


def test_forward_stats_are_fixed_size_and_count_what_they_say():
    from driftmatrix.learn.score import CONF_BINS, forward_stats

    rng = np.random.default_rng(6)
    logits, y = calibrated(rng, 100_000)
    doc = forward_stats(logits, y, "binary")
    assert len(doc["hist"]) <= 2 * CONF_BINS and sum(r[2] for r in doc["hist"]) == 100_000
    pred = logits.argmax(1)
    assert sum(r[3] for r in doc["hist"]) == (pred == y).sum() == np.trace(np.array(doc["confusion"]))
    assert doc["pred"] == np.bincount(pred, minlength=2).tolist()
    bare = forward_stats(logits, None, "binary")
    assert "confusion" not in bare and all(len(r) == 3 for r in bare["hist"])
    assert forward_stats(logits, y, "regression") is None
    assert forward_stats(logits_for(np.array([0, 1]), np.array([1.0, 1.0])), np.array([0, 1]), "binary")["hist"][-1][1] \
        == CONF_BINS - 1


def test_the_class_balance_cap_bounds_a_confident_model_that_collapses_onto_one_class():
    rng = np.random.default_rng(8)
    y_src = (rng.random(4000) < 0.5).astype(int)
    source = stats(*class_conditional(rng, y_src))
    # the new period: still balanced, but the model puts 90% of it into class 0, confidently
    y = (rng.random(4000) < 0.5).astype(int)
    pred = np.where(rng.random(4000) < 0.9, 0, 1)
    target = stats(logits_for(pred, rng.uniform(0.95, 1.0, 4000)), y)
    cap = methods.class_balance_cap(source, target.unlabelled())
    assert cap == pytest.approx(100 * (0.1 + 0.5) + 100 * np.sqrt(0.25 / 4000), abs=1.5)
    assert 100 * target.accuracy <= cap + 1.0  # it is a bound (up to the period's own sampling)
    got = methods.estimate_all(95.0, np.full((1, 2, 2), 95.0), 1, source, target.unlabelled())
    assert got["AC"].value > 95 and got["AC+cap"].value == pytest.approx(cap)
    assert got["carry-forward+cap"].value == pytest.approx(cap) and got["AC+cap"].flags["cap"] == pytest.approx(cap, abs=1e-3)
    # predictions spread as the labels are (equal recalls): the cap does not bind
    even = stats(*class_conditional(rng, (rng.random(4000) < 0.5).astype(int), recall=(0.8, 0.8)))
    assert methods.class_balance_cap(source, even.unlabelled()) > 99
    # the slack (estimate.cap_slack) moves the cap by that many standard errors of the label share
    loose = methods.estimate_all(95.0, np.full((1, 2, 2), 95.0), 1, source, target.unlabelled(), cap_slack=3.0)
    assert loose["AC+cap"].value == pytest.approx(cap + 2 * 100 * np.sqrt(0.25 / 4000), abs=0.05)
