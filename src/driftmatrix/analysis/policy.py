"""Retraining policies replayed on drift matrices, against the hindsight optimum (the Cara threshold,
cumulative-threshold and periodic policies and the Oracle DP of Mahadevan and Mathioudakis,
"Cost-Effective Retraining of Machine Learning Models", 2024). Conventions (docs/results.md):

- Periods 0..K-1; M[i, j] is the score on period j of the model trained on labels up to period i.
- A policy decides at the end of period t whether to retrain for period t + 1; with a label delay
  of d its labels end at t - d, so it trains row t - d. Row 0 is trained at the end of period d:
  periods d+1..K-1 are served. A schedule is the sorted list of rows trained, starting at 0.
- Period j is served by the schedule's latest row r <= j-1-d and scores M[r, j] (lag 0 is never
  served). A seed's score is the mean over the served periods, NaN cells left out (replay and DP).
- Retrains are trainings after the first. Scores, retrains and seconds are per seed, then mean and
  std (ddof=1) over seeds.
- Triggers see the arrays only through ``Known`` views that raise ``FutureRead`` on any cell not
  known at decision time; their threshold tau is chosen causally (``nested``).
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import numpy as np

from driftmatrix.analysis._nan import nanmean, nanstd

POLICIES = ("never", "periodic", "oracle", "estimate", "cumulative", "label", "drift")
CSV_FIELDS = ("model", "policy", "param", "label_delay", "retrains", "score", "std")
NESTED = "nested"  # ``param`` of a trigger whose tau is chosen causally at every decision


def served(schedule: Sequence[int], K: int, d: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(rows, periods) of the cells a schedule serves: period j = d+1..K-1 by its latest row
    r <= j-1-d."""
    periods = np.arange(d + 1, K)
    if not periods.size:
        return periods, periods
    sched = np.asarray(sorted(schedule), dtype=int)
    if not sched.size or sched[0] != 0:
        raise ValueError(f"a schedule starts with row 0, got {list(schedule)}")
    return sched[np.searchsorted(sched, periods - d) - 1], periods


def score(M: np.ndarray, schedule: Sequence[int], d: int = 0) -> float:
    """Mean served score of one seed's K x K matrix (NaN when nothing is served or filled)."""
    rows, periods = served(schedule, M.shape[-1], d)
    return nanmean(M[rows, periods])


def periodic(K: int, H: int, d: int = 0) -> list[int]:
    """Rows 0, H, 2H, ... that serve something: period j is served by ((j-1-d) // H) * H."""
    if H < 1:
        raise ValueError("H must be >= 1")
    return list(range(0, max(K - 1 - d, 0), H))


def periodic_scores(stack: np.ndarray, H: int, d: int = 0) -> np.ndarray:
    """Per seed, the served score of retraining every H periods (H = 1: the mean of M[j-1, j])."""
    return np.array([score(M, periodic(M.shape[-1], H, d), d) for M in stack])


