"""The committed data.dvc is the pointer of the built-in data that `make data` writes today.

`make data` runs `driftmatrix data generate` and `dvc add data`: a generator change (new image
bytes, a new field in the .complete stamp) that forgets to update data.dvc leaves a fresh
`make repro` with a modified data.dvc in `git status`. This test regenerates the data from the
repo's params.yaml in a temporary DVC repo and compares DVC's own pointer with the committed one.
"""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[2]


def _pointer(path):
    """The (path, md5, size, nfiles) of the single out of a .dvc file."""
    out, = yaml.safe_load(path.read_text())["outs"]
    return out["path"], out["md5"], out["size"], out["nfiles"]


def test_committed_data_pointer_matches_generated_builtin_data(tmp_path, monkeypatch):
    from dvc.repo import Repo

    from driftmatrix.cli import app

    committed = _pointer(REPO / "data.dvc")
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert params["dataset"]["path"].startswith(committed[0] + "/"), "dataset.path is not under data.dvc's out"

    monkeypatch.chdir(tmp_path)          # dataset.path is relative, as in `make data`
    result = CliRunner().invoke(app, ["data", "generate", "-p", str(REPO / "params.yaml")])
    assert result.exit_code == 0, result.output

    repo = Repo.init(tmp_path, no_scm=True)
    repo.add(str(tmp_path / committed[0]))
    generated = _pointer(tmp_path / f"{committed[0]}.dvc")
    assert generated == committed, (
        f"data.dvc is stale: `make data` now gives {generated}; regenerate with "
        "`driftmatrix data generate && dvc add data` on a fresh clone and commit data.dvc")
