"""IW-inputs: the input-space domain classifier's weights on constructed inputs with a known
answer, and the per-row correctness the evaluate stage keeps for the held-out cells."""

import numpy as np
import pytest

from driftmatrix.estimate import domain, methods
from driftmatrix.estimate.cells import from_doc, pooled
from driftmatrix.learn.score import score_cell
from estimate_cases import calibrated


def two_clusters(rng, n_a: int, n_b: int, shift: float = 0.0):
    """Inputs from cluster A (around -2) and B (around +2) in 4 dimensions; the model is right on
    95% of A and 60% of B."""
    x = np.concatenate([rng.normal(-2 + shift, 1, (n_a, 4)), rng.normal(2 + shift, 1, (n_b, 4))])
    right = np.concatenate([rng.random(n_a) < 0.95, rng.random(n_b) < 0.60])
    return x, right


def test_iw_inputs_recovers_the_accuracy_of_the_cluster_the_period_comes_from():
    rng = np.random.default_rng(0)
    src_x, right = two_clusters(rng, 300, 300)
    tgt_x, tgt_right = two_clusters(rng, 20, 180)  # 90% from B: about 63.5% right
    truth, carry = 100 * (0.1 * 0.95 + 0.9 * 0.60), 100 * right.mean()
    w, ess = domain.domain_weights(src_x, tgt_x)
    assert w.shape == (600,) and (w >= 0).all() and w.max() <= domain.MAX_WEIGHT
    est = methods.importance_weighted_inputs(right, w, len(tgt_x))
    assert abs(est.value - truth) < 4 < abs(carry - truth) - 8
    assert est.lo < truth < est.hi and est.flags["ess"] == pytest.approx(ess, abs=0.1)
    assert not est.flags["low_ess"] and 100 < ess < 600
    # deterministic: the same inputs give the same weights
    assert np.array_equal(domain.domain_weights(src_x, tgt_x)[0], w)
    assert np.array_equal(domain.domain_weights(src_x, tgt_x[::-1])[0], w)  # nor on the period's row order


def test_a_period_outside_the_held_out_support_gets_a_low_ess_and_the_flag():
    rng = np.random.default_rng(1)
    src_x, right = two_clusters(rng, 300, 300)
    far = rng.normal(12, 1, (200, 4))
    w, ess = domain.domain_weights(src_x, far)
    est = methods.importance_weighted_inputs(right, w, len(far))
    assert ess < 30 and est.flags["low_ess"]
    # the same period as the held-out rows: weights near uniform, ESS near the held-out size
    same, _ = two_clusters(rng, 300, 300)
    w, ess = domain.domain_weights(src_x, same)
    assert ess > 500 and abs(methods.importance_weighted_inputs(right, w, 600).value - 100 * right.mean()) < 2


def test_held_out_cells_keep_their_rows_correctness_in_row_order_and_pool_in_window_order():
    rng = np.random.default_rng(2)
    (la, ya), (lb, yb) = calibrated(rng, 37), calibrated(rng, 21)
    a = from_doc(score_cell(la, ya, "binary", per_row=True)["stats"])
    b = from_doc(score_cell(lb, yb, "binary", per_row=True)["stats"])
    assert np.array_equal(a.right, la.argmax(1) == ya) and a.right.dtype == bool
    assert a.right.sum() == a.correct.sum() == round(a.accuracy * a.n)
    both = pooled([a, None, b])
    assert np.array_equal(both.right, np.r_[la.argmax(1) == ya, lb.argmax(1) == yb])
    assert a.unlabelled().right is None and both.unlabelled().right is None
    future = score_cell(la, ya, "binary")["stats"]  # a future cell keeps no rows
    assert "right_bits" not in future and from_doc(future).right is None
    assert pooled([a, from_doc(future)]).right is None  # one cell without rows: the pool has none


def test_image_features_and_the_slices_row_order():
    rng = np.random.default_rng(3)
    imgs = rng.integers(0, 256, (5, 32, 32, 3), dtype=np.uint8)
    f = domain.image_features(imgs)
    assert f.shape == (5, 67) and np.allclose(f[:, 64:], imgs.mean(axis=(1, 2)) / 255)
    assert np.allclose(f[:, :64].mean(axis=1), imgs.mean(axis=(1, 2, 3)) / 255)
    ids, split = np.array([1, 0, 1, 0, 1]), np.array(["test", "train", "train", "test", "test"])
    si = domain.split_by_slice(f, ids, split, 2)
    assert np.array_equal(si.x[1], f[[0, 2, 4]]) and si.test[1].tolist() == [True, False, True]
    assert np.array_equal(si.held_out([0, 1]), f[[3, 0, 4]]) and len(si.upto(0).x) == 1
    t = domain.table_features(np.array([[1.0, np.nan], [3.0, np.nan], [np.nan, np.nan]]))
    assert t.tolist() == [[1.0, 0.0], [3.0, 0.0], [2.0, 0.0]]


def test_a_feature_table_gives_its_numeric_columns_per_slice(tmp_path):
    """The built-in feature table, sliced: one row of numeric features per row, grouped per slice
    as the evaluate stage orders a cell's rows (no training needed)."""
    from driftmatrix.config import parse_params
    from driftmatrix.data.table import DatasetMeta
    from testkit.pipeline import Paths, prepare
    from driftmatrix.data.slicing import load_slices

    params = parse_params({
        "dataset": {"name": "tab", "source": "table", "path": str(tmp_path / "raw"), "task": "binary",
                    "options": {"timestamp": "year", "label": "churn", "id": "id", "features": "auto"}},
        "synthetic": {"seed": 0, "first_year": 2000, "years": 3, "per_year": 50, "span": 6},
        "slicing": {"min_samples": 10}, "models": {"LogReg": {}},
        "tracking": {"uri": f"sqlite:///{tmp_path / 'mlflow.db'}", "experiment": "tab",
                     "artifact_root": str(tmp_path / "mlruns"), "log_models": False}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths, generate=True)
    rows, manifest, _ = load_slices(paths.slices)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    si = domain.read_slice_inputs(paths.slices)
    assert len(si.x) == len(manifest["slices"]) == 3 and meta.numeric
    assert sum(len(x) for x in si.x) == len(rows) and all(x.shape[1] == len(meta.numeric) for x in si.x)
    assert all(np.isfinite(x).all() for x in si.x)
    first = np.flatnonzero(rows["slice"].to_numpy() == 0)
    assert si.test[0].tolist() == (rows["split"].to_numpy()[first] == "test").tolist()
