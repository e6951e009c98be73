"""Every preset holds every params.yaml section a dvc.yaml stage names: DVC refuses to run a
stage whose parameter is missing ("Parameters 'advisor' are missing from 'params.yaml'")."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def stage_sections() -> set[str]:
    """Top-level params.yaml sections the stages of dvc.yaml depend on (``models.${key}``: models)."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    found = set()
    for spec in stages.values():
        for p in (spec.get("do") or spec).get("params", []):
            names = [p] if isinstance(p, str) else list(p)
            found |= {n.split(".")[0] for n in names}
    return found


@pytest.mark.parametrize("preset", sorted(p.name for p in (REPO / "presets").glob("*.yaml")))
def test_preset_has_every_section_a_stage_reads(preset):
    raw = yaml.safe_load((REPO / "presets" / preset).read_text())
    missing = sorted(stage_sections() - set(raw))
    assert not missing, f"presets/{preset} lacks {missing}: `make repro PARAMS=presets/{preset}` would stop in DVC"


def test_the_sections_are_read_from_dvc_yaml():
    assert {"dataset", "models", "train", "advisor", "estimate", "saliency"} <= stage_sections()
