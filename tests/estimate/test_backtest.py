"""The backtest: no label of period j and nothing after cutoff i reaches an estimate of M[i, j];
noise floor and summaries on constructed matrices."""

from dataclasses import replace

import numpy as np
import pytest

from driftmatrix.estimate import backtest
from driftmatrix.estimate.backtest import ModelScores, estimate_cell
from driftmatrix.estimate.cells import CellStats
from driftmatrix.estimate.domain import SliceInputs
from estimate_cases import calibrated, class_conditional, logits_for, stats

S, K = 2, 6


def slice_inputs(rng) -> SliceInputs:
    """Slices of 120 rows (40 of them test rows) whose 3 input features drift by 0.3 a period."""
    test = np.zeros(120, dtype=bool)
    test[rng.choice(120, 40, replace=False)] = True
    return SliceInputs([rng.normal(0.3 * k, 1.0, (120, 3)) for k in range(K)], [test.copy() for _ in range(K)])


def scores(rng) -> ModelScores:
    """A model whose confidence falls and whose accuracy follows it, with every cell labelled and
    the held-out cells (j <= i) with their rows' correctness."""
    values, n_eval = np.zeros((S, K, K)), np.zeros((S, K, K))
    cells = [[[None] * K for _ in range(K)] for _ in range(S)]
    for s in range(S):
        for i in range(K):
            for j in range(K):
                low = max(0.5, 0.9 - 0.05 * max(j - i, 0))
                c = stats(*calibrated(rng, 40 if j <= i else 120, low - 0.1, low + 0.1), per_row=j <= i)
                cells[s][i][j], values[s, i, j], n_eval[s, i, j] = c, 100 * c.accuracy, c.n
    return ModelScores("M", [str(1950 + k) for k in range(K)], [0, 1], values, n_eval, cells,
                       [tuple(range(i + 1)) for i in range(K)], inputs=slice_inputs(rng))


def garbage(rng, cell: CellStats, labels_only: bool = False) -> CellStats:
    """Same shapes, other numbers: the labels only, or everything."""
    bad = dict(correct=rng.integers(0, 50, cell.counts.shape).astype(float),
               confusion=rng.integers(0, 50, (2, 2)).astype(float), right=rng.random(cell.n) < 0.5)
    if labels_only:
        return replace(cell, **bad)
    return CellStats(rng.integers(0, 50, cell.counts.shape).astype(float), rng.integers(1, 50, 2).astype(float),
                     rng.uniform(0, 50), rng.uniform(0, 10), rng.uniform(0, 50, 2), **bad)


@pytest.mark.parametrize("reference", backtest.REFERENCES)
def test_an_estimate_of_m_ij_reads_no_label_of_period_j_and_nothing_after_the_latest_labelled_period(reference):
    """As at cutoff i (``window``), nothing after period i; one period ahead (``previous``),
    nothing after period j - 1; in both, none of period j's labels."""
    rng = np.random.default_rng(0)
    ms = scores(rng)
    for s in range(S):
        for i in range(K - 1):
            for j in range(i + 1, K):
                t = backtest.latest_labelled(i, j, reference)
                clean = estimate_cell(ms, s, i, j, reference=reference)
                poisoned_values = ms.values.copy()
                poisoned_values[:, t + 1:, :] = rng.uniform(-1e6, 1e6, poisoned_values[:, t + 1:, :].shape)
                poisoned_values[:, :, t + 1:] = rng.uniform(-1e6, 1e6, poisoned_values[:, :, t + 1:].shape)
                cells = [[[c if (r <= t and col <= t) else garbage(rng, c) for col, c in enumerate(row)]
                          for r, row in enumerate(seed)] for seed in ms.stats]
                cells[s][i][j] = garbage(rng, ms.stats[s][i][j], labels_only=True)  # its inputs stay, labels go
                # inputs: slices 0..t (the held-out rows among them) and period j stay, every other slice goes
                xs = [x if (k <= t or k == j) else rng.normal(50, 9, x.shape) for k, x in enumerate(ms.inputs.x)]
                tests = [m if k <= t else ~m for k, m in enumerate(ms.inputs.test)]
                poisoned = replace(ms, values=poisoned_values, n_eval=ms.n_eval * 0 - 1, stats=cells,
                                   inputs=SliceInputs(xs, tests))
                got = estimate_cell(poisoned, s, i, j, reference=reference)
                # IW-inputs needs the held-out rows' correctness: only from the cutoff's own window
                expected = set(backtest.METHODS) - ({"IW-inputs"} if t > i else set())
                assert set(got) == set(clean) == expected
                for name in clean:
                    assert got[name] == clean[name], (s, i, j, name)


