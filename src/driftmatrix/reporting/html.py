"""One self-contained HTML report of a cohort of drift matrices: interactive parts drawn by an
inline script (:mod:`driftmatrix.reporting.interactive`), figures as base64 PNGs, nothing loaded
from elsewhere, so the file can be mailed, archived as an MLflow artifact, or opened offline."""

from __future__ import annotations

import base64
import html
import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path

from driftmatrix.analysis import advisor
from driftmatrix.reporting import drift_decay, estimates as est_section, figures, interactive
from driftmatrix.reporting.text import decimals_for

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1100px;color:#222;line-height:1.4;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-size:.85em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right}th{background:#f4f4f4}
td.l,th.l{text-align:left}figure{margin:1em 0}img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.85em;color:#555}.meta{color:#666;font-size:.9em}
.cutoffs{display:flex;flex-wrap:wrap;gap:1.2em}.cutoffs>div{flex:0 0 auto}
nav a{margin-right:1em}
""" + interactive.CSS + ".errmap td{min-width:1.6em;padding:.1em .2em;font-size:.8em}"  # estimates' error maps


def _num(v, d: int) -> str:
    return "&ndash;" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{d}f}"


def _table(headers, rows, d: int, td_col: int | None = None) -> str:
    """HTML table; floats at ``d`` decimals, except column ``td_col`` (TD slopes) at d + 2."""
    def cell(v, tag, k=None):
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            text = _num(v, d + 2 if k == td_col else d) if isinstance(v, float) else str(v)
            return f"<{tag}>{text}</{tag}>"
        return f'<{tag} class="l">{html.escape("" if v is None else str(v))}</{tag}>'

    head = "".join(f'<th class="l">{html.escape(h)}</th>' for h in headers)
    body = "".join("<tr>" + "".join(cell(v, "td", k) for k, v in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


SETUP = (("window", "training window"), ("precision", "precision"), ("stale", "stale rows"))


def _plain(v) -> str:
    return v if isinstance(v, str) else json.dumps(v, separators=(", ", ": "))


def _setup_table(cohort) -> str:
    """How each model was trained (window, precision, stale rows), for the keys any model has."""
    keys = [(k, label) for k, label in SETUP if any(k in (m.extra or {}) for m in cohort.models.values())]
    if not keys:
        return ""
    rows = [(name, ", ".join(map(str, m.seeds)) if m.seeds else str(m.n_seeds),
             *(_plain(m.extra[k]) if k in (m.extra or {}) else "n/a" for k, _ in keys))
            for name, m in cohort.models.items()]
    return "<h3>Training setup</h3>" + _table(["model", "seeds", *(label for _, label in keys)], rows, 0)


def _decay_section(rows) -> str:
    """Data drift (audit) against each model's drop: table and scatter plots."""
    if not rows:
        return "<p>The audit measured no drift between slices that the models were scored on.</p>"
    table = _table(["model", "drift measure", "pairs", "Spearman rho", "p-value"],
                   [(c["model"], c["measure"], c["n"], "-" if c["spearman"] is None else f"{c['spearman']:.3f}",
                     "-" if c["pvalue"] is None else f"{c['pvalue']:.3g}") for c in rows], 0)
    figs = "".join(f"<figure>{_img(png, caption)}<figcaption>{html.escape(caption)}</figcaption></figure>"
                   for caption, png in drift_decay.scatters(rows))
    return ("<p>For each pair of slices i &lt; j with both values present: the audit's drift(i, j) (overlap "
            "read as 1 &minus; overlap) against the model's drop M<sub>ii</sub> &minus; M<sub>ij</sub> "
            "(sign flipped for lower-is-better metrics, so a positive drop is always worse); Spearman rank "
            "correlation.</p>" + table + figs)


