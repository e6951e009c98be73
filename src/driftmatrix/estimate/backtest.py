"""The drift matrix as a backtest of every estimator (pure: arrays in, arrays and numbers out).

Each future cell M[i, j > i] is estimated as it could have been at cutoff i, then compared with its
true value; :func:`estimate_cell` is the only place that decides what an estimate may see (tests
poison everything else). The method a user trusts for period t is chosen causally
(:func:`causal_choice`, lowest MAE over earlier periods); each method's own MAE is in hindsight."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from driftmatrix.estimate.cells import CellStats, pooled
from driftmatrix.estimate.domain import SliceInputs, WeightCache
from driftmatrix.estimate.methods import CAP_SLACK, METHODS, SHIFT_ALPHA, Estimate, estimate_all, total_variation
from driftmatrix.config import METRICS as METRICS_BY_KEY


@dataclass(frozen=True)
class ModelScores:
    """One model's seed-level cells (S, K, K), per-cell statistics, windows and slice input features."""

    model: str
    slices: Sequence[str]
    seeds: Sequence[int]
    values: np.ndarray
    n_eval: np.ndarray
    stats: Sequence[Sequence[Sequence[CellStats | None]]]
    windows: Sequence[Sequence[int]]
    higher_is_better: bool = True
    metric: str = "accuracy"
    family: str | None = None
    inputs: SliceInputs | None = None

    @property
    def K(self) -> int:
        return len(self.slices)


def history(ms: ModelScores, i: int) -> ModelScores:
    """What is known at cutoff i: rows and columns 0..i of every seed, nothing later."""
    k = i + 1
    return replace(ms, slices=list(ms.slices[:k]), values=ms.values[:, :k, :k].copy(),
                   n_eval=ms.n_eval[:, :k, :k].copy(),
                   stats=[[list(row[:k]) for row in seed[:k]] for seed in ms.stats], windows=list(ms.windows[:k]),
                   inputs=None if ms.inputs is None else ms.inputs.upto(i))


def reference_stats(known: ModelScores, s: int, i: int, t: int) -> CellStats | None:
    """The labelled rows an estimate starts from: when t = i the unit's held-out rows (its test-split
    cells of the slices in its window), else its cell of period t."""
    if t != i:
        return known.stats[s][i][t]
    return pooled(known.stats[s][i][c] for c in known.windows[i] if c < known.K)


def held_out_weights(known: ModelScores, i: int, target_x: np.ndarray | None, period,
                     cache: WeightCache | None = None) -> np.ndarray | None:
    """Importance weights of cutoff i's held-out rows towards ``target_x``; None without inputs."""
    if known.inputs is None or target_x is None or len(target_x) == 0:
        return None
    source_x = known.inputs.held_out(known.windows[i])
    if len(source_x) == 0:
        return None
    return (cache if cache is not None else WeightCache()).get(known.windows[i], period, source_x, target_x)[0]


#: Where an estimate of M[i, j] starts from. ``window``: as at cutoff i, from the unit's held-out
#: rows and M[i, i] (the issue's backtest); ``previous``: one period ahead, from the unit's labelled
#: cell of period j - 1 and M[i, j - 1] (a deployed model whose latest period has its labels).
REFERENCES = ("window", "previous")


def latest_labelled(i: int, j: int, reference: str) -> int:
    """The latest period whose labels an estimate of M[i, j] may read."""
    if reference not in REFERENCES:
        raise ValueError(f"reference {reference!r}: one of {', '.join(REFERENCES)}")
    return i if reference == "window" else j - 1


def estimate_from_history(known: ModelScores, s: int, i: int, lag: int, target: CellStats | None,
                          min_ess: float = 30.0, methods=METHODS, shift_threshold: float = 0.1,
                          cap_slack: float = CAP_SLACK, target_x: np.ndarray | None = None, period="new",
                          cache: WeightCache | None = None, latest: int | None = None,
                          source: CellStats | None = None) -> dict[str, Estimate]:
    """Every method's estimate for the seed-s model of cutoff i, ``lag`` periods after the latest
    labelled period ``latest``. The reference is the held-out rows and M[i, i] when t = i, else
    the labelled cell of period t (no ``IW-inputs`` then: only held-out cells keep each row's
    correctness)."""
    t = i if latest is None else latest
    confidence = known.metric == "accuracy"
    bounded = (0.0, 100.0) if getattr(METRICS_BY_KEY.get(known.metric), "unit", "") == "%" else None
    source = (source or reference_stats(known, s, i, t)) if confidence else None
    weights = (held_out_weights(known, i, target_x, period, cache)
               if confidence and t == i and "IW-inputs" in methods else None)
    return estimate_all(float(known.values[s, i, t]), known.values, lag, source, target if confidence else None,
                        known.higher_is_better, min_ess, methods, bounded, shift_threshold, cap_slack,
                        start=t - i, weights=weights)