def oracle(A: np.ndarray, d: int = 0) -> list[tuple[float, list[int]]]:
    """For every budget k = 0..K-2-d, the schedule with the highest mean served score of A (higher
    is better) using at most k retrains, by dynamic programming; ties go to fewer retrains.

    best[r, k, c]: the largest sum over the periods served before row r when r is the k-th
    retrain and c filled cells were summed; the mean of a finished schedule is sum / c, so NaN
    cells are skipped exactly as ``score`` skips them."""
    K = A.shape[-1]
    R = K - 1 - d  # candidate rows 0..R-1; served periods d+1..K-1 (R of them)
    if R < 1:
        return []
    filled = ~np.isnan(A[:R, d + 1:])
    sums = np.concatenate([np.zeros((R, 1)), np.cumsum(np.where(filled, A[:R, d + 1:], 0.0), 1)], 1)
    counts = np.concatenate([np.zeros((R, 1), int), np.cumsum(filled, 1)], 1)  # [r, q]: periods d+1..d+q
    best = np.full((R + 1, R, R + 1), -np.inf)  # row index R: the end of the schedule
    prev = np.full(best.shape, -1)
    best[0, 0, 0] = 0.0
    for q in range(1, R + 1):
        shift = int(q < R)  # reaching a real row costs a retrain; reaching the end does not
        for r in range(q):
            s, n = sums[r, q] - sums[r, r], counts[r, q] - counts[r, r]
            cand = best[r, :r + 1, :r + 1] + s  # row r is at most the r-th retrain, after <= r cells
            dst, arg = (x[q, shift:shift + r + 1, n:n + r + 1] for x in (best, prev))
            better = cand > dst
            dst[better], arg[better] = cand[better], r
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(np.arange(R + 1) > 0, best[R] / np.arange(R + 1), -np.inf)
    out: list[tuple[float, list[int]]] = []
    for k in range(R):
        c = int(np.argmax(means[k]))
        value = float(means[k, c]) if np.isfinite(means[k, c]) else math.nan
        if out and not value > out[-1][0] and not math.isnan(out[-1][0]):
            out.append(out[-1])  # a budget of k: never worse than k - 1
            continue
        sched, q, kk = [], R, k
        while q > 0:
            r = int(prev[q, kk, c])
            c, kk, q = c - int(counts[r, q] - counts[r, r]), kk - int(q < R), r
            sched.append(r)
        out.append((value, sched[::-1]))
    return out


# --- triggers: a signal per (deployed row r, decision time t); retrain when it exceeds tau -----
class FutureRead(LookupError):
    """A decision read a cell that was not known at its time: a leak."""


@dataclass(frozen=True)
class Known:
    """The cells of ``a`` known at one decision time: rows <= last_row, columns <= last_col."""
    a: np.ndarray | None
    last_row: int
    last_col: int
    name: str

    def __getitem__(self, ij: tuple[int, int]) -> float:
        i, j = ij
        if self.a is None:
            raise ValueError(f"this policy needs {self.name}")
        if not (0 <= i <= self.last_row and 0 <= j <= self.last_col):
            raise FutureRead(f"{self.name}[{i}, {j}] is not known yet "
                             f"(rows <= {self.last_row}, columns <= {self.last_col})")
        return float(self.a[i, j])


def known(t: int, d: int, M, E=None, D=None) -> dict[str, Known]:
    """What the end of period t reveals: labelled scores of rows and periods up to t-d, label-free
    estimates of those rows on inputs up to t, drift of any window up to t against periods <= t."""
    return {"M": Known(M, t - d, t - d, "labelled scores M"), "E": Known(E, t - d, t, "estimates E"),
            "D": Known(D, t, t, "drift statistics D")}


def _label(v, r, t, d):  # drop of the deployed model's newest labelled score below its own M[r, r]
    return v["M"][r, r] - v["M"][r, t - d]


def _estimate(v, r, t, d):  # estimated drop on the newest period (inputs only)
    return v["M"][r, r] - v["E"][r, t]


def _cumulative(v, r, t, d):  # estimated loss summed over the periods it served so far
    return float(np.nansum([v["M"][r, r] - v["E"][r, u] for u in range(r + d + 1, t + 1)]))


def _drift(v, r, t, d):  # drift between its training window (up to r) and the newest period
    return v["D"][r, t]


SIGNALS: dict[str, Callable] = {"estimate": _estimate, "cumulative": _cumulative, "label": _label,
                                "drift": _drift}
NEEDS = {"estimate": "E", "cumulative": "E", "label": "M", "drift": "D"}


def replay(signal: Callable, tau: float, K: int, d: int, arrays: tuple,
           taus: Sequence[float] | None = None, budget: float | None = None) -> list[int]:
    """Rows a trigger trains: at t = d+1..K-2 it retrains when ``signal`` > tau (NaN: no retrain),
    reading ``arrays`` = (M, E, D) only through ``known`` views; ``taus``: one tau per decision."""
    sched = [0] if K - 1 - d >= 1 else []
    for n, t in enumerate(range(d + 1, K - 1)):
        if budget is None or len(sched) - 1 < budget:
            if signal(known(t, d, *arrays), sched[-1], t, d) > (tau if taus is None else taus[n]):
                sched.append(t - d)
    return sched


