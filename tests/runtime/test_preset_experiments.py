"""A preset as `dvc exp run -S` overrides: DVC's own override code turns params.yaml into the preset."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from driftmatrix.runtime import dvc as presets

REPO = Path(__file__).resolve().parents[2]
PRESETS = sorted((REPO / "presets").glob("*.yaml"))
apply_overrides = pytest.importorskip("dvc.utils.hydra").apply_overrides


def applied(tmp_path: Path, current: dict, preset: dict, merge: bool = False) -> dict:
    """params.yaml after DVC applied the overrides (what `dvc exp run -S ...` runs on)."""
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(current, sort_keys=False))
    apply_overrides(str(path), list(presets.overrides(current, preset, merge)))
    return yaml.safe_load(path.read_text())


@pytest.mark.parametrize("preset", PRESETS, ids=[p.stem for p in PRESETS])
def test_every_shipped_preset_becomes_exactly_itself(preset, tmp_path):
    current = yaml.safe_load((REPO / "params.yaml").read_text())
    target = yaml.safe_load(preset.read_text())
    assert applied(tmp_path, current, target) == target


def test_awkward_values_survive_with_their_types(tmp_path):
    current = {"a": {"x": 1, "gone": [1, 2], "keep": {"deep": 1}}, "models": {"MLP-S": {}, "CNN-S": {"epochs": 3}}}
    target = {"a": {"x": 1.0, "keep": {}, "s": "it's a \\ path\\", "d": "2014-01-01", "t": "true",
                    "n": None, "b": False, "u": "sqlite:///x.db", "e": 2.5e-4, "l": [{"model": "CNN-S", "cutoff": 1955}]},
              "models": {"FFN-S": {}, "CNN-S": {"epochs": 3, "lr": 5.0e-4}}, "new": {"k": "v"}}
    out = applied(tmp_path, current, target)
    assert out == target
    for key in ("x", "e"):
        assert isinstance(out["a"][key], float)


def test_merge_keeps_what_a_partial_preset_leaves_out(tmp_path):
    current = {"train": {"epochs": 10}, "models": {"MLP-S": {}, "CNN-S": {"lr": 0.1, "epochs": 2}}}
    tuned = {"models": {"CNN-S": {"lr": 0.002, "batch_size": 32}}}
    assert applied(tmp_path, current, tuned, merge=True) == {
        "train": {"epochs": 10}, "models": {"MLP-S": {}, "CNN-S": {"lr": 0.002, "epochs": 2, "batch_size": 32}}}
    assert list(presets.overrides(current, current)) == []


def test_command_names_the_changes_and_rejects_keys_dvc_cannot_set(tmp_path):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": {"epochs": 10, "seeds": [0, 1]}, "models": {"MLP-S": {}}}))
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"train": {"epochs": 3, "seeds": [0]}, "models": {"MLP-S": {}}}))
    assert presets.command(preset, params, extra=["-n", "short"]) == [
        "dvc", "exp", "run", "-S", "train.epochs=3", "-S", "train.seeds=[0]", "-n", "short"]
    preset.write_text(yaml.safe_dump({"models": {"my model": {}}}))
    with pytest.raises(ValueError, match="'my model' under models"):
        presets.command(preset, params)
    preset.write_text("- not a mapping\n")
    with pytest.raises(SystemExit, match="p.yaml: a preset is a YAML mapping"):
        presets.command(preset, params)


def test_main_prints_without_running(tmp_path, capsys):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({"train": {"epochs": 10}}))
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump({"train": {"epochs": 2}}))
    assert presets.main([str(preset), "--params", str(params), "--print", "--", "--queue"]) == 0
    assert capsys.readouterr().out.strip() == "dvc exp run -S train.epochs=2 --queue"
