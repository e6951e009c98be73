"""Self-contained HTML audit report: inline CSS, PNG figures as base64 data URIs, no scripts,
no external resources (opens offline)."""

from __future__ import annotations

import base64
import html
import json
from typing import Any, Mapping, Sequence

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
color:#222;padding:0 1rem}h1{font-size:1.6rem}h2{border-bottom:1px solid #ddd;padding-bottom:.2rem;margin-top:2rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}td,th{border:1px solid #ddd;padding:.25rem .5rem;
text-align:left;vertical-align:top}th{background:#f5f5f5}.fail{color:#b00020;font-weight:600}.ok{color:#1b7f3b;
font-weight:600}.over{color:#a15c00;font-weight:600}figure{display:inline-block;margin:.5rem}img{max-width:100%}
code{background:#f5f5f5;padding:0 .2rem}.note{color:#555;font-size:.9rem}
"""


def esc(value: Any) -> str:
    return html.escape(value if isinstance(value, str) else json.dumps(value, default=str))


def img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{html.escape(alt)}" src="data:image/png;base64,{data}"></figure>'


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], raw_columns: Sequence[int] = ()) -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c if i in raw_columns else esc(c)}</td>" for i, c in enumerate(r)) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def validation_section(summary: Mapping[str, Any] | None, results: Mapping[str, Any] | None) -> str:
    if summary is None:
        return '<p class="note">No validation results found (run <code>driftmatrix validate</code>).</p>'
    verdict = '<span class="ok">PASSED</span>' if summary["passed"] else '<span class="fail">FAILED</span>'
    parts = [f"<p>Gate: {verdict}; {len(summary['failures'])} failure(s), {len(summary['overridden'])} "
             f"overridden, {len(summary.get('warnings', []))} warning(s).</p>"]
    if results:
        rows = []
        for sl in results["slices"]:
            by = {st: ", ".join(r["expectation"] for r in sl["expectations"] if r.get("status") == st) or "-"
                  for st in ("fail", "overridden", "warn")}
            rows.append([sl["label"], sl["n"], len(sl["expectations"]), by["fail"], by["overridden"], by["warn"]])
        parts.append(table(["slice", "rows", "checks", "failed", "overridden", "warnings"], rows))
    return "\n".join(parts)


def tripped_section(results: Mapping[str, Any] | None) -> str:
    if not results:
        return '<p class="note">No validation results.</p>'
    rows = [[sl["label"], r["expectation"], r.get("status"), r["observed"], r["bound"], r["examples"]]
            for sl in results["slices"] for r in sl["expectations"] if r.get("status", "pass") != "pass"]
    if not rows:
        return '<p class="ok">No slice tripped a check.</p>'
    return table(["slice", "check", "status", "observed", "bound", "examples (up to 5)"], rows)


def decay_pointer() -> str:
    return ('<p class="note">The audit runs on the slices, before any model is trained. Its drift '
            'matrices against each model\'s accuracy drop (Spearman rank correlation) are in the drift-matrix '
            'report of the report stage (<code>outputs/report/report.html</code>, section "Data drift vs '
            'model decay").</p>')


def render(title: str, sections: Sequence[tuple[str, str]]) -> str:
    body = "\n".join(f"<section><h2>{html.escape(h)}</h2>\n{content}\n</section>" for h, content in sections)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{CSS}</style></head><body><h1>{html.escape(title)}</h1>\n{body}\n</body></html>\n")