def pick_best(scores, retrains, cost: float = 0.0, budget: float | None = None) -> int:
    """Index maximising score - cost * retrains (within ``budget`` retrains when given); ties and
    NaN go to fewer retrains, then to the earlier entry."""
    retrains = np.asarray(retrains, float)
    value = np.asarray(scores, float) - cost * retrains
    if budget is not None:
        value = np.where(retrains <= budget + 1e-9, value, -np.inf)
    value = np.where(np.isnan(value), -np.inf, value)
    return int(np.lexsort((retrains, -value))[0])


def nested(A: np.ndarray, fixed: Sequence[Sequence[int]], grid: Sequence[float], d: int,
           cost: float = 0.0, budget: float | None = None) -> list[float]:
    """The tau to use at each decision t = d+1..K-1 (the last: the one to use next), chosen on the
    periods already labelled (d+1..t-d) by each grid tau's own schedule ``fixed`` (causal, so its
    prefix is what a replay on the known past gives), maximising score - cost * retrains with the
    retrains projected to the whole history; +inf (no retrain) before any evidence."""
    K = A.shape[-1]
    N = K - 1 - d
    cells = np.stack([A[served(s, K, d)] for s in fixed])  # (taus, N)
    chosen = []
    for t in range(d + 1, K):
        n = t - 2 * d  # served periods labelled by the end of t
        if n < 1:
            chosen.append(math.inf)
            continue
        used = [sum(r <= t - 2 * d - 1 for r in s[1:]) * N / n for s in fixed]
        chosen.append(float(grid[pick_best(nanmean(cells[:, :n], axis=1), used, cost, budget)]))
    return chosen


def tau_grid(signal: Callable, K: int, d: int, arrays_per_seed: Sequence[tuple], n: int = 21) -> list[float]:
    """Candidate thresholds, largest (never retrains) first: n quantiles of the signal over every
    (deployed row, decision) pair, a discretisation of all thresholds (the choice is ``nested``)."""
    vals = [signal(known(t, d, *arrays), r, t, d) for arrays in arrays_per_seed
            for t in range(d + 1, K - 1) for r in range(t - d)]
    vals = np.asarray([v for v in vals if np.isfinite(v)])
    if not vals.size:
        return []
    return sorted(set(np.quantile(vals, np.linspace(0, 1, n)).round(6)) | {float(vals.min()) - 1.0}, reverse=True)


# --- one model, every policy --------------------------------------------------------------
@dataclass(frozen=True)
class Run:
    policy: str
    param: object  # H (periodic), k (oracle), tau or NESTED (triggers), None (never)
    label_delay: int
    schedules: list  # per seed, the rows trained (first = 0)
    scores: np.ndarray  # per seed, mean served score
    seconds: np.ndarray | None = None  # per seed, training seconds of the rows trained
    taus: list | None = None  # NESTED: per seed, the tau chosen at each decision (last: next)

    @property
    def retrains(self) -> float:
        return float(np.mean([len(s) - 1 for s in self.schedules]))

    @property
    def score(self) -> float:
        return nanmean(self.scores)

    @property
    def std(self) -> float:
        return nanstd(self.scores, ddof=1)


