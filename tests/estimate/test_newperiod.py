"""`estimate --data`'s decision on constructed units: the retrain flag and the label-shift warning."""

import numpy as np
import pytest

from driftmatrix.estimate.backtest import ModelScores
from driftmatrix.stages.newperiod import SHIFT_CANDIDATES, estimate_model, render
from estimate_cases import class_conditional, logits_for, stats

K = 4


def units(rng) -> ModelScores:
    """Two seeds x K cutoffs whose held-out rows are balanced and class-conditional."""
    values, n = np.full((2, K, K), 80.0), np.full((2, K, K), 300.0)
    cells = [[[None] * K for _ in range(K)] for _ in range(2)]
    for s in range(2):
        for i in range(K):
            for j in range(K):
                c = stats(*class_conditional(rng, (rng.random(300) < 0.5).astype(int)))
                cells[s][i][j], values[s, i, j] = c, 100 * c.accuracy
    return ModelScores("M", [str(1950 + k) for k in range(K)], [0, 1], values, n, cells,
                       [tuple(range(i + 1)) for i in range(K)])


SUMMARY = {"noise_floor": 2.0, "carry-forward": {"mae": 5.0}, "trend": {"mae": 6.0}, "AC": {"mae": 3.0},
           "DoC": {"mae": 4.0}, "ATC": {"mae": 4.5}, "IW": {"mae": 3.5}, "BBSE": {"mae": 5.5}}


def test_a_pure_label_shift_on_the_new_period_is_flagged_and_confidence_methods_are_not_trusted():
    rng = np.random.default_rng(0)
    ms = units(rng)
    shifted = {(s, i): class_conditional(rng, (rng.random(400) < 0.95).astype(int))[0] for s in range(2) for i in range(K)}
    records = estimate_model(ms, shifted, "binary", 1, SUMMARY, rule=None, shift_threshold=0.1, min_ess=30)
    assert len(records) == K
    for r in records:
        assert r["label_shift"] and r["label_shift_tv"] > 0.3 and "not to be trusted" in r["warning"]
        assert r["trusted"] in SHIFT_CANDIDATES
        # class 1 (recall 0.7) now dominates: BBSE sees the drop that AC cannot
        assert r["estimates"]["BBSE"] < r["in_distribution"] - 5 < r["estimates"]["AC"]
    assert "label shift" in render(records)


def test_no_shift_no_drop_no_flag_and_a_confidence_drop_flags_retrain():
    rng = np.random.default_rng(1)
    ms = units(rng)
    same = {(s, i): class_conditional(rng, (rng.random(400) < 0.5).astype(int))[0] for s in range(2) for i in range(K)}
    for r in estimate_model(ms, same, "binary", 1, SUMMARY, None, 0.1, 30):
        assert not r["label_shift"] and r["trusted"] == "AC" and not r["retrain"]
        assert "backtest MAE 3.00 vs carry-forward 5.00" in r["why"]
    # the same predicted classes, far less confident: no label shift, a confidence drop
    unsure = {}
    for s in range(2):
        for i in range(K):
            pred = class_conditional(rng, (rng.random(400) < 0.5).astype(int))[0].argmax(1)
            unsure[s, i] = logits_for(pred, rng.uniform(0.5, 0.7, 400))
    for r in estimate_model(ms, unsure, "binary", 1, SUMMARY, None, 0.1, 30):
        assert not r["label_shift"] and r["trusted"] == "AC"
        assert r["estimates"]["AC"] < 65 and r["retrain"] and r["drop"] > 5


