"""The validation gate: ``driftmatrix validate``. Raises :class:`ValidationFailed` (exit 1) on a
critical failure not listed in ``validation.override``; overridden failures are recorded so the
train stage can tag its runs (:func:`overridden_checks`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping

from driftmatrix.audit.validation import ValidationConfig


class ValidationFailed(RuntimeError):
    """A critical expectation failed; the message names slice, check, observed value and bound."""


def override_matches(rule: str, slice_label: str, index: int, key: str) -> bool:
    """``"<slice>:<check>"``: slice = label, index or ``*``; check = full key or its family."""
    where, check = rule.split(":", 1)
    return where in ("*", slice_label, str(index)) and check in (key, key.split(":", 1)[0])


def status(rec: Mapping[str, Any], slice_label: str, index: int, override: Iterable[str]) -> str:
    if rec["success"]:
        return "pass"
    if not rec["critical"]:
        return "warn"
    return "overridden" if any(override_matches(r, slice_label, index, rec["expectation"]) for r in override) else "fail"


def decide(results: list[dict[str, Any]], cfg: ValidationConfig) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Annotate every record with its status; summary = passed / failures / overridden / warnings."""
    annotated, buckets = [], {"fail": [], "overridden": [], "warn": []}
    for sl in results:
        recs = []
        for rec in sl["expectations"]:
            st = status(rec, sl["label"], sl["index"], cfg.override)
            recs.append({**rec, "status": st})
            if st in buckets:
                buckets[st].append({"slice": sl["label"], "expectation": rec["expectation"],
                                    "observed": rec["observed"], "bound": rec["bound"]})
        annotated.append({**sl, "passed": not any(r["status"] == "fail" for r in recs), "expectations": recs})
    summary = {"passed": not buckets["fail"], "failures": buckets["fail"], "overridden": buckets["overridden"],
               "warnings": buckets["warn"]}
    return annotated, summary


def _short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= width else text[: width - 3] + "..."


def describe_failure(item: Mapping[str, Any]) -> str:
    return (f"slice {item['slice']}: {item['expectation']} failed, observed {_short(item['observed'])} "
            f"(bound {_short(item['bound'])})")


def summary_markdown(annotated: list[dict[str, Any]], summary: Mapping[str, Any]) -> str:
    lines = [f"# Validation: {'PASSED' if summary['passed'] else 'FAILED'}", "",
             "| slice | rows | checks | failed | overridden | warnings |", "|---|---:|---:|---|---|---|"]
    for sl in annotated:
        by = {st: [r["expectation"] for r in sl["expectations"] if r["status"] == st]
              for st in ("fail", "overridden", "warn")}
        lines.append(f"| {sl['label']} | {sl['n']} | {len(sl['expectations'])} | {', '.join(by['fail']) or '-'} | "
                     f"{', '.join(by['overridden']) or '-'} | {', '.join(by['warn']) or '-'} |")
    for title, key in (("Failures", "failures"), ("Overridden", "overridden"), ("Warnings", "warnings")):
        if summary[key]:
            lines += ["", f"## {title}", ""] + [f"- {describe_failure(i)}" for i in summary[key]]
    return "\n".join(lines) + "\n"


WILDCARD_FROM = 4  # a check failing on this many slices or more is suggested as one "*:<check>"


def override_rules(failures: Iterable[Mapping[str, Any]], wildcard_from: int = WILDCARD_FROM) -> list[str]:
    """The ``validation.override`` entries that let every failure through: ``"<slice>:<check>"``
    for each failing slice, or one ``"*:<check>"`` for a check failing on many slices."""
    by_check: dict[str, list[str]] = {}
    for i in failures:
        slices = by_check.setdefault(i["expectation"], [])
        if str(i["slice"]) not in slices:
            slices.append(str(i["slice"]))
    return [r for check, slices in by_check.items()
            for r in ([f"*:{check}"] if len(slices) >= wildcard_from else [f"{s}:{check}" for s in slices])]


def failure_message(summary: Mapping[str, Any]) -> str:
    items = summary["failures"]
    rules = ", ".join(json.dumps(r) for r in override_rules(items))
    return ("validation failed (critical checks):\n" + "\n".join(f"  {describe_failure(i)}" for i in items)
            + f"\nto proceed knowingly, list them in params.yaml validation.override: [{rules}]")


def overridden_checks(validation_dir: str | Path = "outputs/validation") -> list[str]:
    """``["<slice>:<check>", ...]`` overridden in the last validation (for MLflow tags); [] if none."""
    path = Path(validation_dir) / "summary.json"
    if not path.exists():
        return []
    return [f"{i['slice']}:{i['expectation']}" for i in json.loads(path.read_text()).get("overridden", [])]
