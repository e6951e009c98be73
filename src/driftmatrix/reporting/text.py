"""Plain-text tables for the command line."""

from __future__ import annotations

import csv
import io
import math
from typing import Sequence

from driftmatrix.analysis import advisor, policy


def fmt(value, decimals: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float):
        return f"{value:.{decimals}f}"
    return str(value)


def table(headers: Sequence[str], rows: Sequence[Sequence], decimals: int = 2) -> str:
    """Left-aligned text columns, right-aligned numbers."""
    cells = [[fmt(v, decimals) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[k]) for r in cells]) for k, h in enumerate(headers)]
    numeric = [all(isinstance(r[k], (int, float)) for r in rows) if rows else False for k in range(len(headers))]

    def line(vals):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(vals, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


def decimals_for(unit: str) -> int:
    """Printed precision: one decimal for percentages (as the paper), three otherwise."""
    return 1 if unit == "%" else 3


# --- views used by the CLI ------------------------------------------------------------------
SUMMARY_FIELDS = ("model", "family", "in_distribution", "future", "decay", "td_score", "backward")


def summary_records(cohort) -> list[dict]:
    """The ``summarize`` records, in SUMMARY_FIELDS order, NaN as None."""
    return [{k: None if isinstance(rec[k], float) and math.isnan(rec[k]) else rec[k] for k in SUMMARY_FIELDS}
            for rec in cohort.records()]


def summary_csv(records: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=SUMMARY_FIELDS, lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: ("" if v is None else v) for k, v in r.items()} for r in records)
    return buf.getvalue()


def horizon_ranking(cohort, horizon: int) -> str:
    d = decimals_for(cohort.unit)
    ranked = advisor.rank_for_horizon(cohort.stacks, horizon, cohort.higher_is_better)
    rows = [(k + 1, s.model, cohort.families.get(s.model) or "-", s.mean, s.std) for k, s in enumerate(ranked)]
    head = (f"Expected {cohort.metric} when retrained every {horizon} period(s) (served score: period j "
            f"scored by the model trained up to the latest multiple of {horizon} before j; std across seeds):")
    return head + "\n" + table(["rank", "model", "family", "expected", "seed std"], rows, d)


def cadences(cohort, tolerance: float) -> str:
    """Per model, the longest retraining horizon that keeps it within ``tolerance`` of fresh."""
    d = decimals_for(cohort.unit)
    found = [advisor.cadence(m, stack, tolerance, cohort.higher_is_better) for m, stack in cohort.stacks.items()]
    rows = [(c.model, cohort.families.get(c.model) or "-", c.horizon, c.every_period, c.expected) for c in found]
    rows.sort(key=lambda r: (r[1] == "Baseline", -r[2], -r[4] if cohort.higher_is_better else r[4]))
    unit = f" ({cohort.unit})" if cohort.unit else ""
    head = (f"Retrain every H periods, H as long as the served {cohort.metric} stays within {tolerance:g} "
            f"points{unit} of retraining every period; baselines last:")
    return head + "\n" + table(["model", "family", "H", "every period", "every H"], rows, d)


def horizon_leaders(cohort) -> str:
    """Leader per horizon (as ranges), the crossovers, and the leader per lag for contrast."""
    d = decimals_for(cohort.unit)
    fam = cohort.families
    lead = advisor.leaders(cohort.stacks, cohort.higher_is_better)
    rows = [(span, m, fam.get(m) or "-", a, b) for span, m, a, b in advisor.leader_spans(lead, 1)]
    out = [f"Best model by retraining horizon H (retrain every H periods; expected {cohort.metric} ="
           f" its served score, period j by the model of the latest retrain before j):",
           table(["H", "leader", "family", "expected at first H", "at last H"], rows, d),
           "", "Crossovers (the leader changes at horizon H):"]
    cross = advisor.crossovers(lead)
    out += [f"  H={c.horizon}: {c.previous} -> {c.to}" for c in cross] or ["  none"]
    lag_rows = [(span, m, fam.get(m) or "-", a, b)
                for span, m, a, b in advisor.leader_spans(advisor.lag_leaders(cohort.curves,
                                                                       cohort.higher_is_better), 0)]
    out += ["", "For contrast, the best model at each lag L (a model L periods old; forgetting curve F(L)):",
            table(["L", "leader", "family", "F at first L", "at last L"], lag_rows, d)]
    return "\n".join(out)


def policies(cohort, runs, rec, cost: float = 0.0, budget=None) -> str:
    """Per model: never, the best periodic cadence, the oracle with as many retrains, each nested
    trigger; the Pareto frontier across models; the recommended pair in words."""
    d, sign = decimals_for(cohort.unit), 1.0 if cohort.higher_is_better else -1.0
    triggers = [t for t in policy.SIGNALS if any(r.policy == t for rs in runs.values() for r in rs)]
    heads = ["model", "family", "never", "H", "retrains", "every H", "oracle, same retrains"]
    heads += [f"{t} {what}" for t in triggers for what in ("retrains", "score")]
    rows, front = [], []
    for model, rs in runs.items():
        fam = cohort.families.get(model) or "-"
        if not rs:
            rows.append((model, fam, "nothing served") + ("-",) * (len(heads) - 3))
            continue
        by = {(r.policy, r.param): r for r in rs}
        per = [r for r in rs if r.policy == "periodic"] or [by["never", None]]
        p = per[policy.pick_best([sign * r.score for r in per], [r.retrains for r in per], cost, budget)]
        k = min(int(p.retrains), max(r.param for r in rs if r.policy == "oracle"))
        trig = [by.get((t, policy.NESTED)) for t in triggers]
        rows.append((model, fam, by["never", None].score, p.param or "-", p.retrains, p.score,
                     by["oracle", k].score, *(x for r in trig for x in ((r.retrains, r.score) if r else "--"))))
        front += [(model, r) for r in rs if policy.deployable(r)]
    keep = policy.pareto([r.retrains for _, r in front], [sign * r.score for _, r in front])
    frontier = [(m, policy.describe(r), r.retrains, r.score, r.std)
                for m, r in sorted((front[i] for i in keep), key=lambda mr: mr[1].retrains)]
    within = f" within {budget} retrains" if budget is not None else ""
    return "\n".join([
        f"Served {cohort.metric} per model (mean over the periods a policy serves, never lag 0); H: the periodic "
        f"cadence best at {cost:g} points per retrain{within}; triggers: tau chosen on earlier periods only:",
        table(heads, rows, d), "",
        "Pareto frontier across models (fewest retrains for each score; the oracle for every k is in policies.csv):",
        table(["model", "policy", "retrains", "score", "seed std"], frontier, d), "", rec.text])


def comparison_table(comparisons) -> str:
    if not comparisons:
        return "no model in common"
    rows = []
    for c in comparisons:
        o, p = c.ours, c.published
        rows.append((c.model, o.in_distribution, p.in_distribution, o.in_distribution - p.in_distribution,
                     o.future, p.future, o.future - p.future, o.decay, p.decay, o.decay - p.decay,
                     c.mean_abs_diff, c.max_abs_diff, c.n_cells))
    head = ["model", "ID ours", "ID pub", "dID", "Fut ours", "Fut pub", "dFut", "Dec ours",
            "Dec pub", "dDec", "mean|dcell|", "max|dcell|", "cells"]
    return table(head, rows, 2)
