"""`driftmatrix data generate` writes only the built-in datasets: a table of the user's that is
not in place yet is a one-line error naming its path, never a folder of generated data."""

from __future__ import annotations

import yaml
from typer.testing import CliRunner

from driftmatrix.cli import app


def _generate(tmp_path, options):
    raw = {"dataset": {"name": "mine", "source": "table", "path": str(tmp_path / "data" / "mine"),
                       "task": "binary", "options": options}, "models": {"Prior": {}}}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    return CliRunner().invoke(app, ["data", "generate", "-p", str(tmp_path / "params.yaml")])


def test_a_missing_table_of_ones_own_is_refused(tmp_path):
    done = _generate(tmp_path, {"timestamp": "date", "input": "text", "label": "spam"})
    assert done.exit_code != 0
    assert "no generator for this table" in str(done.exception) and str(tmp_path / "data" / "mine") in str(done.exception)
    assert not (tmp_path / "data" / "mine").exists()


def test_the_built_in_table_is_generated(tmp_path):
    done = _generate(tmp_path, {"timestamp": "year", "label": "churn", "id": "id", "features": "auto"})
    assert done.exit_code == 0, done.output
    assert (tmp_path / "data" / "mine" / "table.csv").stat().st_size > 0


def test_a_table_already_in_place_is_left_alone(tmp_path):
    folder = tmp_path / "data" / "mine"
    folder.mkdir(parents=True)
    (folder / "mine.csv").write_text("date,text,spam\n2020-01-01,hi,no\n")
    done = _generate(tmp_path, {"timestamp": "date", "input": "text", "label": "spam"})
    assert done.exit_code == 0 and "left as it is" in done.output