def _sections(cohort, audit_href: str | None, dpi: int, decay=None) -> list[tuple[str, str, str]]:
    """(anchor, title, html body) of every report section."""
    d = decimals_for(cohort.unit)
    fam = cohort.families
    s = cohort.summaries
    out = []
    rows = [(k + 1, m, fam[m] or "-", s[m].in_distribution, s[m].future, s[m].decay, s[m].backward,
             s[m].td_score) for k, m in enumerate(cohort.rank_by_future())]
    out.append(("summary", "Summary by model", (
        f"<p>Ordered by future score. In-distribution = mean of the diagonal M<sub>ii</sub>; future = "
        f"mean of the cells j &gt; i; decay = in-distribution &minus; future, oriented so that positive "
        f"is worse; backward = mean of the cells j &lt; i; TD = temporal-degradation slope "
        f"({html.escape(cohort.unit or cohort.metric)} per slice of misalignment).</p>"
        + _table(["rank", "model", "family", "in-distribution", "future", "decay", "backward", "TD score"],
                 rows, d, td_col=7) + _setup_table(cohort))))
    out.append(("interactive", "Drift matrices and forgetting curves", interactive.section(cohort, d)))
    out.append(("robustness", "Temporal robustness (by decay)", _table(
        ["model", "family", "future", "decay"],
        [(m, fam[m] or "-", f, dec) for m, f, dec in cohort.robustness()], d)))
    blocks = [f"<div><h3>Trained up to {html.escape(cohort.slices[i])}</h3>"
              + _table(["rank", "model", "M_ii", "future", "decay"], cohort.cutoff_table(i), d) + "</div>"
              for i in cohort.cutoff_indices]
    out.append(("cutoffs", "Per-cutoff view", "<p>Cutoffs spread evenly over all slices but the "
                "last; models ordered by their mean over the later slices.</p>"
                f'<div class="cutoffs">{"".join(blocks)}</div>'))
    heads = ["family"] + [f"{cohort.slices[i]} {what}" for i in cohort.cutoff_indices for what in ("future", "decay")]
    fam_rows = [(f,) + tuple(v for cell in cells for v in cell) for f, cells in cohort.family_cutoffs().items()]
    out.append(("families", "By family", _table(heads, fam_rows, d) + _table(
        ["family", "in-distribution", "future", "decay", "TD score"],
        [(f, v["in_distribution"], v["future"], v["decay"], v["td_score"]) for f, v in cohort.family_summary().items()],
        d, td_col=4)))
    lead = advisor.leaders(cohort.stacks, cohort.higher_is_better)
    spans = [(span, m, fam[m] or "-", a, b) for span, m, a, b in advisor.leader_spans(lead, 1)]
    cross = advisor.crossovers(lead)
    lag_spans = [(span, m, fam[m] or "-", a, b) for span, m, a, b in
                 advisor.leader_spans(advisor.lag_leaders(cohort.curves, cohort.higher_is_better), 0)]
    out.append(("advisor", "Retraining-horizon advisor", (
        "<p>A model retrained every H slices serves slice j with the model trained up to the latest "
        "retrain before j (never on its own training slice); its expected score is the mean over the "
        "slices it serves. Best model for each H:</p>"
        + _table(["H", "leader", "family", "expected at first H", "at last H"], spans, d)
        + "<p>Crossovers: " + (", ".join(f"H={c.horizon}: {html.escape(c.previous)} &rarr; "
                                         f"{html.escape(c.to)}" for c in cross) or "none") + ".</p>"
        + "<p>For contrast, the best model at each lag L (the score of a model L slices old):</p>"
        + _table(["L", "leader", "family", "F at first L", "at last L"], lag_spans, d))))
    figs = "".join(
        f'<figure id="fig-{key}">{_img(figures.png_bytes(fig, dpi if key not in ("matrices", "deviations") else dpi - 15), key)}'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for key, caption, fig in figures.cohort_figures(cohort))
    out.append(("figures", "Figures", figs))
    if decay is not None:
        out.append(("drift-decay", "Data drift vs model decay", _decay_section(decay)))
    if audit_href:
        out.append(("audit", "Data audit", f'<p>The data audit of this dataset (label and input drift '
                    f'between slices) is in a separate report: <a href="{html.escape(audit_href)}">'
                    f"{html.escape(audit_href)}</a>.</p>"))
    return out