def estimate_cell(ms: ModelScores, s: int, i: int, j: int, min_ess: float = 30.0, methods=METHODS,
                  shift_threshold: float = 0.1, cap_slack: float = CAP_SLACK, cache: WeightCache | None = None,
                  reference: str = "window") -> dict[str, Estimate]:
    """Cell (i, j > i) of seed s estimated as at the latest period ``reference`` allows."""
    if j <= i:
        raise ValueError(f"cell ({i}, {j}) is not in the future of cutoff {i}")
    t = latest_labelled(i, j, reference)
    target = ms.stats[s][i][j]
    target_x = None if ms.inputs is None or j >= len(ms.inputs.x) else ms.inputs.x[j]
    return estimate_from_history(history(ms, t), s, i, j - t, None if target is None else target.unlabelled(),
                                 min_ess, methods, shift_threshold, cap_slack, target_x, j, cache, latest=t)


def binomial_noise(p: float, n: int) -> float:
    """E|X/n - p| for X ~ Binomial(n, p): what a perfect estimator of p still misses a cell
    scored on n rows by (exact up to 20,000 rows, the normal limit beyond)."""
    if not (n > 0 and 0 <= p <= 1):  # NaN n or p: unknown
        return float("nan")
    if n > 20_000:
        return math.sqrt(2 * p * (1 - p) / (math.pi * n))
    if p in (0.0, 1.0):
        return 0.0
    x = np.arange(n + 1)
    k = np.arange(1, n + 1)
    log_choose = np.r_[0.0, np.cumsum(np.log(n - k + 1) - np.log(k))]  # log C(n, x), no scipy import
    log_pmf = log_choose + x * math.log(p) + (n - x) * math.log1p(-p)
    return float((np.exp(log_pmf) * np.abs(x / n - p)).sum())


@dataclass
class Backtest:
    """Each method's (S, K, K) estimates, the truth, per-cell flags and label shift, the summary."""

    model: str
    truth: np.ndarray
    estimates: dict[str, np.ndarray]
    lo: dict[str, np.ndarray]
    hi: dict[str, np.ndarray]
    noise: np.ndarray  # per-cell binomial noise (accuracy only; NaN otherwise)
    label_shift: np.ndarray  # measured TV between the cell's labels and the reference's labels
    estimated_shift: np.ndarray  # BBSE's TV from predictions where they moved significantly (else 0)
    low_ess: dict[str, np.ndarray]  # per IW method, its low-ESS flag per cell
    summary: dict[str, Any] = field(default_factory=dict)
    causal: np.ndarray | None = None  # (S, K, K): each cell by the method chosen for its period
    chosen: list[str] = field(default_factory=list)  # per period t, that method (then: the next period's)
    flag_taus: list[float] = field(default_factory=list)  # per period t = 0..K, BBSE's calibrated flag threshold

    @property
    def flagged(self) -> np.ndarray:
        """(S, K, K): the future cells of each period t whose BBSE shift exceeds t's threshold."""
        return future_cells(self.truth) & (self.estimated_shift > np.asarray(self.flag_taus[:-1]))

    def error(self, method: str) -> np.ndarray:
        return np.abs(self.estimates[method] - self.truth)


#: Methods whose weights have an effective sample size (``low_ess`` flag).
ESS_METHODS = ("IW", "IW-inputs")


