"""Gate and audit for feature columns: types, missing and unseen-category shares, per-feature drift."""

from __future__ import annotations

import json

import numpy as np
import pytest

from driftmatrix.audit import features as fd
from driftmatrix.audit import gate
from driftmatrix.stages import validate as validate_stage
from driftmatrix.stages import audit as stage
from driftmatrix.audit import measures
from driftmatrix.audit.slices import load_slices
from testkit.slices import gx_formats_agree


def test_ks_and_js_distance_bounds():
    a = np.arange(100.0)
    assert fd.ks_statistic(a, a) == 0.0 and fd.ks_statistic(a, a + 1000) == 1.0
    assert np.isnan(fd.ks_statistic(a, np.array([np.nan])))
    assert fd.js_distance([5, 5], [5, 5]) == 0.0 and fd.js_distance([1, 0], [0, 1]) == pytest.approx(1.0)


def test_the_audit_names_the_drifting_features(sliced):
    params, paths = sliced
    audit = measures.compute(load_slices(paths.slices), measures.AuditConfig())
    ranking = [f for f, _ in audit.features["ranking"]]
    for drifting in ("age", "income", "channel"):  # the generator moves these (synthetic_table)
        for stable in ("plan", "tenure", "score"):
            assert ranking.index(drifting) < ranking.index(stable), ranking
    top = audit.features["top"]
    assert top[0][4][0][0] in ("age", "channel", "income", "usage", "region")
    unseen = np.array(audit.features["unseen_categories"], dtype=float)
    assert (unseen[:4, :4] == 0).all() and (unseen[:4, 4] > 0.15).all() and unseen[4, 4] == 0  # channel app in 2004
    assert {m.name for m in audit.measures} >= {"feature_drift_max", "unseen_categories"}
    assert set(audit.to_dict()["features"]["matrices"]) == set(audit.features["kinds"])


def test_audit_stage_writes_the_feature_section(sliced, tmp_path, mlflow_store):
    params, paths = sliced
    out = stage.run(params, paths.slices, tmp_path / "audit", paths.validation)
    assert out["features"]["ranking"]
    html = (tmp_path / "audit" / "report.html").read_text()
    assert "Feature drift" in html and "most drifting vs" in html
    assert json.loads((tmp_path / "audit" / "drift.json").read_text())["features"]["top"]


def test_the_gate_checks_feature_columns_with_the_override_mechanism(sliced, tmp_path):
    params, paths = sliced
    summary = validate_stage.run(params, paths.slices, tmp_path / "v1", echo=lambda _: None)
    warned = {(w["slice"], w["expectation"]) for w in summary["warnings"]}
    assert ("2004", "unseen_share") in warned and not summary["failures"]
    results = json.loads((tmp_path / "v1" / "results.json").read_text())
    checks = {r["expectation"] for s in results["slices"] for r in s["expectations"]}
    assert {"missing_share", "types"} <= checks and not any(c.startswith("not_null:feat:") for c in checks)

    strict = {**params.extra, "validation": {"critical": ["types", "unseen_share", "missing_share"],
                                             "features": {"max_missing": 0.01}}}
    from dataclasses import replace

    with pytest.raises(gate.ValidationFailed) as err:
        validate_stage.run(replace(params, extra=strict), paths.slices, tmp_path / "v2", echo=lambda _: None)
    assert "slice 2004: unseen_share failed" in str(err.value) and "missing_share failed" in str(err.value)
    allowed = {**strict, "validation": {**strict["validation"], "override": ["2004:unseen_share", "*:missing_share"]}}
    summary = validate_stage.run(replace(params, extra=allowed), paths.slices, tmp_path / "v3", echo=lambda _: None)
    assert summary["passed"] and ("2004", "unseen_share") in {(o["slice"], o["expectation"]) for o in summary["overridden"]}


def test_feature_checks_record_what_validating_in_summary_records(sliced):
    """Feature frames (missing and unseen-category shares, types) through GX's BASIC format first:
    the records are SUMMARY's."""
    params, paths = sliced
    records, again = gx_formats_agree(paths.slices, params.extra.get("validation"))
    keys = {r["expectation"] for s in records for r in s["expectations"]}
    assert {"missing_share", "unseen_share", "types"} <= keys and again >= 1  # unseen_share warns in 2004
