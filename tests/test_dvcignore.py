"""Bytecode that Python writes into a source folder leaves a stage whose dependency is that folder
up to date: the repo's .dvcignore keeps __pycache__/ and *.pyc out of DVC's directory hashes."""

from __future__ import annotations

import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_bytecode_in_a_directory_dependency_leaves_the_stage_up_to_date(tmp_path, monkeypatch):
    from dvc.repo import Repo

    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / ".dvcignore", tmp_path / ".dvcignore")
    pkg = tmp_path / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "mod.py").write_text("X = 1\n")
    repo = Repo.init(tmp_path, no_scm=True)
    repo.stage.add(name="use", cmd="echo ran > out.txt", deps=["src/pkg"], outs=["out.txt"])
    repo.reproduce("use")
    assert repo.status() == {}

    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00bytecode")
    (pkg / "stray.pyc").write_bytes(b"\x00bytecode")
    assert repo.status() == {}, "bytecode changed the hash of a directory dependency"

    (pkg / "mod.py").write_text("X = 2\n")           # a real source change still counts
    assert "use" in repo.status()