def test_one_period_ahead_starts_from_the_units_latest_labelled_period():
    rng = np.random.default_rng(3)
    ms = scores(rng)
    ahead = estimate_cell(ms, 0, 1, 4, reference="previous")
    assert ahead["carry-forward"].value == ms.values[0, 1, 3] != estimate_cell(ms, 0, 1, 4)["carry-forward"].value
    # DoC from period 3's labelled rows: their accuracy plus the change in mean confidence
    ref, new = ms.stats[0][1][3], ms.stats[0][1][4]
    assert ahead["DoC"].value == pytest.approx(100 * (ref.accuracy + new.mean_conf - ref.mean_conf))
    # trend: M[1, 3] minus the decays from lag 2 to lag 3 seen by period 3 (row 0: M[0, 2] - M[0, 3])
    decay = ms.values[:, 0, 2] - ms.values[:, 0, 3]
    assert ahead["trend"].value == pytest.approx(ms.values[0, 1, 3] - decay.mean())
    # the backtest's loop gives what estimate_cell gives
    bt = backtest.run(ms, reference="previous")
    assert bt.estimates["DoC"][0, 1, 4] == ahead["DoC"].value and bt.summary["reference"] == "previous"


def test_the_estimates_see_the_period_they_estimate():
    """The poisoned test above would pass for estimators that ignore period j altogether: they do not."""
    rng = np.random.default_rng(1)
    ms = scores(rng)
    a = estimate_cell(ms, 0, 1, 4)
    other = [row[:] for row in ms.stats[0]]
    other[1][4] = stats(*calibrated(rng, 120, 0.95, 1.0))
    b = estimate_cell(replace(ms, stats=[other, ms.stats[1]]), 0, 1, 4)
    assert a["AC"] != b["AC"] and a["carry-forward"] == b["carry-forward"] and a["trend"] == b["trend"]
    # IW-inputs reads period j's inputs (and not its outputs): other inputs, another estimate
    assert a["IW-inputs"] == b["IW-inputs"]
    xs = list(ms.inputs.x)
    xs[4] = xs[4] + np.array([2.0, -1.0, 0.5])
    c = estimate_cell(replace(ms, inputs=SliceInputs(xs, ms.inputs.test)), 0, 1, 4)
    assert c["IW-inputs"] != a["IW-inputs"] and c["AC"] == a["AC"]


def test_a_cell_in_the_past_cannot_be_estimated():
    ms = scores(np.random.default_rng(2))
    with pytest.raises(ValueError, match="not in the future"):
        estimate_cell(ms, 0, 3, 3)


def test_noise_floor_is_the_binomial_mean_absolute_deviation():
    assert backtest.binomial_noise(0.5, 1) == pytest.approx(0.5)
    assert backtest.binomial_noise(0.85, 60) == pytest.approx(0.0366, abs=5e-4)  # the "about 4 points"
    big = backtest.binomial_noise(0.85, 20_000)
    assert big == pytest.approx(np.sqrt(2 * 0.85 * 0.15 / (np.pi * 20_000)), rel=0.01)
    assert backtest.binomial_noise(1.0, 50) == 0.0


