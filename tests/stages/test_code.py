"""The code stage (stages/code.py): each stage's code digested file by file, comments, docstrings
and log lines aside; what `dvc repro` reruns a stage for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driftmatrix.errors import ConfigError
from driftmatrix.stages import code as stage
from driftmatrix.units.code import source_digest

BASE = '''import logging

log = logging.getLogger(__name__)


def f(x):
    y = x + 1
    log.info("y is %s", y)
    return y
'''


@pytest.mark.parametrize("cosmetic", [
    BASE.replace("def f(x):\n", "def f(x):\n    \"\"\"Add one.\"\"\"\n"),
    '"""A module docstring."""\n' + BASE + "# a comment at the end\n",
    BASE.replace('log.info("y is %s", y)', 'log.warning("y, reworded: %s", y)'),
    BASE.replace("y = x + 1", "y = (x +\n         1)  # why"),
])
def test_comments_docstrings_formatting_and_log_lines_change_no_digest(cosmetic):
    assert source_digest(cosmetic) == source_digest(BASE)


@pytest.mark.parametrize("changed", [
    BASE.replace("x + 1", "x + 2"),
    BASE.replace("import logging", "import logging\nimport json"),
    BASE.replace('    log.info("y is %s", y)\n', "    if y:\n        log.info('y')\n"),  # a branch: kept, as `pass`
    BASE + "\nLIMIT = 3\n",
])
def test_a_statement_changes_the_digest(changed):
    assert source_digest(changed) != source_digest(BASE)


def _project(tmp_path):
    pkg = tmp_path / "src" / "pkg"
    (pkg / "sub" / "__pycache__").mkdir(parents=True)
    (pkg / "a.py").write_text(BASE)
    (pkg / "sub" / "b.py").write_text("B = 1\n")
    (pkg / "sub" / "table.csv").write_text("x\n1\n")
    (pkg / "sub" / "__pycache__" / "b.cpython-311.pyc").write_bytes(b"\0bytecode")
    return {"one": ("src/pkg/a.py",), "both": ("src/pkg/a.py", "src/pkg/sub")}


def test_each_stage_lists_its_files_and_only_an_edit_of_its_code_changes_its_digest(tmp_path):
    table = _project(tmp_path)
    first = stage.stage_digests(tmp_path, table)
    assert list(first["one"]) == ["src/pkg/a.py"]
    assert list(first["both"]) == ["src/pkg/a.py", "src/pkg/sub/b.py", "src/pkg/sub/table.csv"]  # bytecode aside
    (tmp_path / "src" / "pkg" / "sub" / "b.py").write_text('"""Docs."""\nB = 1  # one\n')
    assert stage.stage_digests(tmp_path, table) == first
    (tmp_path / "src" / "pkg" / "sub" / "table.csv").write_text("x\n2\n")  # not Python: its bytes
    second = stage.stage_digests(tmp_path, table)
    assert second["one"] == first["one"] and second["both"] != first["both"]


def test_run_writes_one_file_per_stage_of_the_real_table(tmp_path):
    from driftmatrix.units.code import STAGE_CODE

    repo = Path(stage.__file__).resolve().parents[3]
    digests = stage.run(repo, tmp_path / "code")
    assert sorted(p.stem for p in (tmp_path / "code").iterdir()) == sorted(STAGE_CODE)
    train = json.loads((tmp_path / "code" / "train.json").read_text())
    assert train == digests["train"] and "src/driftmatrix/learn/fit.py" in train
    assert "src/driftmatrix/reporting/html.py" not in train and "src/driftmatrix/reporting/html.py" in digests["report"]


def test_a_missing_entry_and_a_file_that_is_no_python_are_one_line_errors(tmp_path):
    table = _project(tmp_path)
    with pytest.raises(ConfigError, match="src/pkg/gone.py is no file or folder"):
        stage.stage_digests(tmp_path, {**table, "x": ("src/pkg/gone.py",)})
    (tmp_path / "src" / "pkg" / "a.py").write_text("def f(:\n")
    with pytest.raises(ConfigError, match=r"a\.py: not valid Python"):
        stage.stage_digests(tmp_path, table)


def test_a_python_file_digested_before_is_not_parsed_again_and_a_broken_cache_only_costs_time(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    table = _project(tmp_path)
    first = stage.stage_digests(tmp_path, table)
    parsed = []
    monkeypatch.setattr(stage, "source_digest", lambda text, name: parsed.append(Path(name).name) or source_digest(text))
    assert stage.stage_digests(tmp_path, table) == first and parsed == []  # kept by their bytes
    (tmp_path / "src" / "pkg" / "sub" / "b.py").write_text("B = 2\n")
    second = stage.stage_digests(tmp_path, table)
    assert parsed == ["b.py"] and second["one"] == first["one"] and second["both"] != first["both"]
    [kept] = (tmp_path / "cache" / "driftmatrix" / "source-digests").iterdir()
    kept.write_text("[not json")
    assert stage.stage_digests(tmp_path, table) == second and sorted(parsed) == ["a.py", "b.py", "b.py"]
    monkeypatch.setenv("XDG_CACHE_HOME", str(kept))  # a file where the cache's folder would be
    assert stage.stage_digests(tmp_path, table) == second