def evaluate(stack: np.ndarray, d: int = 0, E: np.ndarray | None = None, D: np.ndarray | None = None,
             seconds: np.ndarray | None = None, higher_is_better: bool = True, cost: float = 0.0,
             budget: float | None = None) -> list[Run]:
    """Every policy on one model's seed stack (S, K, K): never, periodic(H), the oracle for every k
    (per seed, and ``oracle-mean`` on the seed-mean matrix), and each trigger whose input is given
    (E, D: (S, K, K) or (K, K)) at every grid tau and ``nested`` (tau chosen for ``cost`` per retrain
    within ``budget``). ``seconds``: (S, K) per row. Empty when nothing is served."""
    S, K, _ = stack.shape
    R = K - 1 - d
    if R < 1:
        return []
    sign = 1.0 if higher_is_better else -1.0
    A = sign * stack
    Eo = None if E is None else np.broadcast_to(sign * np.asarray(E, float), (S, K, K))
    Db = None if D is None else np.broadcast_to(np.asarray(D, float), (S, K, K))
    arrays = [(A[s], None if Eo is None else Eo[s], None if Db is None else Db[s]) for s in range(S)]
    runs: list[Run] = []

    def add(policy, param, schedules, taus=None):
        secs = None if seconds is None else np.array([np.asarray(seconds, float)[s, sch].sum()
                                                       for s, sch in enumerate(schedules)])
        runs.append(Run(policy, param, d, [list(map(int, s)) for s in schedules],
                        np.array([score(stack[s], sch, d) for s, sch in enumerate(schedules)]), secs, taus))

    add("never", None, [[0]] * S)
    for H in range(1, R):
        add("periodic", H, [periodic(K, H, d)] * S)
    per_seed = [oracle(A[s], d) for s in range(S)]
    on_mean = per_seed[0] if S == 1 else oracle(nanmean(A, axis=0), d)
    for k in range(R):
        add("oracle", k, [o[k][1] for o in per_seed])
        add("oracle-mean", k, [on_mean[k][1]] * S)
    for name, signal in SIGNALS.items():
        if {"E": Eo, "D": Db}.get(NEEDS[name], A) is None:
            continue
        grid = tau_grid(signal, K, d, arrays)
        fixed = [[replay(signal, tau, K, d, arrays[s]) for s in range(S)] for tau in grid]
        for tau, schedules in zip(grid, fixed):
            add(name, tau, schedules)
        if grid:
            taus = [nested(A[s], [f[s] for f in fixed], grid, d, cost, budget) for s in range(S)]
            add(name, NESTED, [replay(signal, 0.0, K, d, arrays[s], taus[s], budget) for s in range(S)], taus)
    return runs


# --- across models ------------------------------------------------------------------------
def deployable(run: Run) -> bool:
    """A policy a user can run as it stands: never, periodic, or a trigger with its tau chosen
    causally (fixed-tau points are the frontier; picking among them would be hindsight)."""
    return run.policy in ("never", "periodic") or run.param == NESTED


def best_deployable(runs: Mapping[str, Sequence[Run]], cost: float = 0.0, budget: float | None = None,
                    higher_is_better: bool = True) -> dict[str, Run]:
    """Each model's deployable run with the highest score - cost * retrains (within ``budget``)."""
    sign = 1.0 if higher_is_better else -1.0
    best = {}
    for model, rs in runs.items():
        cands = [r for r in rs if deployable(r)]
        if cands:
            best[model] = cands[pick_best([sign * r.score for r in cands], [r.retrains for r in cands], cost, budget)]
    return best


def pareto(costs: Sequence[float], values: Sequence[float]) -> list[int]:
    """Indices of the points no other point beats on both (lower cost, higher value)."""
    costs, values = np.asarray(costs, float), np.asarray(values, float)
    keep, top = [], -math.inf
    for i in np.lexsort((-values, costs)):
        if values[i] > top:
            keep.append(int(i))
            top = values[i]
    return keep


def describe(run: Run) -> str:
    if run.policy in ("never", "periodic", "oracle"):
        return {"never": "never retrained", "periodic": f"retrained every {run.param} period(s)",
                "oracle": f"hindsight oracle, {run.param} retrain(s)"}[run.policy]
    if run.param != NESTED:
        return f"{run.policy}-triggered (tau {run.param:.3g})"
    nxt = float(np.median([ts[-1] for ts in run.taus]))
    return f"{run.policy}-triggered (tau chosen on earlier periods; next tau {nxt:.3g})"


