"""The Great Expectations gate: clean slices pass, a slice corrupted on purpose fails with a
message naming it, the documented override lets it through and is recorded."""

import json

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from driftmatrix.audit import gate

from driftmatrix.stages import validate as validate_stage
from testkit.slices import gx_formats_agree, make_slices, write_slices
from driftmatrix.audit.validation import ValidationConfig
from driftmatrix.cli import app
from driftmatrix.config import ConfigError, parse_params

BAD = "2002"  # label of slice 2, the one corrupted below
BROKEN = ["classes_present", "timestamp_in_period", "unique_id"]


def _params(validation=None):
    raw = {"models": {"MLP-S": {}}}
    if validation is not None:
        raw["validation"] = validation
    return raw


def _corrupted(tmp_path, dup_rows=5):
    rows, manifest, _ = make_slices(k=4, per_slice=120, task="binary")  # multiclass: a warning (test below)
    in_bad = rows["slice"] == 2
    rows = rows[~(in_bad & (rows["label"] == 1))].copy()                       # one class removed
    outside = rows.index[rows["slice"] == 2][-3:]
    rows.loc[outside, "timestamp"] = pd.Timestamp("1999-06-01", tz="UTC")      # outside the period
    block = rows[rows["slice"] == 2].iloc[:dup_rows]                           # a duplicated block
    rows = pd.concat([rows, block]).sort_values(["slice", "id"], kind="stable").reset_index(drop=True)
    return write_slices(tmp_path / "slices", rows, manifest)


def _run(tmp_path, slices, validation=None):
    return validate_stage.run(parse_params(_params(validation)), slices, tmp_path / "validation", echo=lambda _: None)


def test_clean_slices_pass_and_results_have_the_documented_shape(tmp_path):
    rows, manifest, _ = make_slices(k=3, per_slice=100, task="binary")
    summary = _run(tmp_path, write_slices(tmp_path / "slices", rows, manifest))
    assert summary == {"passed": True, "failures": [], "overridden": [], "warnings": []}
    results = json.loads((tmp_path / "validation" / "results.json").read_text())
    assert [s["label"] for s in results["slices"]] == ["2000", "2001", "2002"]
    first = results["slices"][0]["expectations"]
    keys = {r["expectation"] for r in first}
    assert {"columns", "types", "not_null:label", "label_set:label", "min_rows", "timestamp_in_period",
            "unique_id", "classes_present", "class_share", "split_stratification"} <= keys
    assert "share_vs_history" in {r["expectation"] for r in results["slices"][1]["expectations"]}
    for r in first:
        assert set(r) >= {"expectation", "success", "observed", "bound", "critical", "examples", "status"}
    assert "| 2000 | 100 |" in (tmp_path / "validation" / "summary.md").read_text()
    assert gate.overridden_checks(tmp_path / "validation") == []


def test_corrupted_slice_fails_the_gate_naming_slice_check_observed_and_bound(tmp_path):
    slices = _corrupted(tmp_path, dup_rows=20)
    with pytest.raises(gate.ValidationFailed) as err:
        _run(tmp_path, slices)
    msg = str(err.value)
    for check in BROKEN:
        assert f"slice {BAD}: {check} failed" in msg
    assert "observed" in msg and "bound" in msg and "2002-01-01T00:00:00+00:00" in msg
    assert "slice 2001" not in msg and "slice 2003" not in msg
    summary = json.loads((tmp_path / "validation" / "summary.json").read_text())
    assert summary["passed"] is False
    assert sorted(f["expectation"] for f in summary["failures"]) == BROKEN
    results = json.loads((tmp_path / "validation" / "results.json").read_text())
    dup = next(r for r in results["slices"][2]["expectations"] if r["expectation"] == "unique_id")
    assert len(dup["examples"]) == 5 and dup["observed"].startswith("40 of")   # bounded examples
    ts = next(r for r in results["slices"][2]["expectations"] if r["expectation"] == "timestamp_in_period")
    assert any("1999-06-01" in json.dumps(e) for e in ts["examples"])


def test_override_lets_the_corrupted_slice_through_and_is_recorded(tmp_path):
    slices = _corrupted(tmp_path)
    override = [f"{BAD}:{c}" for c in BROKEN]
    summary = _run(tmp_path, slices, {"override": override})
    assert summary["passed"] is True and summary["failures"] == []
    recorded = json.loads((tmp_path / "validation" / "summary.json").read_text())["overridden"]
    assert [(o["slice"], o["expectation"]) for o in recorded] == [(BAD, c) for c in BROKEN]
    assert all({"observed", "bound"} <= set(o) for o in recorded)
    assert gate.overridden_checks(tmp_path / "validation") == override
    # an override for a different slice does not help
    with pytest.raises(gate.ValidationFailed):
        _run(tmp_path, slices, {"override": [f"2001:{c}" for c in BROKEN]})