def test_backtest_summary_on_a_calibrated_model():
    ms = scores(np.random.default_rng(3))
    bt = backtest.run(ms)
    s = bt.summary
    n_future = S * K * (K - 1) // 2
    assert s["n_future_cells"] == n_future and s["hindsight_method"] in backtest.METHODS
    for m in backtest.METHODS:
        assert s[m]["n_cells"] == n_future
    # a calibrated model whose confidence tracks its accuracy: AC is unbiased and beats carry-forward
    assert abs(s["AC"]["bias"]) < 1.5 and s["AC"]["mae"] < s["carry-forward"]["mae"]
    assert s["carry-forward"]["bias"] > 5  # carry-forward misses the decay
    assert 0.7 <= s["AC"]["coverage"] <= 1.0
    assert s["noise_floor"] == pytest.approx(np.nanmean(bt.noise[np.isfinite(bt.noise)]), abs=1e-4)
    assert np.isnan(bt.estimates["AC"][0, 3, 3]) and np.isnan(bt.estimates["AC"][0, 4, 2])  # future cells only


def test_published_matrices_backtest_the_matrix_methods_only(tmp_path):
    """A folder of published-format matrices (no scores, no n_eval): carry-forward and trend,
    no noise floor, one file per model."""
    import json

    from driftmatrix.stages import estimates as stage

    K = 8
    decay = np.array([[90.0 - 3 * max(j - i, 0) for j in range(K)] for i in range(K)])
    for name, M in (("A", decay), ("B", decay - 5)):
        (tmp_path / f"{name}.json").write_text(json.dumps(
            {"dataset": "x", "title": name, "metric": "Accuracy", "unit": "%", "higherIsBetter": True,
             "slices": [str(1900 + k) for k in range(K)], "values": M.tolist()}))
    out = stage.run_matrices(tmp_path, tmp_path / "bt")
    assert set(out) == {"A", "B"} and json.loads((tmp_path / "bt" / "backtest.json").read_text()) == out
    for s in out.values():
        assert s["noise_floor"] is None and {"carry-forward", "trend"} <= set(s) and "AC" not in s
        assert s["hindsight_method"] == "trend" and s["trend"]["mae"] < s["carry-forward"]["mae"]
        # a constant decay per lag: trend is exact wherever the lag was seen before
        assert s["carry-forward"]["bias"] > 0 and abs(s["trend"]["bias"]) < s["carry-forward"]["bias"]


def test_the_trusted_method_of_a_period_is_chosen_on_earlier_periods_only():
    """Two methods: ``early`` is exact on periods 1-2 and off by 10 later, ``late`` the reverse. The
    choice for period t follows the MAE over columns < t, so it switches one period after the
    truth does, and its MAE counts what that lag cost; carry-forward before any evidence."""
    K = 6
    truth = np.triu(np.full((1, K, K), 80.0), 1) + np.tril(np.full((1, K, K), np.nan))
    cols = np.arange(K)
    early = np.where(cols <= 2, truth, truth + 10)
    late = np.where(cols <= 2, truth + 10, truth)
    cf = truth + 6
    chosen, causal = backtest.causal_choice({"carry-forward": cf, "early": early, "late": late}, truth)
    # t = 0, 1: no labelled future cell yet; 2, 3: early (exact on periods 1, 2); 4: over the six
    # cells of periods 1..3 early and late both have MAE 5 (carry-forward 6): the earlier, early;
    # 5 (periods 1..4: early 7, late 3) and the next period: late
    assert chosen == ["carry-forward", "carry-forward", "early", "early", "early", "late", "late"]
    err = np.abs(causal - truth)[0]
    assert np.nanmax(err[:, 1]) == 6 and np.nanmax(err[:, 2]) == 0 and np.nanmin(err[:, 3:5]) == 10
    assert np.nanmax(err[:, 5]) == 0 and np.isnan(causal[0][np.tril_indices(K)]).all()
    # a method missing on an earlier cell is not a candidate
    holed = late.copy()
    holed[0, 0, 1] = np.nan
    assert backtest.causal_choice({"carry-forward": cf, "late": holed}, truth)[0][-1] == "carry-forward"