@dataclass(frozen=True)
class Recommendation:
    model: str | None  # None: nothing worth deploying
    run: Run | None
    text: str
    per_model: Mapping[str, Run] = field(default_factory=dict)  # each model's best deployable run


def recommend(runs: Mapping[str, Sequence[Run]], families: Mapping[str, str | None], cost: float = 0.0,
              budget: float | None = None, higher_is_better: bool = True, unit: str = "") -> Recommendation:
    """The (model, deployable policy) with the highest served score - cost * retrains (within the
    budget), never a baseline (family Baseline): when no learning model beats the best baseline
    by more than twice the standard error of the difference over seeds, say so and pick none."""
    from driftmatrix.models.catalog import BASELINE_FAMILY

    sign = 1.0 if higher_is_better else -1.0
    best = best_deployable(runs, cost, budget, higher_is_better)
    learned = [m for m in best if families.get(m) != BASELINE_FAMILY]
    base = [m for m in best if families.get(m) == BASELINE_FAMILY]
    if not learned:
        return Recommendation(None, None, "No model that learns was scored: nothing to recommend.", best)

    def pick(models):
        i = pick_best([sign * best[m].score for m in models], [best[m].retrains for m in models], cost, budget)
        return models[i], best[models[i]]

    model, run = pick(learned)
    spread = f" (seed std {run.std:.2f})" if np.isfinite(run.std) else ""
    said = f"{model}, {describe(run)}: served score {run.score:.2f}{unit}{spread} with {run.retrains:g} retrain(s)"
    if base:
        b_model, b_run = pick(base)
        se = [r.std / math.sqrt(len(r.scores)) if np.isfinite(r.std) else 0.0 for r in (run, b_run)]
        noise = 2 * math.hypot(*se)
        # one seed has no spread: the guard is then blind, and the text says so instead of "noise 0.00"
        known = f"{noise:.2f}" if np.isfinite(run.std) and np.isfinite(b_run.std) else "unknown with one seed"
        margin = sign * (run.score - b_run.score)
        if not margin > noise:
            return Recommendation(None, None, (
                f"No model beats the {b_model} baseline ({b_run.score:.2f}{unit}) by more than the seed "
                f"noise ({known}): the best, {said}, is {margin:+.2f} ahead. Deploy none of them."), best)
        said += f", {margin:.2f} ahead of the {b_model} baseline (seed noise {known})"
    return Recommendation(model, run, f"Deploy {said}.", best)


# --- the contract: policies.csv and <model>.json (no I/O here) ------------------------------
def json_number(x):
    """x for JSON: None where it is missing or NaN (JSON has no NaN)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def csv_text(runs: Mapping[str, Sequence[Run]]) -> str:
    """One row per (model, policy, param, label_delay) of POLICIES (CSV_FIELDS)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_FIELDS)
    for model, rs in runs.items():
        for r in rs:
            if r.policy in POLICIES:
                w.writerow([model, r.policy, "" if r.param is None else r.param, r.label_delay,
                            round(r.retrains, 4), *("" if math.isnan(v) else round(v, 4) for v in (r.score, r.std))])
    return buf.getvalue()


def run_doc(r: Run) -> dict:
    return {"policy": r.policy, "param": json_number(r.param), "label_delay": r.label_delay, "retrains": r.retrains,
            "score": json_number(r.score), "std": json_number(r.std)}


def model_doc(model: str, runs: Sequence[Run]) -> dict:
    """``<model>.json``: per run the per-seed scores and every schedule (rows trained per seed)."""
    return {"model": model, "runs": [
        {**run_doc(r), "scores": [json_number(float(v)) for v in r.scores],
         "schedules": r.schedules, **({} if r.seconds is None else {"seconds": r.seconds.tolist()}),
         **({} if r.taus is None else {"taus": [[json_number(t) if math.isfinite(t) else None for t in ts]
                                                for ts in r.taus]})} for r in runs]}
