"""Pure drift math, checked against drift injected on purpose (both directions)."""

import numpy as np
import pytest

from driftmatrix.audit import drift
from driftmatrix.audit.slices import axis_names, counts_by_slice, label_levels
from testkit.slices import make_slices
from driftmatrix.data.table import DatasetMeta

K = 6


def _label_counts(label_shift: float, task: str = "multiclass") -> np.ndarray:
    rows, manifest, _ = make_slices(k=K, per_slice=300, task=task, n_classes=3, label_shift=label_shift)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    counts, n = counts_by_slice(rows, meta, label_levels(meta, rows), K)
    assert (n == 300).all()
    return counts


def _mean_by_lag(m: np.ndarray) -> list[float]:
    return [float(np.mean(np.diagonal(m, offset=lag))) for lag in range(1, len(m))]


def test_divergences_basic_properties():
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.0, 0.5, 0.5])
    assert drift.js_divergence(p, p) == pytest.approx(0.0)
    assert drift.js_divergence(p, q) == pytest.approx(drift.js_divergence(q, p))
    assert drift.js_divergence(np.array([1.0, 0]), np.array([0, 1.0])) == pytest.approx(1.0)
    assert drift.kl_divergence(p, q) == np.inf  # why the KL matrix smooths
    sm = drift.smoothed(np.array([[10, 0, 0], [0, 0, 0]]), 0.5)
    assert sm[0] == pytest.approx([10.5 / 11.5, 0.5 / 11.5, 0.5 / 11.5])
    assert np.isnan(sm[1]).all()
    kl = drift.label_kl_matrix(np.array([[10, 10, 0], [0, 10, 10]]), alpha=0.5)
    assert np.isfinite(kl).all() and kl[0, 1] > 0


@pytest.mark.parametrize("task", ["multiclass", "multilabel", "regression"])
def test_label_shift_grows_with_distance_when_on(task):
    counts = _label_counts(0.4, task)
    for m in (drift.label_js_matrix(counts), drift.label_kl_matrix(counts)):
        assert np.allclose(np.diag(m), 0)
        assert np.all(np.diff(m[0]) > 0), m[0]          # further from the first slice: larger
        assert np.all(np.diff(_mean_by_lag(m)) > 0)      # and on average over all pairs
        assert m[0, -1] > 0.05


def test_label_shift_near_zero_when_off():
    counts = _label_counts(0.0)
    assert np.nanmax(drift.label_js_matrix(counts)) < 1e-3
    assert np.nanmax(drift.label_kl_matrix(counts)) < 1e-3


def test_prevalence_per_class_and_per_category():
    rows, manifest, _ = make_slices(k=3, per_slice=100, task="multilabel", n_classes=3)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    levels = label_levels(meta, rows)
    counts, n = counts_by_slice(rows, meta, levels, 3)
    prev = drift.prevalence(counts, n)
    assert axis_names(meta, levels) == ["c0", "c1", "c2"]
    assert prev[0] == pytest.approx(rows[rows.slice == 0][list(meta.label_columns)].mean().to_numpy())


def test_tokeniser_and_vocabulary():
    assert drift.tokenize("Don't PANIC: 42 towels_here!") == ["don't", "panic", "42", "towels", "here"]
    v = drift.top_vocabulary(["a a a b b c", "d"], top_n=2)
    assert v == frozenset({"a", "b"})


def _vocab_overlap(shift: float) -> np.ndarray:
    rows, _, _ = make_slices(k=K, per_slice=150, covariate_shift=shift)
    vocabs = [drift.top_vocabulary(rows.loc[rows.slice == i, "text"], top_n=100) for i in range(K)]
    return drift.pairwise(vocabs, drift.vocabulary_overlap)


def test_vocabulary_overlap_falls_with_distance_when_on_and_stays_full_when_off():
    on = _vocab_overlap(8.0)
    assert np.all(np.diff(on[0]) < 0) and on[0, -1] < 0.7
    assert np.all(np.diff(_mean_by_lag(on)) < 0)
    off = _vocab_overlap(0.0)
    assert np.nanmin(off) > 0.98


def _pixel_mmd(shift: float) -> tuple[np.ndarray, np.ndarray]:
    rows, _, images = make_slices(k=K, per_slice=120, input_kind="image", covariate_shift=shift)
    x = drift.downsample_images(images, 4)
    ids = rows["slice"].to_numpy()
    mmd, p, sigma = drift.mmd_matrix([x[ids == i] for i in range(K)], max_n=100, permutations=100, seed=1)
    assert sigma > 0
    return mmd, p


