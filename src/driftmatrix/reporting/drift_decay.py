"""Data drift vs model decay: every between-slice drift measure of the audit (``drift.json``)
against every model's drop M[i, i] - M[i, j] over the same slice pairs (Spearman rank correlation).
The report stage draws it: the audit stage runs before any model is trained.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from driftmatrix.audit.drift import correlate
from driftmatrix.audit.figures import scatter

SCATTERS = 6  # scatter plots in the report, at most


def read_audit(path: str | Path | None) -> dict[str, Any] | None:
    """``drift.json`` of an audit: ``path`` itself, or beside the audit's ``report.html``."""
    if path is None:
        return None
    path = Path(path)
    doc = path if path.suffix == ".json" else path.with_name("drift.json")
    return json.loads(doc.read_text()) if doc.exists() else None


def on_slices(slices: Sequence[str], mean: np.ndarray, labels: Sequence[str]) -> np.ndarray:
    """A model's seed-mean matrix re-indexed onto the audit's slice ``labels`` (NaN where missing)."""
    pos = {s: n for n, s in enumerate(slices)}
    idx = np.array([pos.get(label, -1) for label in labels])
    have = (idx[:, None] >= 0) & (idx[None, :] >= 0)
    return np.where(have, np.asarray(mean, float)[np.ix_(np.maximum(idx, 0), np.maximum(idx, 0))], np.nan)


def correlations(audit: Mapping[str, Any], cohort) -> list[dict[str, Any]]:
    """One row per (model, measure): Spearman rho, p-value, n pairs, and the pairs themselves."""
    labels = audit["slices"]
    out = []
    for name, mm in cohort.models.items():
        model = on_slices(mm.slices, mm.mean, labels)
        for measure, ms in audit["measures"].items():
            values = np.array(ms["values"], dtype=float)  # null -> NaN
            data_drift = values if ms["higher_is_more_drift"] else 1.0 - values
            out.append({"model": name, "measure": measure, "higher_is_better": mm.higher_is_better,
                        **correlate(data_drift, model, mm.higher_is_better)})
    return out


def scatters(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, bytes]]:
    """(caption, PNG) of drift against drop for the first :data:`SCATTERS` rows with a rho."""
    shown = [c for c in rows if c["spearman"] is not None][:SCATTERS]
    return [(f"{c['model']} vs {c['measure']}",
             scatter(c["drift"], c["drop"], c["measure"], "model drop M[i,i]-M[i,j]",
                     f"{c['model']} (rho={c['spearman']:.2f})")) for c in shown]


def metrics(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """MLflow metrics ``spearman_<model>_<measure>`` of the rows with a rho."""
    return {f"spearman_{c['model']}_{c['measure']}".replace(" ", "_"): c["spearman"]
            for c in rows if c["spearman"] is not None}