def importance_section(folder: str | Path | None) -> tuple[str, str, str] | None:
    """(anchor, title, html) of the importance stage's heatmaps, or None when it drew none."""
    if folder is None or not Path(folder).is_dir():
        return None
    pngs = sorted(Path(folder).glob("*.png"))
    if not pngs:
        return None
    note = ("<p class='note'>Score drop when one feature is shuffled, per training cutoff, on each cutoff's own "
            "held-out rows: which features each model leans on, and how that moves as the world drifts.</p>")
    return ("importance", "Feature importance per cutoff",
            note + "".join(_img(p.read_bytes(), f"{p.stem} permutation importance") for p in pngs))


def policy_section(folder: str | Path | None, png: Path | None = None) -> tuple[str, str, str] | None:
    """(anchor, title, html) of the policy stage's recommendation and frontier ``png``, or None."""
    path = None if folder is None else Path(folder) / "recommendation.json"
    if path is None or not path.exists():
        return None
    rec = json.loads(path.read_text())
    cost = f"{rec['retrain_cost']:g} points of served score per retrain" + (
        f", at most {rec['budget']} retrains" if rec.get("budget") is not None else "")
    rows = [(m, r["description"], r["retrains"], r["score"], r["std"]) for m, r in rec["per_model"].items()]
    note = (f"<p><b>{html.escape(rec['text'])}</b></p><p class='note'>Each policy is replayed over the history: "
            f"period j is served by the latest model trained up to j-1-d (label delay d = {rec['label_delay']}), "
            f"never by lag 0; triggers choose their threshold on earlier periods only. Price: {cost}. Every "
            "policy's score is in outputs/policy/policies.csv.</p>")
    return ("policy", "Retraining policy", note + _table(["model", "its best policy at this price", "retrains",
                                                        "served score", "seed std"], rows, 2)
            + (_img(png.read_bytes(), "policy frontier") if png is not None and png.exists() else ""))


def render(cohort, title: str | None = None, audit_href: str | None = None, dpi: int = 85, decay=None,
           estimates: str | Path | None = None, importance: str | Path | None = None,
           policy: str | Path | None = None, policy_png: Path | None = None) -> str:
    """The whole report as one HTML string; ``decay``: :func:`drift_decay.correlations` (None: no audit)."""
    title = title or f"Drift matrices: {cohort.first.dataset or 'dataset'}"
    seeds = sorted({m.n_seeds for m in cohort.models.values()})
    meta = (f"{len(cohort.models)} models &middot; {len(cohort.slices)} slices ({html.escape(cohort.slices[0])} to "
            f"{html.escape(cohort.slices[-1])}) &middot; metric {html.escape(cohort.metric)}"
            f"{' (' + html.escape(cohort.unit) + ')' if cohort.unit else ''}, "
            f"{'higher' if cohort.higher_is_better else 'lower'} is better &middot; seeds per model: "
            f"{', '.join(map(str, seeds))} &middot; generated "
            f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")
    sections = _sections(cohort, audit_href, dpi, decay)
    extra = (est_section.section(estimates) if estimates is not None else None, policy_section(policy, policy_png),
             importance_section(importance))
    sections += [s for s in extra if s is not None]
    nav = "".join(f'<a href="#{a}">{html.escape(t)}</a>' for a, t, _ in sections)
    body = "".join(f'<section id="{a}"><h2>{html.escape(t)}</h2>{b}</section>' for a, t, b in sections)
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
            f"</title><style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>"
            f'<p class="meta">{meta}</p><nav>{nav}</nav>{body}</body></html>')


def run(cohort, out: str | Path, audit: str | Path | None = None, title: str | None = None, **sections) -> Path:
    """Write the report of a cohort to ``out``, linking the ``audit`` report; ``sections``: :func:`render`'s."""
    out = Path(out)
    href = os.path.relpath(Path(audit).resolve(), out.resolve().parent) if audit and Path(audit).exists() else None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(cohort, title, href, **sections), encoding="utf-8")
    return out
