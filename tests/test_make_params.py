"""`make repro PARAMS=presets/x.yaml` applies a preset, but never over edits not yet committed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def project(tmp_path):
    if shutil.which("git") is None or shutil.which("make") is None:
        pytest.skip("needs git and make")
    shutil.copy(REPO / "Makefile", tmp_path)
    (tmp_path / "presets").mkdir()
    (tmp_path / "presets" / "x.yaml").write_text("dataset: {name: x}\n")
    (tmp_path / "params.yaml").write_text("dataset: {name: mine}\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(git + ["add", "."], cwd=tmp_path, check=True)
    subprocess.run(git + ["commit", "-qm", "base"], cwd=tmp_path, check=True)
    return tmp_path


def _params(project: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "params", "PARAMS=presets/x.yaml"], cwd=project, capture_output=True,
                          text=True)


def test_a_preset_replaces_committed_params(project):
    done = _params(project)
    assert done.returncode == 0, done.stderr
    assert (project / "params.yaml").read_text() == "dataset: {name: x}\n"


def test_a_preset_never_overwrites_uncommitted_edits(project):
    (project / "params.yaml").write_text("dataset: {name: mine, edited: true}\n")
    done = _params(project)
    assert done.returncode == 2
    assert "params.yaml has edits that are not committed" in done.stderr and "make exp PRESET=presets/x.yaml" in done.stderr
    assert "edited: true" in (project / "params.yaml").read_text()
    assert _params(project).returncode == 2  # and again: still refused, still kept