def test_the_causal_mae_is_what_the_summary_reports_and_differs_from_hindsight():
    ms = scores(np.random.default_rng(3))
    for reference in backtest.REFERENCES:
        bt = backtest.run(ms, reference=reference)
        s = bt.summary
        future = backtest.future_cells(ms.values)
        assert s["causal_mae"] == pytest.approx(np.abs(bt.causal - ms.values)[future].mean(), abs=1e-4)
        assert s["chosen_methods"] == {ms.slices[t]: bt.chosen[t] for t in range(1, K)}
        assert s["chosen_methods"][ms.slices[1]] == "carry-forward" and s["trusted_method"] == bt.chosen[K]
        # never better than the best method in hindsight over the same cells
        assert s["causal_mae"] >= s[s["hindsight_method"]]["mae"] - 1e-9


def relabelled(rng, cell: CellStats, keep_inputs: bool) -> CellStats:
    """Other labels (and, unless ``keep_inputs``, other outputs) that still add up: no more right
    rows than rows in any bin, as a later period's reference must be."""
    counts = cell.counts if keep_inputs else rng.integers(0, 30, cell.counts.shape).astype(float)
    new = replace(cell, counts=counts, correct=rng.binomial(counts.astype(int), 0.3).astype(float),
                  confusion=rng.integers(1, 50, (2, 2)).astype(float))
    return new if keep_inputs else replace(new, pred=counts.sum(axis=1), conf_sum=rng.uniform(0, counts.sum()))


def test_policy_estimates_read_no_label_of_their_period_or_later():
    """E[i, t] (one period ahead, method chosen causally): poison every label of periods >= t,
    everything of later periods and later cutoffs, and no E[:, t] nor any choice up to t changes."""
    rng = np.random.default_rng(5)
    ms = scores(rng)
    clean = backtest.run(ms, reference="previous")
    assert np.isfinite(clean.causal[:, 0, 1:]).all()
    for t in range(1, K):
        values = ms.values.copy()
        values[:, t:, :] = rng.uniform(-1e6, 1e6, values[:, t:, :].shape)
        values[:, :, t:] = rng.uniform(-1e6, 1e6, values[:, :, t:].shape)
        cells = [[[c if (r < t and col < t) else relabelled(rng, c, keep_inputs=r < t and col == t)
                   for col, c in enumerate(row)] for r, row in enumerate(seed)] for seed in ms.stats]
        xs = [x if k <= t else rng.normal(50, 9, x.shape) for k, x in enumerate(ms.inputs.x)]
        poisoned = replace(ms, values=values, stats=cells, inputs=SliceInputs(xs, ms.inputs.test))
        got = backtest.run(poisoned, reference="previous")
        assert got.chosen[:t + 1] == clean.chosen[:t + 1]
        np.testing.assert_array_equal(got.causal[:, :t, t], clean.causal[:, :t, t])


def _shift_case(rng, label_share, moved_share, n=400):
    """One seed whose held-out cells have balanced labels and whose future cells (i, j) have a
    share ``label_share[j]`` of class 1 (a pure label shift: outputs depend on the class only)
    and a share ``moved_share[j]`` of rows predicted as class 1 whatever their label (a covariate
    shift that moves the predictions, not the labels)."""
    K = len(label_share)
    values, n_eval = np.zeros((1, K, K)), np.zeros((1, K, K))
    cells = [[[None] * K for _ in range(K)]]
    for i in range(K):
        for j in range(K):
            y = (np.arange(n) < n * (0.5 if j <= i else label_share[j])).astype(int)
            logits, _ = class_conditional(rng, y)
            if j > i:
                moved = rng.random(n) < moved_share[j]
                logits[moved] = logits_for(np.ones(moved.sum(), int), np.full(moved.sum(), 0.9))
            c = stats(logits, y)
            cells[0][i][j], values[0, i, j], n_eval[0, i, j] = c, 100 * c.accuracy, n
    return ModelScores("M", [str(k) for k in range(K)], [0], values, n_eval, cells,
                       [tuple(range(i + 1)) for i in range(K)])


