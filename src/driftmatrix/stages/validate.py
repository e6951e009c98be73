"""Validate stage: the great-expectations gate on every slice (``audit.validation`` runs the suites,
``audit.gate`` decides); a failed critical check stops the pipeline before any training."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from driftmatrix.audit.gate import ValidationFailed, decide, failure_message, summary_markdown
from driftmatrix.audit.slices import load_slices
from driftmatrix.audit.validation import ValidationConfig, validate_slices


def write(out_dir: Path, annotated: list, summary: Mapping[str, Any], extra: Mapping[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "results.json").write_text(json.dumps({**extra, "slices": annotated}, indent=2))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (out_dir / "summary.md").write_text(summary_markdown(annotated, summary))


def run(params: Any, slices_dir: str | Path, out_dir: str | Path, echo=print) -> dict[str, Any]:
    """Validate every slice, write the three files, print the summary; raise if the gate is closed."""
    cfg = ValidationConfig.from_params(params.extra.get("validation"))
    slices = load_slices(slices_dir)
    annotated, summary = decide(validate_slices(slices, cfg), cfg)
    out_dir = Path(out_dir)
    write(out_dir, annotated, summary, {"dataset": slices.meta.name, "config": _config_dict(cfg)})
    echo((out_dir / "summary.md").read_text())
    if not summary["passed"]:
        raise ValidationFailed(failure_message(summary))
    return summary


def _config_dict(cfg: ValidationConfig) -> dict[str, Any]:
    return {"min_rows": cfg.min_rows, "class_share": {"min": cfg.share_min, "max": cfg.share_max},
            "relative": {"max_change": cfg.max_change}, "split_tolerance": cfg.split_tolerance,
            "critical": list(cfg.critical), "override": list(cfg.override)}