def test_mmd_grows_with_distance_when_on_and_stays_small_when_off():
    on, p_on = _pixel_mmd(8.0)
    off, p_off = _pixel_mmd(0.0)
    assert np.all(np.diff(on[0]) > 0)
    assert np.all(np.diff(_mean_by_lag(on)) > 0)
    assert p_on[0, -1] < 0.05
    assert np.nanmax(off) < 0.2 * on[0, -1]
    assert np.median(p_off[np.triu_indices(K, 1)]) > 0.1       # no significant difference
    assert np.allclose(on, on.T) and np.allclose(np.diag(on), 0)


def test_downsample_images_shape_and_range():
    imgs = np.full((2, 32, 32, 3), 255, dtype=np.uint8)
    x = drift.downsample_images(imgs, 8)
    assert x.shape == (2, 8 * 8 * 3) and np.allclose(x, 1.0)


def test_correlate_recovers_monotone_relation_and_respects_metric_direction():
    k = 5
    d = np.abs(np.subtract.outer(np.arange(k), np.arange(k))).astype(float)
    acc = 90 - 3 * d                       # accuracy drops with distance
    res = drift.correlate(d, acc, higher_is_better=True)
    assert res["n"] == k * (k - 1) // 2 and res["spearman"] == pytest.approx(1.0)
    mse = 1 + d                            # lower is better: error grows with distance
    assert drift.correlate(d, mse, higher_is_better=False)["spearman"] == pytest.approx(1.0)
    assert drift.correlate(d, mse, higher_is_better=True)["spearman"] == pytest.approx(-1.0)
    acc[0, 1] = np.nan
    assert drift.correlate(d, acc)["n"] == k * (k - 1) // 2 - 1
    assert drift.correlate(d[:2, :2], acc[:2, :2])["spearman"] is None  # too few pairs


def test_window_drift_compares_the_pooled_window_with_each_later_period():
    """Slices 0..3 from one distribution, 4 and 5 shifted: a window up to r < 4 is far from 4 and
    5 and near 1..3; a window that pools 4 is nearer 5 than a window without it. Capped, seeded."""
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(K), 120)
    x = rng.normal(size=(len(ids), 5)) + 1.5 * (ids >= 4)[:, None]
    x[ids == 5] += 0.5
    d, sigma = drift.window_mmd(x, ids, K, max_n=80, seed=1)
    assert sigma > 0 and np.isnan(d[np.tril_indices(K)]).all() and np.isfinite(d[np.triu_indices(K, 1)]).all()
    assert d[:4, 4].min() > 5 * d[np.triu_indices(4, 1)].max()
    assert d[4, 5] < d[3, 5] and d[0, 5] > d[0, 4]
    again, _ = drift.window_mmd(x[::-1], ids[::-1], K, max_n=80, seed=1)  # row order within the data: sorted first
    assert np.allclose(np.isnan(again), np.isnan(d)) and again[0, 4] > 5 * np.nanmax(again[:3, 1:4])
    # the window side draws from every slice of the pool: a window 0..2 of a shifted slice 0 is between
    x2 = x.copy()
    x2[ids == 0] += 3.0
    d2, _ = drift.window_mmd(x2, ids, K, max_n=120, seed=1)
    assert d2[0, 3] > d2[2, 3] > d[2, 3]
    assert np.isnan(drift.window_mmd(np.zeros((0, 3)), np.zeros(0, int), 3)[0]).all()


def test_spearman_is_scipys_with_ties_and_both_signs():
    from scipy.stats import spearmanr

    rng = np.random.default_rng(0)
    for n in (3, 4, 7, 30):
        for tied in (False, True):
            x = rng.integers(0, 3, n).astype(float) if tied else rng.normal(size=n)
            y = -x + rng.normal(size=n) if not tied else rng.integers(0, 2, n).astype(float)
            if np.ptp(x) == 0 or np.ptp(y) == 0:
                continue
            want = spearmanr(x, y)
            assert drift.spearman(x, y) == pytest.approx((want.statistic, want.pvalue), abs=1e-12)
    rho, p = drift.spearman(np.arange(6.0), np.arange(6.0)[::-1])
    assert rho == pytest.approx(-1.0) and p < 1e-6