def test_the_label_shift_flag_is_calibrated_on_earlier_periods_and_does_not_cry_wolf():
    rng = np.random.default_rng(11)
    K = 9
    # no label shift, but predictions moved by a covariate shift of varying size (as in a season)
    calm = _shift_case(rng, [0.5] * K, [0.0, 0.35, 0.1, 0.3, 0.05, 0.25, 0.3, 0.15, 0.2])
    bt = backtest.run(calm)
    s = bt.summary
    assert s["n_label_shift_cells"] == 0 and s["n_flagged_uncalibrated"] >= 20  # the old rule cries wolf
    # period 1 (no labelled period before it: the raw threshold) and at most one cell after it
    assert bt.flagged[0, 0, 1] and bt.flagged[..., 2:].sum() <= 1 and s["n_flagged_shift_cells"] <= 2
    assert s["label_shift_flag_threshold"] > 0.3  # what a new period is flagged above
    # a real label shift from period 5 on, the same covariate noise: flagged where it is
    shifted = _shift_case(rng, [0.5] * 5 + [0.95] * 4, [0.0, 0.35, 0.1, 0.3, 0.05, 0.25, 0.3, 0.15, 0.2])
    bt = backtest.run(shifted)
    s = bt.summary
    assert s["n_label_shift_cells"] == 5 + 6 + 7 + 8
    assert s["n_flagged_with_label_shift"] >= 0.8 * s["n_label_shift_cells"]
    assert s["n_flagged_shift_cells"] - s["n_flagged_with_label_shift"] <= 2
    assert (bt.flagged == (bt.flagged & backtest.future_cells(bt.truth))).all()
    # the threshold: the largest estimated shift among cells without a measured one, never below it
    est, measured = np.array([0.3, 0.05, 0.4, 0.25]), np.array([0.0, 0.5, 0.3, 0.02])
    assert backtest.flag_threshold(est, measured, np.ones(4, bool), 0.1) == 0.3
    assert backtest.flag_threshold(est, measured, np.array([False, True, True, False]), 0.1) == 0.1


def test_the_flag_is_calibrated_on_every_model_of_the_dataset():
    """The models of one dataset share its labels: a shift BBSE reported for one of them where
    the labels did not move raises the threshold for all of them from the next period on."""
    K = 5
    truth = np.where(np.triu(np.ones((K, K)), 1) > 0, 80.0, np.nan)[None]

    def with_fake_shift_from(t):
        est = np.where(np.arange(K) >= t, 0.4, 0.0) * np.ones((1, K, K))
        return backtest.Backtest("m", truth, {}, {}, {}, truth * np.nan, np.zeros((1, K, K)), est, {})

    a, b = with_fake_shift_from(2), with_fake_shift_from(3)
    backtest.calibrate_flags([b], 0.1)
    assert b.flagged[0, :3, 3].all() and b.flagged.sum() == 3  # alone, period 3 is the first it sees
    backtest.calibrate_flags([a, b], 0.1)
    assert a.flagged[0, :2, 2].all() and a.flagged.sum() == 2 and not b.flagged.any()
    assert a.flag_taus == b.flag_taus == [0.1, 0.1, 0.1, 0.4, 0.4, 0.4]


@pytest.mark.parametrize("metric, higher", [("log_loss", False), ("balanced_accuracy", True)])
def test_a_metric_other_than_accuracy_gets_the_matrix_methods_only(metric, higher):
    """The confidence methods estimate accuracy: for another metric (evaluation.metric) the
    backtest has carry-forward and trend, chosen causally like any others, and no noise floor."""
    ms = scores(np.random.default_rng(3))
    values = 100 - ms.values if metric == "log_loss" else ms.values  # log loss: lower is better
    bt = backtest.run(replace(ms, values=values, metric=metric, higher_is_better=higher))
    s = bt.summary
    assert {m for m in backtest.METHODS if m in s} == {"carry-forward", "trend"} and s["noise_floor"] is None
    assert set(s["chosen_methods"].values()) <= {"carry-forward", "trend"} and s["causal_mae"] > 0
    assert s["n_flagged_shift_cells"] == 0 and np.isfinite(bt.causal[backtest.future_cells(values)]).all()