def run(ms: ModelScores, min_ess: float = 30.0, shift_threshold: float = 0.1, methods=METHODS,
        cap_slack: float = CAP_SLACK, cache: WeightCache | None = None, reference: str = "window") -> Backtest:
    """Estimate every future cell of every seed (one history per latest labelled period) and summarise."""
    S, K = ms.values.shape[0], ms.K
    blank = lambda: np.full((S, K, K), np.nan)  # noqa: E731
    est, lo, hi = ({m: blank() for m in methods} for _ in range(3))
    noise, shift, est_shift = blank(), blank(), blank()
    low_ess = {m: blank() for m in ESS_METHODS}
    cache = cache if cache is not None else WeightCache()
    histories: dict[int, ModelScores] = {}
    sources: dict[tuple[int, int, int], CellStats | None] = {}
    for s in range(S):
        for i in range(K):
            if not np.isfinite(ms.values[s, i, i]):
                continue
            for j in range(i + 1, K):
                if not np.isfinite(ms.values[s, i, j]):
                    continue
                t = latest_labelled(i, j, reference)
                known = histories.setdefault(t, history(ms, t))
                if (s, i, t) not in sources:
                    sources[s, i, t] = reference_stats(known, s, i, t)
                source, target = sources[s, i, t], ms.stats[s][i][j]
                target_x = None if ms.inputs is None or j >= len(ms.inputs.x) else ms.inputs.x[j]
                got = estimate_from_history(known, s, i, j - t, None if target is None else target.unlabelled(),
                                            min_ess, methods, shift_threshold, cap_slack, target_x, j, cache,
                                            latest=t, source=source)
                for name, e in got.items():
                    est[name][s, i, j] = e.value
                    if e.lo is not None:
                        lo[name][s, i, j], hi[name][s, i, j] = e.lo, e.hi
                    if name == "BBSE":
                        est_shift[s, i, j] = e.flags["label_shift_tv"] * (e.flags["label_shift_p"] < SHIFT_ALPHA)
                    if name in low_ess:
                        low_ess[name][s, i, j] = float(e.flags["low_ess"])
                if ms.metric == "accuracy":
                    n = ms.n_eval[s, i, j]
                    noise[s, i, j] = 100 * binomial_noise(ms.values[s, i, j] / 100, int(n)) if n > 0 else np.nan
                if source is not None and target is not None and source.labelled and target.labelled:
                    p = source.label_counts / max(source.n, 1)
                    shift[s, i, j] = total_variation(p, target.label_counts / max(target.n, 1))
    bt = Backtest(ms.model, ms.values, est, lo, hi, noise, shift, est_shift, low_ess)
    bt.chosen, bt.causal = causal_choice(est, ms.values)
    calibrate_flags([bt], shift_threshold)
    bt.summary = {**summarize(bt, ms, shift_threshold), "cap_slack": cap_slack, "reference": reference}
    return bt


def future_cells(truth: np.ndarray) -> np.ndarray:
    """(S, K, K) bool: the scored cells j > i."""
    return np.isfinite(truth) & np.triu(np.ones(truth.shape[-2:], dtype=bool), 1)


def causal_choice(estimates: dict[str, np.ndarray], truth: np.ndarray) -> tuple[list[str], np.ndarray]:
    """Per period t = 0..K, the method a user could trust before t's labels: the lowest MAE over the
    future cells of periods < t among methods that estimate all of them (else carry-forward);
    returns those names and the (S, K, K) estimates they give."""
    names = list(estimates)
    err = np.stack([np.abs(estimates[m] - truth) for m in names])
    future = future_cells(truth)
    chosen, out = [], np.full(truth.shape, np.nan)
    for t in range(truth.shape[-1] + 1):
        seen = err[:, future & (np.arange(truth.shape[-1]) < t)]  # (methods, cells of periods < t)
        mae = np.where(np.isfinite(seen).all(axis=1), seen.mean(axis=1), np.inf) if seen.shape[1] else [0.0]
        chosen.append(names[int(np.argmin(mae))])
        if t < truth.shape[-1]:
            out[..., t] = np.where(np.isnan(estimates[chosen[-1]][..., t]), estimates[names[0]][..., t],
                                   estimates[chosen[-1]][..., t])
    return chosen, np.where(future, out, np.nan)


def flag_threshold(estimated: np.ndarray, measured: np.ndarray, cells: np.ndarray, threshold: float) -> float:
    """BBSE's flag calibrated on labelled cells: the smallest estimated shift (at least
    ``threshold``) above which no cell without a measured label shift would have been flagged."""
    calm = cells & np.isfinite(measured) & np.isfinite(estimated) & (measured <= threshold)
    return max(threshold, float(estimated[calm].max()) if calm.any() else threshold)


def calibrate_flags(bts: Sequence[Backtest], threshold: float) -> None:
    """Set each backtest's ``flag_taus`` from the earlier periods of all of ``bts`` (the models of
    one dataset share labels, so a shift reported for any of them without one is a false alarm)."""
    est, measured, future = (np.concatenate([f(bt) for bt in bts]) for f in (
        lambda b: b.estimated_shift, lambda b: b.label_shift, lambda b: future_cells(b.truth)))
    cols = np.arange(future.shape[-1])
    taus = [flag_threshold(est, measured, future & (cols < t), threshold) for t in range(future.shape[-1] + 1)]
    for bt in bts:
        bt.flag_taus = taus


