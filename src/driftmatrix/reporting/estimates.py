"""The report's "Before the labels arrive" section: how well each label-free estimator predicted
the future cells of each model's matrix (``outputs/estimates``): a method-by-model MAE table, then
per model the error map of the method it trusts next, drawn as a coloured HTML table."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Mapping

from driftmatrix.estimate.methods import METHODS


def _f(v, d: int = 2) -> str:
    return "&ndash;" if v is None else f"{v:.{d}f}"


def _colour(err: float, top: float) -> str:
    """White (0) to red (``top`` and above)."""
    g = int(255 - 155 * max(0.0, min(1.0, err / top if top > 0 else 0.0)))
    return f"background:rgb(255,{g},{g})"


def heatmap(doc: Mapping[str, Any], method: str, top: float) -> str:
    """Seed-mean |estimate - M| of ``method`` over the future cells (rows: cutoff, columns: period)."""
    err = doc["methods"][method]["mean_error"]
    slices = doc["slices"]
    head = "".join(f"<th>{html.escape(s)}</th>" for s in slices)
    rows = []
    for i in reversed(range(len(slices))):  # time runs up, as in the drift-matrix heatmaps
        cells = "".join(
            f'<td style="{_colour(err[i][j], top)}" title="M[{slices[i]}, {slices[j]}]: |error| {err[i][j]:.2f}">'
            f"{err[i][j]:.0f}</td>" if err[i][j] is not None else "<td></td>" for j in range(len(slices)))
        rows.append(f'<tr><th class="l">{html.escape(slices[i])}</th>{cells}</tr>')
    return (f'<table class="errmap"><thead><tr><th class="l">trained up to</th>{head}</tr></thead>'
            f"<tbody>{''.join(rows)}</tbody></table>")


def section(folder: str | Path) -> tuple[str, str, str] | None:
    """(anchor, title, html) of the section, or None when the folder holds no backtest."""
    folder = Path(folder)
    if not (folder / "backtest.json").exists():
        return None
    backtests = json.loads((folder / "backtest.json").read_text())
    docs = {m: json.loads((folder / f"{m}.json").read_text()) for m in backtests if (folder / f"{m}.json").exists()}
    models = list(backtests)
    methods = [m for m in METHODS if any(m in backtests[x] for x in models)]
    head = "".join(f"<th>{html.escape(m)}</th>" for m in models)
    floors = "".join(f"<td>{_f(backtests[m].get('noise_floor'))}</td>" for m in models)
    body = [f'<tr><td class="l">noise floor</td>{floors}</tr>']
    for meth in methods:
        tds = []
        for m in models:
            r = backtests[m].get(meth)
            text = _f(r["mae"]) if r else "n/a"
            tds.append(f"<td><b>{text}</b></td>" if backtests[m].get("hindsight_method") == meth else f"<td>{text}</td>")
        body.append(f'<tr><td class="l">{html.escape(meth)}</td>{"".join(tds)}</tr>')
    table = f'<table><thead><tr><th class="l">MAE (points)</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    rows, ahead_rows = [], []
    for m in models:
        b, a = backtests[m], backtests[m].get("previous_period") or {}
        cf, floor, mae = (b.get("carry-forward") or {}).get("mae"), b.get("noise_floor"), b.get("causal_mae")
        closed = (cf - mae) / (cf - floor) if None not in (cf, floor, mae) and cf > floor else None
        hind = b.get("hindsight_method")
        rows.append(f'<tr><td class="l">{html.escape(m)}</td><td>{_f(mae)}</td><td>{_f(cf)}</td><td>{_f(floor)}</td>'
                    f'<td>{_f(closed)}</td><td class="l">{html.escape(b.get("trusted_method", ""))}</td>'
                    f'<td class="l">{html.escape(hind or "")} ({_f((b.get(hind) or {}).get("mae"))})</td>'
                    f'<td>{b.get("n_flagged_shift_cells")} / {b.get("n_label_shift_cells")}</td>'
                    f'<td>{b.get("n_future_cells")}</td></tr>')
        if a.get("causal_mae") is not None:
            ahead_rows.append(f'<tr><td class="l">{html.escape(m)}</td><td>{_f(a["causal_mae"])}</td>'
                              f'<td class="l">{html.escape(a.get("trusted_method", ""))}</td>'
                              f'<td>{_f((a.get("carry-forward") or {}).get("mae"))}</td><td>{_f(floor)}</td></tr>')
    best_table = ('<table><thead><tr><th class="l">model</th><th>MAE, method chosen per period from earlier '
                  "periods</th><th>carry-forward</th><th>noise floor</th><th>share of carry-forward's excess over "
                  'the floor closed</th><th class="l">trusted next</th><th class="l">best in hindsight (MAE)</th>'
                  "<th>label shift flagged / measured (cells)</th><th>future cells</th></tr></thead><tbody>"
                  + "".join(rows) + "</tbody></table>")
    ahead_table = ("<p>The same cells one period ahead: estimated from the unit's labelled period j &minus; 1 "
                   "and M[i, j &minus; 1] (a deployed model whose latest period has its labels; "
                   "<code>driftmatrix estimate</code> offers these as <code>&lt;method&gt;@prev</code>):</p>"
                   '<table><thead><tr><th class="l">model</th><th>MAE, method chosen per period</th>'
                   '<th class="l">trusted next</th><th>carry-forward (M[i, j &minus; 1])</th><th>noise floor</th>'
                   "</tr></thead><tbody>" + "".join(ahead_rows) + "</tbody></table>") if ahead_rows else ""
    tops = [e for doc in docs.values() for meth in doc["methods"].values() for row in meth["mean_error"]
            for e in row if e is not None]
    top = sorted(tops)[int(0.95 * (len(tops) - 1))] if tops else 1.0
    maps = "".join(
        f"<div><h3>{html.escape(m)}: {html.escape(backtests[m]['trusted_method'])}</h3>"
        f"{heatmap(docs[m], backtests[m]['trusted_method'], top)}</div>"
        for m in models if m in docs and backtests[m].get("trusted_method") in docs[m]["methods"])
    text = ("<p>Each future cell M[i, j &gt; i] estimated without period j's labels, from what was known at "
            "cutoff i (the matrix up to i and the model's own held-out rows), against its true value; "
            "seed-level cells, all seeds pooled. The noise floor is the mean |X/n &minus; p| of a cell "
            "scored on n rows (X ~ Binomial(n, p)): what a perfect estimator still misses by. Bold: each "
            "model's best method in hindsight (descriptive); what a user gets is the method chosen for each "
            "period from the periods before it, below. Methods: docs/estimates.md.</p>")
    return ("estimates", "Before the labels arrive: label-free estimates, backtested",
            text + table + best_table + ahead_table + "<p>Error |estimate &minus; M| of the method each model trusts next, seed "
            "mean (rows: trained up to, latest on top; columns: evaluated period; colour scale to the 95th "
            f"percentile, {top:.1f} points):</p>" + f'<div class="cutoffs">{maps}</div>')