def test_an_older_unit_is_estimated_from_its_latest_labelled_period_when_that_backtests_better():
    """A unit already scoring 60 on the latest labelled period, over-confident there as on its
    held-out rows: the estimates from its held-out rows see no drop, carry-forward@prev sees the
    drop so far, and it is trusted when its one-period-ahead backtest MAE is the lowest."""
    rng = np.random.default_rng(2)
    ms = units(rng)
    last = K - 1
    for s in range(2):
        for i in range(last):
            y = (rng.random(300) < 0.5).astype(int)
            logits, _ = class_conditional(rng, y, recall=(0.6, 0.6))
            ms.stats[s][i][last] = stats(logits, y)
            ms.values[s, i, last] = 100 * ms.stats[s][i][last].accuracy
    new = {(s, i): class_conditional(rng, (rng.random(400) < 0.5).astype(int), recall=(0.6, 0.6))[0]
           for s in range(2) for i in range(K)}
    summary = {**SUMMARY, "previous_period": {"carry-forward": {"mae": 2.5}, "AC": {"mae": 3.0}}}
    records = estimate_model(ms, new, "binary", 1, summary, None, 0.1, 30)
    for r in records[:last]:
        assert r["trusted"] == "carry-forward@prev" and "backtest MAE 2.50" in r["why"]
        assert r["estimates"]["carry-forward@prev"] == pytest.approx(np.mean(ms.values[:, r["cutoff_index"], last]), abs=1e-3)
        assert r["retrain"] and r["drop"] > 10
        assert r["estimates"]["AC"] == r["estimates"]["AC@prev"]  # AC reads no reference
    newest = records[last]  # its latest labelled period is its own cutoff: both estimates coincide
    assert newest["estimates"]["carry-forward@prev"] == newest["estimates"]["carry-forward"] == newest["in_distribution"]
    assert "latest" in render(records) and "carry-forward@prev" in render(records)


def _unsure(rng, lo=0.5, hi=0.7):
    """The same predicted classes as the held-out rows, less confident: AC sees a drop."""
    out = {}
    for s in range(2):
        for i in range(K):
            pred = class_conditional(rng, (rng.random(400) < 0.5).astype(int))[0].argmax(1)
            out[s, i] = logits_for(pred, rng.uniform(lo, hi, 400))
    return out


def test_a_drop_within_the_held_out_cells_noise_is_never_retrain():
    """The default's Prior cutoffs have 18-row held-out cells: 2 binomial SE at 80% is ~19 points,
    so a drop of ~10 is noise, whatever the policy says; with 300 rows (SE ~2.3) it is not."""
    from dataclasses import replace

    rng = np.random.default_rng(1)
    ms, new = units(rng), _unsure(rng, 0.62, 0.78)
    small = replace(ms, n_eval=np.full_like(ms.n_eval, 18.0))
    for r in estimate_model(small, new, "binary", 1, SUMMARY, None, 0.1, 30):
        assert 5 < r["drop"] < r["noise"] and r["noise"] == pytest.approx(2 * 100 * np.sqrt(0.8 * 0.2 / 18), abs=1.5)
        assert r["decision"]["signal"] > r["decision"]["tau"] and not r["retrain"]
    assert all(r["retrain"] for r in estimate_model(ms, new, "binary", 1, SUMMARY, None, 0.1, 30))


def test_the_decision_is_the_models_policy_with_its_tau():
    rng = np.random.default_rng(1)
    ms, new = units(rng), _unsure(rng)
    def flags(rule):
        return [r["retrain"] for r in estimate_model(ms, new, "binary", 1, SUMMARY, rule, 0.1, 30)]
    assert flags({"policy": "never", "param": None}) == [False] * K
    assert flags({"policy": "estimate", "param": "nested", "next_tau": 50.0}) == [False] * K
    assert flags({"policy": "estimate", "param": "nested", "next_tau": 5.0}) == [True] * K
    assert flags({"policy": "estimate", "param": "nested", "next_tau": None}) == [False] * K  # never retrains
    # periodic(2): cutoff i serves periods i+1, i+2; the new period is K (lag K - i)
    assert flags({"policy": "periodic", "param": 2}) == [K - i > 2 for i in range(K)]
    records = estimate_model(ms, new, "binary", 1, SUMMARY, {"policy": "periodic", "param": 2}, 0.1, 30)
    assert "every 2 periods" in render(records) and "standard errors" in render(records)
