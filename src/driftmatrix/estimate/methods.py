"""Label-free estimators of a model's score on a period whose labels have not arrived (pure).

Each function sees only what is known when the estimate is made: the drift matrix up to the model's
cutoff, the model's statistics on its own held-out rows and on the new period without labels. Scores
are in the metric's unit; intervals are central 90% intervals, or None. Methods: carry-forward (M[i,
i], the baseline to beat), trend (minus the mean decay seen at that lag), AC (average confidence),
DoC (Guillory et al. 2021), ATC (Garg et al. 2022), IW (domain classifier on the model's outputs),
IW-inputs (on the inputs, ``estimate.domain``) and BBSE (Lipton et al. 2018: the accuracy if only
the labels moved)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from driftmatrix.estimate.cells import CellStats

#: The methods before the class-balance cap, in the order tables list them.
BASE_METHODS = ("carry-forward", "trend", "AC", "DoC", "ATC", "IW", "IW-inputs", "BBSE")
#: Methods whose estimate is also given capped by :func:`class_balance_cap` ("<method>+cap").
CAPPED = ("carry-forward", "trend", "AC", "DoC", "ATC", "IW")
#: Every method, in the order tables list them.
METHODS = BASE_METHODS + tuple(f"{m}+cap" for m in CAPPED)
#: Methods that need the model's outputs on the new period (classification, accuracy).
CONFIDENCE_METHODS = ("AC", "DoC", "ATC", "IW", "IW-inputs", "BBSE") + tuple(f"{m}+cap" for m in CAPPED)
#: Slack of the class-balance cap, in standard errors of the new period's label shares
#: (``estimate.cap_slack``): chosen on a second draw of the built-in data, not on the default's
#: backtest (``bench/cap_slack.py``, docs/estimates.md).
CAP_SLACK = 1.0
#: Methods that read nothing but the drift matrix (any metric).
MATRIX_METHODS = ("carry-forward", "trend")
Z = 1.645  # central 90%


@dataclass(frozen=True)
class Estimate:
    value: float
    lo: float | None = None
    hi: float | None = None
    flags: dict = field(default_factory=dict)

    def interval(self, sd: float) -> "Estimate":
        return Estimate(self.value, self.value - Z * sd, self.value + Z * sd, self.flags)


def _pct(x: float) -> float:
    return 100.0 * x


def carry_forward(m_ref: float) -> Estimate:
    """The score on the new period is the reference's: M[i, i] as at cutoff i."""
    return Estimate(float(m_ref))


def lag_decays(values: np.ndarray, lag: int, start: int = 0) -> np.ndarray:
    """Every change M[r, r + start] - M[r, r + start + lag] in a (S, k, k) stack of known cells."""
    k = values.shape[-1]
    if lag < 1 or start < 0 or start + lag >= k:
        return np.zeros(0)
    r = np.arange(k - start - lag)
    d = (values[:, r, r + start] - values[:, r, r + start + lag]).ravel()
    return d[np.isfinite(d)]


def trend(known: np.ndarray, m_ref: float, lag: int, higher_is_better: bool = True, start: int = 0) -> Estimate:
    """The reference score minus the mean decay over ``lag`` more periods seen in ``known`` (the (S,
    t+1, t+1) matrices up to the latest labelled period t); ``start``: the reference's own lag.

    A lag longer than any seen takes the longest seen lag's decay: a line through the origin fitted
    to the early, fast-decaying rows overshot by tens of points on the default."""
    d = lag_decays(known, lag, start)
    if len(d):
        est = Estimate(float(m_ref - d.mean()))
        return est.interval(float(d.std(ddof=1))) if len(d) > 2 else est
    for longest in range(min(lag, known.shape[-1] - start) - 1, 0, -1):
        d = lag_decays(known, longest, start)
        if len(d):
            return Estimate(float(m_ref - d.mean()), flags={"extrapolated_from_lag": longest})
    return Estimate(float(m_ref), flags={"extrapolated_from_lag": 0})