def _mae(err: np.ndarray, mask: np.ndarray) -> float | None:
    sel = err[mask & np.isfinite(err)]
    return round(float(sel.mean()), 4) if sel.size else None


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank."""
    _, which, ties = np.unique(x, return_inverse=True, return_counts=True)
    return (np.cumsum(ties) - (ties - 1) / 2.0)[which]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation (Pearson's on the tie-averaged ranks)."""
    x, y = _ranks(np.asarray(a)), _ranks(np.asarray(b))
    x, y = x - x.mean(), y - y.mean()
    return float(x @ y / np.sqrt((x @ x) * (y @ y)))


def column_rho(est: np.ndarray, truth: np.ndarray) -> dict[int, float]:
    """Spearman's rho of estimated vs true ranking of the cutoff models per column, mean over seeds."""
    out = {}
    K = truth.shape[-1]
    for j in range(3, K):
        rhos = []
        for s in range(truth.shape[0]):
            a, b = est[s, :j, j], truth[s, :j, j]
            ok = np.isfinite(a) & np.isfinite(b)
            if ok.sum() >= 3 and np.ptp(a[ok]) > 0 and np.ptp(b[ok]) > 0:
                rhos.append(spearman(a[ok], b[ok]))
        if rhos:
            out[j] = float(np.mean(rhos))
    return out


def summarize(bt: Backtest, ms: ModelScores, shift_threshold: float) -> dict[str, Any]:
    """``{"noise_floor", "noise_floor_by_seed", "n_future_cells", "causal_mae", "chosen_methods",
    "trusted_method", label-shift flag counts, method: {mae, bias, n_cells, coverage, rho, mae_by_seed,
    mae_label_shift, mae_no_label_shift, ...}, "hindsight_method"}``."""
    future = future_cells(bt.truth)
    big = future & (bt.label_shift > shift_threshold)
    flagged = future & bt.flagged
    causal_err = np.abs(bt.causal - bt.truth)
    floor = bt.noise[future]
    out: dict[str, Any] = {
        "noise_floor": round(float(np.nanmean(floor)), 4) if np.isfinite(floor).any() else None,
        "noise_floor_by_seed": {str(seed): (round(float(np.nanmean(bt.noise[s][future[s]])), 4)
                                            if np.isfinite(bt.noise[s][future[s]]).any() else None)
                                for s, seed in enumerate(ms.seeds)},
        "n_future_cells": int(future.sum()), "n_label_shift_cells": int(big.sum()),
        "n_flagged_shift_cells": int(flagged.sum()), "n_flagged_with_label_shift": int((flagged & big).sum()),
        "n_flagged_uncalibrated": int((future & (bt.estimated_shift > shift_threshold)).sum()),
        "label_shift_flag_threshold": round(bt.flag_taus[-1], 4),
        "label_shift_threshold": shift_threshold, "metric": ms.metric,
        "causal_mae": _mae(causal_err, future),
        "causal_mae_by_seed": {str(seed): _mae(causal_err[s], future[s]) for s, seed in enumerate(ms.seeds)},
        "chosen_methods": {ms.slices[t]: bt.chosen[t] for t in range(1, ms.K)}, "trusted_method": bt.chosen[-1]}
    for name, e in bt.estimates.items():
        err, have = np.abs(e - bt.truth), future & np.isfinite(e)
        if not have.any():
            continue
        rec = {"mae": _mae(err, have), "bias": round(float((e - bt.truth)[have].mean()), 4),
               "n_cells": int(have.sum()),
               "mae_by_seed": {str(seed): _mae(err[s], have[s]) for s, seed in enumerate(ms.seeds)},
               "mae_label_shift": _mae(err, have & big), "mae_no_label_shift": _mae(err, have & ~big),
               "mae_flagged_shift": _mae(err, have & flagged), "mae_unflagged": _mae(err, have & ~flagged)}
        with_interval = have & np.isfinite(bt.lo[name])
        if with_interval.any():
            inside = (bt.truth >= bt.lo[name]) & (bt.truth <= bt.hi[name])
            rec["coverage"] = round(float(inside[with_interval].mean()), 4)
            rec["n_intervals"] = int(with_interval.sum())
        rho = column_rho(np.where(have, e, np.nan), bt.truth)
        rec["rho"] = round(float(np.mean(list(rho.values()))), 4) if rho else None
        rec["rho_by_column"] = {ms.slices[j]: round(r, 4) for j, r in rho.items()}
        if name in bt.low_ess:
            rec["low_ess_share"] = round(float(np.nanmean(bt.low_ess[name][have])), 4)
        out[name] = rec
    full = [m for m in bt.estimates if m in out and out[m]["n_cells"] == out["n_future_cells"]]
    if full:
        out["hindsight_method"] = min(full, key=lambda m: out[m]["mae"])
    return out
