"""Retraining policies: the oracle DP against brute force, the served-score convention, causality of
every trigger (poisoned future cells change no decision), label delay, NaN cells, a single period,
the recommendation, and ``driftmatrix policy`` on the published Yearbook matrices."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from driftmatrix.analysis import advisor, matrixfile, policy
from driftmatrix.cli import app

REFERENCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "reference" / "drift-happens-yearbook"


def brute_force(A, d):
    """Best mean served score with at most k retrains, for every k, by enumerating every schedule."""
    K = A.shape[0]
    best: dict[int, float] = {}
    for mask in itertools.product([0, 1], repeat=max(K - 2 - d, 0)):
        sched = [0] + [r + 1 for r, on in enumerate(mask) if on]
        cells = [A[sched[np.searchsorted(sched, j - d) - 1], j] for j in range(d + 1, K)]
        cells = [c for c in cells if not math.isnan(c)]
        value = sum(cells) / len(cells) if cells else math.nan
        k = len(sched) - 1
        if not math.isnan(value) and (math.isnan(best.get(k, math.nan)) or value > best[k]):
            best[k] = value
        best.setdefault(k, value)
    out = []
    for k in range(K - 1 - d):
        vals = [best[j] for j in range(k + 1) if not math.isnan(best[j])]
        out.append(max(vals) if vals else math.nan)
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("with_nan", [False, True])
def test_oracle_dp_equals_brute_force_for_every_k(seed, with_nan):
    rng = np.random.default_rng(seed)
    for K in range(1, 11):
        for d in (0, 1, 2):
            A = rng.normal(70, 10, size=(K, K))
            if with_nan:
                A[rng.random((K, K)) < 0.35] = np.nan
            got = policy.oracle(A, d)
            want = brute_force(A, d)
            assert len(got) == len(want) == max(K - 1 - d, 0)
            for k, ((value, sched), expected) in enumerate(zip(got, want)):
                assert value == pytest.approx(expected, nan_ok=True), (K, d, k)
                assert sched[0] == 0 and len(sched) - 1 <= k and sched == sorted(set(sched))
                assert policy.score(A, sched, d) == pytest.approx(value, nan_ok=True)


def test_nan_cells_are_skipped_in_the_replay_and_the_dp_alike():
    A = np.array([[90.0, 80.0, np.nan, 50.0],
                  [0.0, 95.0, 85.0, 60.0],
                  [0.0, 0.0, 95.0, 88.0],
                  [0.0, 0.0, 0.0, 95.0]])
    assert policy.score(A, [0], 0) == pytest.approx((80 + 50) / 2)  # period 2 is empty, not zero
    assert policy.score(A, [0, 1], 0) == pytest.approx((80 + 85 + 60) / 3)
    # one retrain: [0, 1] serves 80, 85, 60 (75); [0, 2] serves 80, empty, 88 (84) and wins
    assert policy.oracle(A, 0) == [(pytest.approx(65.0), [0]), (pytest.approx(84.0), [0, 2]),
                                   (pytest.approx((80 + 85 + 88) / 3), [0, 1, 2])]


def test_periodic_schedules_and_h1_is_the_mean_of_the_first_off_diagonal():
    assert policy.periodic(8, 3) == [0, 3, 6]
    rows, periods = policy.served(policy.periodic(8, 3), 8)
    assert list(periods) == list(range(1, 8))
    assert list(rows) == [((j - 1) // 3) * 3 for j in range(1, 8)]
    stack = np.random.default_rng(1).normal(80, 5, size=(3, 6, 6))
    want = [np.mean(np.diagonal(M, offset=1)) for M in stack]
    assert policy.periodic_scores(stack, 1) == pytest.approx(want)
    h1 = advisor.horizon_score(stack, 1)
    assert h1.mean == pytest.approx(np.mean(want)) and h1.std == pytest.approx(np.std(want, ddof=1))
    runs = {(r.policy, r.param): r for r in policy.evaluate(stack)}
    assert runs["periodic", 1].score == pytest.approx(np.mean(want)) and runs["periodic", 1].retrains == 4
    assert runs["never", None].scores == pytest.approx([np.mean(M[0, 1:]) for M in stack])


def test_label_delay_serves_from_the_first_model_that_can_exist():
    M = np.arange(36, dtype=float).reshape(6, 6)
    # d = 2: row 0 is trained at the end of period 2 and serves 3..; a retrain at t trains row t-2
    assert policy.periodic(6, 1, 2) == [0, 1, 2]
    rows, periods = policy.served([0, 1, 2], 6, 2)
    assert list(periods) == [3, 4, 5] and list(rows) == [0, 1, 2]  # period j by row j-1-d
    assert policy.score(M, [0], 2) == pytest.approx(np.mean(M[0, 3:]))
    runs = {(r.policy, r.param): r for r in policy.evaluate(M[None], d=2)}
    assert runs["periodic", 1].score == pytest.approx(np.mean([M[j - 3, j] for j in (3, 4, 5)]))
    assert runs["oracle", 2].schedules == [[0, 1, 2]] and runs["oracle", 2].label_delay == 2
    assert policy.evaluate(M[None, :3, :3], d=2) == []  # nothing served: no model before the end


def test_a_single_period_serves_nothing_and_says_so(tmp_path):
    assert policy.evaluate(np.ones((2, 1, 1))) == []
    assert policy.oracle(np.ones((1, 1))) == [] and policy.periodic(1, 1) == []
    assert math.isnan(policy.score(np.ones((1, 1)), [0]))
    m = matrixfile.DriftMatrices(model="CNN-S", slices=["2000"], seed_values=np.full((2, 1, 1), 90.0))
    matrixfile.write(m, tmp_path / "CNN-S.json")
    res = CliRunner().invoke(app, ["policy", str(tmp_path), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "nothing served" in res.output
    assert (tmp_path / "out" / "policies.csv").read_text().splitlines() == [",".join(policy.CSV_FIELDS)]


def _arrays(seed, K=9, S=2):
    rng = np.random.default_rng(seed)
    M = np.stack([np.triu(rng.normal(-3, 2, (K, K))).cumsum(1) + 90 for _ in range(S)])  # decays with lag
    E = M + rng.normal(0, 1, M.shape)
    D = np.abs(rng.normal(0, 1, (K, K))).cumsum(1)
    return M, E, D


def _poison(arrays, t, d, value):
    """Every cell a decision at the end of period t may not read set to ``value``."""
    M, E, D = (a.copy() for a in arrays)
    M[t - d + 1:, :] = value
    M[:, t - d + 1:] = value
    E[t - d + 1:, :] = value
    E[:, t + 1:] = value
    D[t + 1:, :] = value
    D[:, t + 1:] = value
    return M, E, D


@pytest.mark.parametrize("d", [0, 1])
@pytest.mark.parametrize("name", list(policy.SIGNALS))
def test_no_decision_changes_when_every_unseen_cell_is_poisoned(name, d):
    signal = policy.SIGNALS[name]
    M, E, D = _arrays(3)
    K = M.shape[-1]
    for s in range(M.shape[0]):
        clean = (M[s], E[s], D)
        grid = policy.tau_grid(signal, K, d, [clean])
        fixed = [policy.replay(signal, tau, K, d, clean) for tau in grid]
        taus = policy.nested(M[s], fixed, grid, d, cost=0.05)
        chosen = policy.replay(signal, 0.0, K, d, clean, taus)
        for t in range(d + 1, K - 1):
            for value in (np.nan, 1e9, -1e9):
                dirty = _poison(clean, t, d, value)
                for r in range(t - d):
                    assert signal(policy.known(t, d, *dirty), r, t, d) == pytest.approx(
                        signal(policy.known(t, d, *clean), r, t, d), nan_ok=True)
                dirty_fixed = [policy.replay(signal, tau, K, d, dirty) for tau in grid]
                for f, g in zip(fixed, dirty_fixed):  # rows trained at decisions <= t agree
                    assert [r for r in f if r <= t - d] == [r for r in g if r <= t - d]
                dirty_taus = policy.nested(dirty[0], dirty_fixed, grid, d, cost=0.05)
                assert dirty_taus[:t - d] == taus[:t - d]
                again = policy.replay(signal, 0.0, K, d, dirty, dirty_taus)
                assert [r for r in again if r <= t - d] == [r for r in chosen if r <= t - d]


def test_a_decision_reading_the_future_raises():
    M, E, D = _arrays(0)
    view = policy.known(4, 1, M[0], E[0], D)
    assert view["M"][3, 3] == M[0, 3, 3] and view["E"][3, 4] == E[0, 3, 4] and view["D"][4, 4] == D[4, 4]
    for key, cell in (("M", (3, 4)), ("M", (4, 0)), ("E", (4, 2)), ("E", (2, 5)), ("D", (5, 1))):
        with pytest.raises(policy.FutureRead):
            view[key][cell]

    def leaky(v, r, t, d):  # the deployed model's score on the period it is about to serve
        return v["M"][r, r] - v["M"][r, t + 1]

    with pytest.raises(policy.FutureRead):
        policy.replay(leaky, 0.0, 9, 0, (M[0], E[0], D))
    with pytest.raises(ValueError, match="needs estimates"):
        policy.replay(policy.SIGNALS["estimate"], 0.0, 9, 0, (M[0], None, None))


@pytest.mark.parametrize("seed", range(6))
def test_no_causal_policy_beats_the_oracle_at_equal_retrains(seed):
    M, E, D = _arrays(seed, K=8, S=3)
    if seed % 2:
        M[np.random.default_rng(seed).random(M.shape) < 0.15] = np.nan
    d = seed % 3 == 2
    runs = policy.evaluate(M, d=int(d), E=E, D=D, cost=0.1)
    assert {r.policy for r in runs} >= {"never", "periodic", "oracle", "estimate", "cumulative", "label", "drift"}
    oracle = {(s, r.param): r.scores[s] for r in runs if r.policy == "oracle" for s in range(3)}
    checked = 0
    for r in runs:
        if r.policy in ("oracle", "oracle-mean"):
            continue
        for s, sched in enumerate(r.schedules):
            if not math.isnan(r.scores[s]):
                assert r.scores[s] <= oracle[s, len(sched) - 1] + 1e-9, (r.policy, r.param, s)
                checked += 1
    assert checked > 50
    mean_oracle = [r for r in runs if r.policy == "oracle-mean"]
    per_seed = [r for r in runs if r.policy == "oracle"]
    assert all(a.score <= b.score + 1e-9 for a, b in zip(mean_oracle, per_seed))


def test_nested_tau_is_chosen_on_earlier_periods_and_reported():
    M, E, D = _arrays(5, K=10, S=2)
    runs = {(r.policy, r.param): r for r in policy.evaluate(M, E=E, D=D, cost=0.05)}
    nested = runs["estimate", policy.NESTED]
    assert len(nested.taus) == 2 and all(len(t) == 9 for t in nested.taus)  # decisions t = 1..9
    grid = {r.param for (p, _), r in runs.items() if p == "estimate" and r.param != policy.NESTED}
    assert set(nested.taus[0]) <= grid
    assert nested.taus[0][0] == max(grid)  # period 1 cannot show what a retrain is worth: the largest
    delayed = {(r.policy, r.param): r for r in policy.evaluate(M, d=1, E=E, cost=0.05)}
    assert delayed["estimate", policy.NESTED].taus[0][0] == math.inf  # nothing served is labelled yet
    assert "next tau" in policy.describe(nested)


def test_seconds_sum_over_the_rows_trained():
    M, _, _ = _arrays(2, K=6, S=2)
    secs = np.arange(12, dtype=float).reshape(2, 6)
    runs = {(r.policy, r.param): r for r in policy.evaluate(M, seconds=secs)}
    assert runs["periodic", 2].seconds.tolist() == [0 + 2 + 4, 6 + 8 + 10]
    assert runs["never", None].seconds.tolist() == [0, 6]


def _runs(score_a, score_prior, std=0.5):
    """Two seeds; ``A`` is never retrained, ``Prior`` is flat."""
    def run(score):
        return policy.Run("never", None, 0, [[0], [0]], np.array([score - std, score + std]))
    return {"CNN-S": [run(score_a)], "Prior": [run(score_prior)]}


def test_recommend_never_picks_the_baseline_and_says_when_nothing_beats_it():
    fams = {"CNN-S": "CNN", "Prior": "Baseline"}
    rec = policy.recommend(_runs(80.0, 60.0), fams)
    assert rec.model == "CNN-S" and rec.text.startswith("Deploy CNN-S") and "ahead of the Prior" in rec.text
    rec = policy.recommend(_runs(60.5, 60.0), fams)  # within 2 standard errors of the difference
    assert rec.model is None and rec.run is None
    assert rec.text.startswith("No model beats the Prior baseline")
    rec = policy.recommend(_runs(50.0, 60.0), fams)
    assert rec.model is None


def test_with_one_seed_the_recommendation_says_the_noise_is_unknown_not_zero():
    one = {m: [policy.Run("never", None, 0, [[0]], np.array([v]))] for m, v in (("CNN-S", 80.0), ("Prior", 60.0))}
    rec = policy.recommend(one, {"CNN-S": "CNN", "Prior": "Baseline"})
    assert rec.model == "CNN-S" and "seed noise unknown with one seed" in rec.text and "noise 0.00" not in rec.text
    assert "seed noise 1." in policy.recommend(_runs(80.0, 60.0), {"Prior": "Baseline"}).text


def test_recommend_trades_score_for_retrains_by_cost_and_budget():
    stack = np.stack([np.triu(np.full((6, 6), -4.0)).cumsum(1) + 100 for _ in range(2)])  # -4 per lag
    runs = {"CNN-S": policy.evaluate(stack)}
    assert policy.recommend(runs, {}, cost=0.0).run.param == 1  # free retrains: every period
    assert policy.recommend(runs, {}, cost=100.0).run.policy == "never"
    picked = policy.recommend(runs, {}, budget=2).run
    assert picked.retrains <= 2 and picked.policy == "periodic"
    assert policy.pareto([0, 1, 1, 2, 3], [50, 60, 55, 60, 70]) == [0, 1, 4]


def test_recommend_h1_is_the_mean_of_the_first_off_diagonal(tmp_path):
    rng = np.random.default_rng(7)
    stacks = {"CNN-S": rng.normal(80, 5, (3, 5, 5)), "MLP-S": rng.normal(70, 5, (3, 5, 5))}
    for name, stack in stacks.items():
        matrixfile.write(matrixfile.DriftMatrices(model=name, slices=list("abcde"), seed_values=stack,
                                                  unit="%", seeds=[0, 1, 2]), tmp_path / f"{name}.json")
    res = CliRunner().invoke(app, ["recommend", str(tmp_path), "--horizon", "1"])
    assert res.exit_code == 0, res.output
    printed = {line.split()[1]: float(line.split()[3]) for line in res.output.splitlines()
               if line.strip()[:1].isdigit()}
    for name, stack in stacks.items():
        want = np.mean([np.mean(np.diagonal(np.round(M, 6), offset=1)) for M in stack])
        assert printed[name] == pytest.approx(want, abs=0.05)


@pytest.mark.skipif(not REFERENCE.exists(), reason="shared reference fixture not available")
def test_policy_command_on_the_published_yearbook_matrices(tmp_path):
    res = CliRunner().invoke(app, ["policy", str(REFERENCE), "--out", str(tmp_path), "--retrain-cost", "0.2"])
    assert res.exit_code == 0, res.output
    with open(tmp_path / "policies.csv") as f:
        reader = csv.DictReader(f)
        assert tuple(reader.fieldnames) == policy.CSV_FIELDS
        rows = list(reader)
    assert {r["policy"] for r in rows} == {"never", "periodic", "oracle", "label"}
    cnn = {(r["policy"], r["param"]): r for r in rows if r["model"] == "CNN-S"}
    M = matrixfile.read(REFERENCE / "CNN-S.json").mean
    assert float(cnn["periodic", "1"]["score"]) == pytest.approx(np.nanmean(np.diagonal(M, offset=1)), abs=1e-3)
    K = M.shape[0]
    assert float(cnn["never", ""]["score"]) == pytest.approx(np.nanmean(M[0, 1:]), abs=1e-3)
    assert float(cnn["oracle", "0"]["score"]) == pytest.approx(float(cnn["never", ""]["score"]))
    assert float(cnn["oracle", str(K - 2)]["score"]) >= float(cnn["periodic", "1"]["score"])
    for (p, param), r in cnn.items():  # at equal retrains no causal policy beats the oracle
        if p != "oracle":
            k = math.ceil(float(r["retrains"]))
            assert float(r["score"]) <= float(cnn["oracle", str(k)]["score"]) + 1e-6
    doc = json.loads((tmp_path / "CNN-S.json").read_text())
    assert len(doc["runs"]) >= 2 * (K - 2) and all(run["schedules"][0][0] == 0 for run in doc["runs"])
    assert "Deploy " in res.output and "Pareto frontier" in res.output