def clipped(est: Estimate, low: float, high: float) -> Estimate:
    """An estimate (and its interval) moved into the metric's range."""
    c = lambda v: None if v is None else float(min(max(v, low), high))  # noqa: E731
    return Estimate(c(est.value), c(est.lo), c(est.hi), est.flags)


def average_confidence(target: CellStats) -> Estimate:
    """Mean max probability. Unbiased for a calibrated model, and then the true accuracy of the
    period is a sum of independent Bernoullis: its interval is the Poisson-binomial one."""
    n = max(target.n, 1)
    return Estimate(_pct(target.conf_sum / n)).interval(_pct(math.sqrt(target.conf_var) / n))


def difference_of_confidences(source: CellStats, target: CellStats) -> Estimate:
    """Held-out accuracy shifted by the change in average confidence."""
    return Estimate(_pct(source.accuracy + target.mean_conf - source.mean_conf))


def _above(counts: np.ndarray, t: float) -> float:
    """Rows of a histogram over bins 0..B-1 at or above position ``t``, rows spread evenly inside a bin."""
    k = int(min(max(math.floor(t), 0), len(counts)))
    full = counts[k + 1:].sum() if k < len(counts) else 0.0
    part = counts[k] * (1.0 - (t - k)) if k < len(counts) else 0.0
    return float(full + part)


def atc_threshold(source: CellStats) -> float:
    """Confidence-bin position t where the share of held-out rows at or above t equals the held-out
    accuracy (exact, not searched; the lowest where a range fits)."""
    counts = source.counts.sum(axis=0)
    want = source.accuracy * counts.sum()
    tail = np.r_[np.cumsum(counts[::-1])[::-1], 0.0]  # tail[k] = rows in bins k.. (tail[B] = 0)
    if want <= 0:
        return float(len(counts))
    k = int(np.flatnonzero(tail[:-1] >= want)[-1])
    if want >= tail[k] - 1e-9:  # t = k fits, and so does everything down to the next rows below
        below = np.flatnonzero(counts[:k])
        return float(below[-1] + 1) if len(below) else 0.0
    return k + 1.0 - (want - tail[k + 1]) / counts[k]


def average_thresholded_confidence(source: CellStats, target: CellStats) -> Estimate:
    """The share of the period's rows above the held-out threshold (:func:`atc_threshold`)."""
    t = atc_threshold(source)
    counts = target.counts.sum(axis=0)
    return Estimate(_pct(_above(counts, t) / max(counts.sum(), 1)), flags={"threshold_bin": round(t, 3)})