def test_cli_exits_nonzero_then_zero_with_override(tmp_path, monkeypatch):
    slices = _corrupted(tmp_path)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(_params()))
    args = ["validate", "--params", str(params), "--slices", str(slices), "--out", str(tmp_path / "v")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 1
    assert f"slice {BAD}: unique_id failed" in res.output
    params.write_text(yaml.safe_dump(_params({"override": ["*:classes_present", f"{BAD}:timestamp_in_period",
                                                           f"{BAD}:unique_id"]})))
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "Overridden" in res.output


def test_an_id_in_two_slices_fails_both(tmp_path):
    rows, manifest, _ = make_slices(k=3, per_slice=60)
    moved = rows[rows["slice"] == 1].iloc[[0]].assign(slice=2, timestamp=pd.Timestamp("2002-03-01", tz="UTC"))
    rows = pd.concat([rows, moved]).sort_values(["slice", "id"], kind="stable").reset_index(drop=True)
    with pytest.raises(gate.ValidationFailed) as err:
        _run(tmp_path, write_slices(tmp_path / "slices", rows, manifest))
    assert "slice 2001: id_in_one_slice failed" in str(err.value)
    assert "slice 2002: id_in_one_slice failed" in str(err.value)
    results = json.loads((tmp_path / "validation" / "results.json").read_text())
    rec = next(r for r in results["slices"][1]["expectations"] if r["expectation"] == "id_in_one_slice")
    assert rec["examples"][0]["id"] == moved["id"].iloc[0]


def test_non_critical_share_checks_warn_without_closing_the_gate(tmp_path):
    rows, manifest, _ = make_slices(k=4, per_slice=150, task="multiclass", n_classes=3, label_shift=0.8)
    slices = write_slices(tmp_path / "slices", rows, manifest)
    summary = _run(tmp_path, slices, {"relative": {"max_change": 0.05}, "class_share": {"min": 0.2, "max": 0.6}})
    assert summary["passed"] is True
    warned = {w["expectation"] for w in summary["warnings"]}
    assert warned == {"share_vs_history", "class_share"}
    with pytest.raises(gate.ValidationFailed, match="share_vs_history"):
        _run(tmp_path, slices, {"relative": {"max_change": 0.05}, "critical": ["share_vs_history"]})


@pytest.mark.parametrize("task", ["multilabel", "regression"])
def test_other_tasks_pass_when_clean_and_catch_bad_label_values(tmp_path, task):
    rows, manifest, _ = make_slices(k=3, per_slice=100, task=task, n_classes=3)
    slices = write_slices(tmp_path / "slices", rows, manifest)
    assert _run(tmp_path, slices)["passed"]
    col = "label_c1" if task == "multilabel" else "label"
    rows.loc[rows.index[:2], col] = 7
    slices = write_slices(tmp_path / "slices", rows, manifest)
    with pytest.raises(gate.ValidationFailed, match=f"slice 2000: label_set:{col} failed"):
        _run(tmp_path, slices, {"label_values": [1.0, 2.0, 3.0, 4.0, 5.0]} if task == "regression" else None)


def test_wrong_dtype_and_bad_config_are_reported(tmp_path):
    rows, manifest, _ = make_slices(k=2, per_slice=60)
    rows["timestamp"] = rows["timestamp"].dt.tz_localize(None)
    with pytest.raises(gate.ValidationFailed, match="types failed.*timestamp"):
        _run(tmp_path, write_slices(tmp_path / "slices", rows, manifest))
    rows, manifest, _ = make_slices(k=2, per_slice=60)
    with pytest.raises(gate.ValidationFailed, match="slice 2000: columns failed"):
        _run(tmp_path, write_slices(tmp_path / "slices", rows.drop(columns=["period"]), manifest))
    with pytest.raises(ConfigError, match="min_row"):
        ValidationConfig.from_params({"min_row": 3})
    with pytest.raises(ConfigError, match="override"):
        ValidationConfig.from_params({"override": "2002"})


def _hint(message: str) -> list[str]:
    """The override list the failure message suggests, read as params.yaml would read it."""
    line = next(ln for ln in message.splitlines() if "validation.override:" in ln)
    return yaml.safe_load(line.split("validation.override:", 1)[1])


@pytest.mark.parametrize("k, wildcard", [(4, False), (6, True)])
def test_the_suggested_override_names_every_failing_slice_and_opens_the_gate(tmp_path, k, wildcard):
    rows, manifest, _ = make_slices(k=k, per_slice=120, task="binary")
    rows = rows[~((rows["slice"] >= 1) & (rows["label"] == 1))].copy()   # a class gone from slice 1 on
    last = rows[rows["slice"] == k - 1].iloc[:5]                          # duplicated ids in the last
    rows = pd.concat([rows, last]).sort_values(["slice", "id"], kind="stable").reset_index(drop=True)
    slices = write_slices(tmp_path / "slices", rows, manifest)
    with pytest.raises(gate.ValidationFailed) as err:
        _run(tmp_path, slices)
    failures = json.loads((tmp_path / "validation" / "summary.json").read_text())["failures"]
    failing = {(f["slice"], f["expectation"]) for f in failures}
    assert len(failing) >= k  # classes_present on k - 1 slices, unique_id on the last
    hint = _hint(str(err.value))
    last_label = str(2000 + k - 1)
    assert f"{last_label}:unique_id" in hint
    if wildcard:  # k - 1 = 5 slices miss a class: one entry covers them
        assert "*:classes_present" in hint and not any(h.endswith(":classes_present") and h[0] != "*" for h in hint)
    else:
        assert {f"{s}:classes_present" for s in ("2001", "2002", "2003")} <= set(hint)
    summary = _run(tmp_path, slices, {"override": hint})
    assert summary["passed"] is True
    assert {(o["slice"], o["expectation"]) for o in summary["overridden"]} == failing


def test_override_rules_deduplicate_and_keep_order():
    fails = [{"slice": s, "expectation": c} for s, c in
             (("2001", "a"), ("2001", "a"), ("2003", "b"), ("2002", "a"))]
    assert gate.override_rules(fails) == ["2001:a", "2002:a", "2003:b"]
    assert gate.override_rules(fails, wildcard_from=2) == ["*:a", "2003:b"]
    assert gate.override_rules([]) == []


def _tweets(tmp_path, classes=None):
    """A multiclass table (tweets by client) whose rare clients come and go: `lite` only in 2001 and
    2003, `bot` only in 2002; `web` and `app` in every year. Ingested and sliced by year."""
    from testkit.pipeline import Paths, prepare

    raw = tmp_path / "raw"
    raw.mkdir(exist_ok=True)
    rows = ["year,len,client"]
    for year in range(2000, 2004):
        rare = {2001: "lite", 2003: "lite", 2002: "bot"}.get(year)
        rows += [f"{year},{k},{rare if rare and k % 20 == 0 else 'web' if k % 2 else 'app'}" for k in range(60)]
    (raw / "tweets.csv").write_text("\n".join(rows) + "\n")
    options = {"timestamp": "year", "label": "client", "features": {"numeric": ["len"]}}
    if classes:
        options["classes"] = classes
    params = parse_params({"dataset": {"name": "tweets", "source": "table", "path": str(raw), "task": "multiclass",
                                       "options": options}, "slicing": {"min_samples": 10}, "models": {"Prior": {}}})
    paths = Paths(tmp_path / "out")
    prepare(params, paths)
    return params, paths


def test_multiclass_classes_that_come_and_go_are_warnings_with_counts(tmp_path):
    params, paths = _tweets(tmp_path)
    summary = validate_stage.run(params, paths.slices, paths.validation, echo=lambda _: None)
    assert summary["passed"] is True and summary["failures"] == []
    absent = {w["slice"]: w["observed"] for w in summary["warnings"] if w["expectation"] == "classes_in_slice"}
    assert sorted(absent) == ["2000", "2001", "2002", "2003"]
    assert absent["2000"] == {"app": 30, "bot": 0, "lite": 0, "web": 30}
    assert absent["2002"] == {"app": 27, "bot": 3, "lite": 0, "web": 30}
    results = json.loads((paths.validation / "results.json").read_text())["slices"]
    present = [r for s in results for r in s["expectations"] if r["expectation"] == "classes_present"]
    assert len(present) == 1 and present[0]["success"] and present[0]["critical"]  # checked once, on the last slice


def test_multiclass_class_absent_from_every_training_window_still_fails(tmp_path):
    params, paths = _tweets(tmp_path, classes=["app", "bot", "lite", "web", "sms"])
    with pytest.raises(gate.ValidationFailed) as err:
        validate_stage.run(params, paths.slices, paths.validation, echo=lambda _: None)
    assert "slice 2003: classes_present failed" in str(err.value) and '"sms": 0' in str(err.value)
    assert [f["expectation"] for f in json.loads((paths.validation / "summary.json").read_text())["failures"]] == [
        "classes_present"]


def test_the_gate_records_what_validating_every_suite_in_summary_records(tmp_path):
    """GX's BASIC format first, SUMMARY again only for a suite with a failure: the same records as
    SUMMARY throughout (examples of what failed included), for clean slices, broken ones, and
    multiclass warnings."""
    rows, manifest, _ = make_slices(k=3, per_slice=100, task="binary")
    clean, again = gx_formats_agree(write_slices(tmp_path / "clean", rows, manifest))
    assert again == 0 and all(r["success"] for s in clean for r in s["expectations"])

    broken, again = gx_formats_agree(_corrupted(tmp_path))
    failed = {r["expectation"]: r for s in broken if s["label"] == BAD for r in s["expectations"] if not r["success"]}
    assert set(BROKEN) <= set(failed) and 1 <= again < 3 * 4  # only the suites of slice 2002 with a failure
    assert failed["unique_id"]["examples"] and failed["timestamp_in_period"]["examples"]  # SUMMARY's, kept

    (tmp_path / "tweets").mkdir()
    _, paths = _tweets(tmp_path / "tweets")
    _, again = gx_formats_agree(paths.slices)
    assert again >= 1  # classes_in_slice warns: a failed, non-critical check
