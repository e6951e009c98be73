"""Losses and cell metrics of protocol section 4, checked against scikit-learn and by hand."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from sklearn.metrics import mean_squared_error, roc_auc_score

from driftmatrix.learn.tasks import balanced_mse, cell_score, macro_auc, make_loss
from driftmatrix.config import metric_for

RNG = np.random.default_rng(0)
CATS = ("cs.LG", "hep-ph", "cs.CV")


def multilabel(n=60, c=3):
    y = (RNG.random((n, c)) < 0.4).astype(np.float32)
    scores = y * 0.8 + RNG.normal(0, 0.6, (n, c))
    return scores, y


def test_macro_auc_equals_sklearn_when_every_category_has_both_classes():
    scores, y = multilabel()
    value, left = macro_auc(scores, y, CATS)
    assert left == []
    assert value == pytest.approx(100 * roc_auc_score(y, scores, average="macro"))


@pytest.mark.parametrize("column_value, name", [(0.0, "hep-ph"), (1.0, "hep-ph")])
def test_category_without_positives_or_negatives_is_left_out_and_named(column_value, name):
    scores, y = multilabel()
    y[:, 1] = column_value
    value, left = macro_auc(scores, y, CATS)
    assert left == [name]
    kept = [0, 2]
    assert value == pytest.approx(100 * roc_auc_score(y[:, kept], scores[:, kept], average="macro"))
    # scikit-learn gives no number for the full matrix (NaN or an error): the case needs handling
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            assert np.isnan(roc_auc_score(y, scores, average="macro"))
        except ValueError:
            pass


def test_macro_auc_of_a_cell_with_no_scorable_category_is_nan():
    y = np.zeros((5, 3), np.float32)
    value, left = cell_score("multilabel", RNG.random((5, 3)), y, CATS)
    assert np.isnan(value) and left == list(CATS)
    assert np.isnan(cell_score("multilabel", np.zeros((0, 3)), np.zeros((0, 3)), CATS)[0])


def _sklearn_balanced_mse(pred, target):
    """Mean over present levels of the per-level MSE = MSE weighted by 1 / n_level."""
    levels, counts = np.unique(target, return_counts=True)
    weights = 1.0 / counts[np.searchsorted(levels, target)]
    return mean_squared_error(target, pred, sample_weight=weights)


def test_balanced_mse_matches_sklearn_and_skips_absent_levels():
    target = RNG.choice([1.0, 2.0, 4.0, 5.0], size=200, p=[0.1, 0.1, 0.2, 0.6])  # level 3 absent
    pred = target + RNG.normal(0, 0.7, size=200)
    assert balanced_mse(pred, target) == pytest.approx(_sklearn_balanced_mse(pred, target))
    per_level = [np.mean((pred[target == r] - r) ** 2) for r in (1, 2, 4, 5)]
    assert balanced_mse(pred, target) == pytest.approx(np.mean(per_level))
    # a plain MSE would be dominated by the 5-star majority; the balanced one is not
    biased = np.where(target == 5, 5.0, target + 2.0)
    assert balanced_mse(biased, target) == pytest.approx(4.0 * 3 / 4)  # 3 of 4 levels off by 2
    assert mean_squared_error(target, biased) < 2.0


def test_cell_score_units_and_directions():
    assert metric_for("regression").higher_is_better is False and metric_for("multilabel").unit == "%"
    value, _ = cell_score("regression", np.array([[4.0], [2.0]]), np.array([5.0, 1.0]))
    assert value == pytest.approx(1.0)
    assert cell_score("binary", np.array([[0.1, 0.9], [0.8, 0.2]]), np.array([1, 1]))[0] == pytest.approx(50.0)


def test_weighted_mse_is_eq4_mean_over_the_batch_of_inverse_frequency_weighted_errors():
    train = np.array([5, 5, 5, 5, 5, 5, 4, 4, 1], np.float32)
    loss = make_loss("regression", train)
    y = torch.tensor([5.0, 4.0, 1.0, 3.0])
    out = torch.tensor([[4.0], [3.0], [3.0], [3.0]])
    w = torch.tensor([9 / 6, 9 / 2, 9 / 1, 0.0])  # level 3 unseen in training: no weight
    expected = (w * (out.squeeze(1) - y) ** 2).sum() / len(y)  # (1/n) sum w_i (y_i - yhat_i)^2
    assert loss(out, y).item() == pytest.approx(expected.item())


def test_weighted_mse_scale_follows_the_weights_not_the_batch_mix():
    # Balanced training data over 5 levels: every w_r = n / n_r = 5, so Eq. 4 is 5x the plain MSE
    # (a loss normalised by the batch's sum of weights would give the plain MSE instead).
    train = np.repeat(np.arange(1, 6, dtype=np.float32), 4)
    y = torch.tensor([1.0, 5.0, 5.0, 5.0])
    out = torch.tensor([[2.0], [4.0], [4.0], [4.0]])
    assert make_loss("regression", train)(out, y).item() == pytest.approx(5.0 * 1.0)
    # a rare level in a batch of common ones keeps its full weight
    skewed = np.array([5] * 8 + [1] * 2, np.float32)  # w_5 = 10 / 8, w_1 = 10 / 2
    value = make_loss("regression", skewed)(out, y).item()
    assert value == pytest.approx((5.0 * 1 + 3 * 1.25 * 1) / 4)


def test_weighted_mse_levels_are_looked_up_by_value():
    train = np.array([-2, -2, 0, 1e6], np.float32)  # negative and huge ratings: no table by rating
    loss = make_loss("regression", train)
    y = torch.tensor([-2.0, 0.0, 1e6, 7.0])
    out = torch.tensor([[-1.0], [1.0], [1e6 + 2], [0.0]])
    expected = (2.0 * 1 + 4.0 * 1 + 4.0 * 4 + 0.0 * 49) / 4  # w_-2 = 2, w_0 = 4, w_1e6 = 4, 7 unseen
    assert loss(out, y).item() == pytest.approx(expected)


def test_bce_pos_weight_is_negatives_over_positives_of_the_given_targets():
    train = np.array([[1, 0, 0], [1, 1, 0], [0, 0, 0], [0, 0, 0]], np.float32)  # category 2: no positives
    loss = make_loss("multilabel", train)
    out, y = torch.randn(6, 3), (torch.rand(6, 3) < 0.5).float()
    expected = F.binary_cross_entropy_with_logits(out, y, pos_weight=torch.tensor([1.0, 3.0, 1.0]))
    assert loss(out, y).item() == pytest.approx(expected.item())


def test_loss_weights_differ_when_later_data_would_change_them():
    early = np.array([5, 5, 5, 1], np.float32)
    later = np.concatenate([early, np.array([1, 1, 1, 1], np.float32)])
    y, out = torch.tensor([5.0, 1.0]), torch.tensor([[4.0], [3.0]])
    assert make_loss("regression", early)(out, y).item() != pytest.approx(make_loss("regression", later)(out, y).item())


def test_each_classification_metric_on_hand_made_outputs():
    from driftmatrix.config import ConfigError, parse_params

    # 3 classes, 6 rows: class 0 recalled 2/3, class 1 1/2, class 2 1/1
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.6, 0.3, 0.1], [0.2, 0.5, 0.3],
                              [0.1, 0.8, 0.1], [0.5, 0.4, 0.1], [0.25, 0.15, 0.6]]))
    y = np.array([0, 0, 0, 1, 1, 2])
    score = lambda m, yy=y: cell_score("multiclass", logits, yy, metric=m)  # noqa: E731
    assert score("accuracy") == (pytest.approx(100 * 4 / 6), [])
    assert score("balanced_accuracy") == (pytest.approx(100 * (2 / 3 + 1 / 2 + 1) / 3), [])
    p_true = np.array([0.7, 0.6, 0.2, 0.8, 0.4, 0.6])
    assert score("log_loss") == (pytest.approx(-np.log(p_true).mean()), [])
    onehot = np.eye(3)[y]
    auc = np.mean([roc_auc_score(onehot[:, c], np.exp(logits)[:, c]) for c in range(3)])
    assert score("macro_auc") == (pytest.approx(100 * auc), [])
    # a class with no row in the cell is left out and named (balanced accuracy, macro AUC)
    assert score("balanced_accuracy", np.array([0, 0, 0, 1, 1, 1])) == (pytest.approx(100 * (2 / 3 + 1 / 3) / 2), ["2"])
    assert score("macro_auc", np.array([0, 0, 0, 1, 1, 1]))[1] == ["2"]
    # binary: the macro over both classes is the ROC AUC of the positive class
    b = np.log(np.array([[0.9, 0.1], [0.4, 0.6], [0.3, 0.7], [0.6, 0.4]]))
    yb = np.array([0, 1, 0, 1])
    assert cell_score("binary", b, yb, metric="macro_auc")[0] == pytest.approx(100 * roc_auc_score(yb, np.exp(b[:, 1])))
    # directions, defaults and the params section
    assert metric_for("binary", "log_loss").higher_is_better is False and metric_for("binary").key == "accuracy"
    assert metric_for("multilabel", "accuracy").key == "macro_auc" and metric_for("regression").key == "balanced_mse"
    with pytest.raises(ValueError, match="evaluation.metric: a regression task is scored by balanced_mse"):
        metric_for("regression", "log_loss")
    with pytest.raises(ValueError, match="evaluation.metric: a binary task"):
        metric_for("binary", "balanced_mse")
    with pytest.raises(ConfigError, match="evaluation.metric: expected accuracy"):
        parse_params({"models": {"MLP-S": {}}, "evaluation": {"metric": "f1"}})
    # checked against dataset.task when params.yaml is read, one line naming both
    with pytest.raises(ConfigError, match=r"^x.yaml: evaluation.metric: a multilabel task is scored by macro_auc, "
                                          r"not log_loss \(dataset.task\)$"):
        parse_params({"models": {"MLP-S": {}}, "dataset": {"task": "multilabel"},
                      "evaluation": {"metric": "log_loss"}}, "x.yaml")
    assert parse_params({"models": {"MLP-S": {}}, "evaluation": {"metric": "macro_auc"}}).extra["evaluation"]