def confidence_groups(counts: np.ndarray, per_group: int, max_groups: int = 10) -> np.ndarray:
    """Bin -> group of a class's held-out confidence histogram: runs of about ``per_group`` rows."""
    total = counts.sum()
    groups = int(max(1, min(max_groups, total // max(per_group, 1))))
    cum = np.cumsum(counts) / max(total, 1)
    return np.minimum((cum * groups - 1e-9).clip(min=0).astype(int), groups - 1) if total else \
        np.zeros(len(counts), dtype=int)


def importance_weighted(source: CellStats, target: CellStats, per_group: int = 20,
                        min_ess: float = 30.0) -> Estimate:
    """Held-out accuracy with each row weighted by p_target(g) / p_source(g) of its group g
    (predicted class x confidence group); per-group accuracy is shrunk towards the held-out
    accuracy by one row, so an almost empty group does not swing the estimate. ``flags``:
    ``ess``, ``low_ess`` and ``outside_support`` (rows no weight can reach)."""
    n_s, n_t = max(source.n, 1), max(target.n, 1)
    acc = source.accuracy
    est, var_est, var_tgt, w_sum, w2_sum, outside = 0.0, 0.0, 0.0, 0.0, 0.0, 0.0
    for c in range(source.n_classes):
        seen = np.flatnonzero(source.counts[c])
        span = np.zeros(source.counts.shape[1], dtype=bool)
        if len(seen):
            span[seen[0]:seen[-1] + 1] = True
        outside += float(target.counts[c][~span].sum())
        g = confidence_groups(source.counts[c], per_group)
        k = g.max() + 1
        src = np.bincount(g, weights=source.counts[c], minlength=k)
        right = np.bincount(g, weights=source.correct[c], minlength=k)
        tgt = np.bincount(g, weights=target.counts[c], minlength=k)
        a = (right + acc) / (src + 1.0)
        share = tgt / n_t
        est += float((share * a).sum())
        var_est += float((share ** 2 * a * (1 - a) / (src + 1.0)).sum())
        var_tgt += float((tgt * a * (1 - a)).sum()) / n_t ** 2
        has = src > 0
        w = np.where(has, share / np.maximum(src / n_s, 1e-12), 0.0)
        w_sum += float((src * w).sum())
        w2_sum += float((src * w * w).sum())
    ess = w_sum ** 2 / w2_sum if w2_sum > 0 else 0.0
    flags = {"ess": round(ess, 1), "low_ess": bool(ess < min_ess), "outside_support": round(outside / n_t, 4)}
    return Estimate(_pct(est), flags=flags).interval(_pct(math.sqrt(var_est + var_tgt)))


def importance_weighted_inputs(right: np.ndarray, weights: np.ndarray, n_target: int,
                               min_ess: float = 30.0) -> Estimate:
    """Held-out correctness weighted row by row by input-space importance ``weights``
    (``domain.domain_weights``).

    The variance is p (1 - p) / ESS with p moved by one pseudo-row, so a unit right on every
    held-out row still gets an interval; it ignores the error of the weights themselves."""
    from driftmatrix.estimate.domain import coverage, ess

    r, w = np.asarray(right, dtype=float), np.asarray(weights, dtype=float)
    total = float(w.sum())
    if len(r) != len(w) or total <= 0:
        raise ValueError(f"{len(r)} held-out rows, {len(w)} weights (sum {total})")
    p = float((w * r).sum() / total)
    n_eff = max(ess(w), 1e-9)
    q = (p * n_eff + 1.0) / (n_eff + 2.0)
    sd = math.sqrt(q * (1 - q) / max(n_eff, 1.0) + q * (1 - q) / max(n_target, 1))
    return Estimate(_pct(p), flags={"ess": round(n_eff, 1), "coverage": round(coverage(w), 4),
                                    "low_ess": bool(n_eff < min_ess)}).interval(_pct(sd))


def label_shift(source: CellStats, target: CellStats) -> tuple[np.ndarray, np.ndarray]:
    """Black-box shift estimate: (source label distribution, estimated target label distribution),
    solving C^T w = predicted-class distribution for w = q / p by least squares, clipped at 0."""
    joint = source.confusion / max(source.confusion.sum(), 1)
    p = joint.sum(axis=1)
    mu = target.pred / max(target.n, 1)
    w, *_ = np.linalg.lstsq(joint.T, mu, rcond=None)
    q = np.clip(w, 0, None) * p
    q = q / q.sum() if q.sum() > 0 else p
    return p, q


def total_variation(p: np.ndarray, q: np.ndarray) -> float:
    return float(0.5 * np.abs(np.asarray(p) - np.asarray(q)).sum())


#: Significance level of the test that the predicted-class distribution moved at all.
SHIFT_ALPHA = 0.01


def predictions_moved(source: CellStats, target: CellStats) -> float:
    """p-value of a chi-square test that the period's predicted classes are distributed as the
    held-out rows': only a move this test cannot explain by chance is called a label shift."""
    table = np.vstack([source.pred, target.pred]).astype(float)
    table = table[:, table.sum(axis=0) > 0]
    if table.shape[1] < 2 or (table.sum(axis=1) == 0).any():
        return 1.0
    expected = np.outer(table.sum(axis=1), table.sum(axis=0)) / table.sum()
    stat = float(((table - expected) ** 2 / expected).sum())
    if table.shape[1] == 2:
        return math.erfc(math.sqrt(stat / 2))
    from scipy.special import chdtrc

    return float(chdtrc(table.shape[1] - 1, stat))


def bbse(source: CellStats, target: CellStats, threshold: float = 0.1) -> Estimate:
    """The accuracy the period has if only its labels moved: estimated label shares times the
    held-out recall of each class; ``flags`` name a shift larger than ``threshold`` and
    significant at :data:`SHIFT_ALPHA`."""
    p, q = label_shift(source, target)
    rows = source.confusion.sum(axis=1)
    recall = np.where(rows > 0, np.diag(source.confusion) / np.maximum(rows, 1), source.accuracy)
    tv, pval = total_variation(p, q), predictions_moved(source, target)
    return Estimate(_pct(float((q * recall).sum())), flags={
        "label_shift_tv": round(tv, 4), "label_shift_p": round(pval, 6),
        "label_shift": bool(tv > threshold and pval < SHIFT_ALPHA), "label_dist": [round(float(v), 4) for v in q]})


def class_balance_cap(source: CellStats, target: CellStats, slack: float = CAP_SLACK) -> float:
    """The most accuracy the period's predicted classes allow if its labels are distributed as the
    held-out rows' (in percent), with ``slack`` standard errors for the period's own sampling: a
    model that puts 90% of a balanced period into one class is right on at most about 60% of it."""
    q = source.label_counts / max(source.n, 1)
    pi = target.pred / max(target.n, 1)
    room = q + slack * np.sqrt(q * (1 - q) / max(target.n, 1))
    return _pct(min(1.0, float(np.minimum(pi, room).sum())))


def estimate_all(m_ref: float, known: np.ndarray, lag: int, source: CellStats | None,
                 target: CellStats | None, higher_is_better: bool = True, min_ess: float = 30.0,
                 methods=METHODS, value_range: tuple[float, float] | None = None,
                 shift_threshold: float = 0.1, cap_slack: float = CAP_SLACK, start: int = 0,
                 weights: np.ndarray | None = None) -> dict[str, Estimate]:
    """Every method that applies: the matrix methods always, the confidence methods where ``source``
    and ``target`` have statistics, ``IW-inputs`` where ``weights`` are given. ``m_ref``: the
    reference's score; ``lag``: periods from the reference to the estimated one."""
    if target is not None and target.labelled:
        raise ValueError("the new period's statistics must come without labels (CellStats.unlabelled)")
    out = {}
    if "carry-forward" in methods:
        out["carry-forward"] = carry_forward(m_ref)
    if "trend" in methods:
        out["trend"] = trend(known, m_ref, lag, higher_is_better, start)
        if value_range is not None:
            out["trend"] = clipped(out["trend"], *value_range)
    if source is None or target is None or source.n == 0 or target.n == 0:
        return out
    fns = {"AC": lambda: average_confidence(target), "DoC": lambda: difference_of_confidences(source, target),
           "ATC": lambda: average_thresholded_confidence(source, target),
           "IW": lambda: importance_weighted(source, target, min_ess=min_ess),
           "BBSE": lambda: bbse(source, target, shift_threshold)}
    for name, fn in fns.items():
        if name in methods:
            out[name] = fn()
    if "IW-inputs" in methods and weights is not None and source.right is not None \
            and len(weights) == len(source.right) and float(np.sum(weights)) > 0:
        out["IW-inputs"] = importance_weighted_inputs(source.right, weights, target.n, min_ess)
    if any(f"{m}+cap" in methods for m in CAPPED):
        cap = class_balance_cap(source, target, cap_slack)
        for m in CAPPED:
            if f"{m}+cap" in methods and m in out:
                e = clipped(out[m], 0.0, cap)
                out[f"{m}+cap"] = Estimate(e.value, e.lo, e.hi, {**e.flags, "cap": round(cap, 3)})
    return out
