"""summarize / recommend / compare on small hand-made matrix folders."""

import csv
import io
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from driftmatrix.analysis import matrixfile
from driftmatrix.cli import app

SLICES = ["2000", "2001", "2002", "2003"]


def _toeplitz(curve):
    k = len(curve)
    m = np.full((k, k), np.nan)
    for i in range(k):
        m[i, i:] = curve[: k - i]
        m[i, :i] = curve[0] - 1.0  # backward cells
    return m


def _write(folder, name, curves, published=False):
    folder.mkdir(exist_ok=True)
    stack = np.stack([_toeplitz(c) for c in curves])
    m = matrixfile.DriftMatrices(model=name, slices=SLICES, seed_values=stack, unit="%",
                                 seeds=None if published else list(range(len(curves))))
    d = matrixfile.to_dict(m)
    if published:
        d = {k: d[k] for k in ("title", "metric", "unit", "higherIsBetter", "slices", "values")}
    (folder / f"{name}.json").write_text(json.dumps(d))


@pytest.fixture
def folders(tmp_path):
    ours, pub = tmp_path / "ours", tmp_path / "pub"
    # CNN-S: sharp (90, 84, 72, 50); MLP-S: flat (80, 76, 72, 68). Served scores over periods 1-3
    # (lag 0 never served): H1 85/76 (lag 1), H2 (84+72+84)/3 = 81/74.7, H3 (84+72+50)/3 = 69.7/72
    # -> MLP-S leads from H=3
    _write(ours, "CNN-S", [[90, 84, 72, 50], [92, 86, 74, 52]])
    _write(ours, "MLP-S", [[80, 76, 72, 68]])
    _write(pub, "CNN-S", [[89, 70, 50, 30]], published=True)
    return ours, pub


def test_summarize_csv_and_json(folders):
    runner = CliRunner()
    res = runner.invoke(app, ["summarize", str(folders[0]), "--format", "csv"])
    assert res.exit_code == 0, res.output
    rows = {r["model"]: r for r in csv.DictReader(io.StringIO(res.output))}
    assert rows["MLP-S"]["family"] == "MLP"
    assert float(rows["MLP-S"]["in_distribution"]) == pytest.approx(80.0)
    # future cells of a 4 x 4 Toeplitz matrix: lags 1,1,1,2,2,3 -> (3*76 + 2*72 + 68) / 6
    assert float(rows["MLP-S"]["future"]) == pytest.approx((3 * 76 + 2 * 72 + 68) / 6)
    assert float(rows["MLP-S"]["backward"]) == pytest.approx(79.0)
    res = runner.invoke(app, ["summarize", str(folders[0])])
    recs = json.loads(res.output)
    assert [r["model"] for r in recs] == ["CNN-S", "MLP-S"]
    assert recs[0]["in_distribution"] == pytest.approx(91.0)  # seed mean of 90 and 92
    assert set(recs[0]) == {"model", "family", "in_distribution", "future", "decay",
                            "td_score", "backward"}


def test_recommend(folders):
    runner = CliRunner()
    res = runner.invoke(app, ["recommend", str(folders[0])])
    assert res.exit_code == 0, res.output
    assert "H=3: CNN-S -> MLP-S" in res.output
    res = runner.invoke(app, ["recommend", str(folders[0]), "--horizon", "2"])
    lines = [l.split() for l in res.output.splitlines() if l.strip().startswith(("1 ", "2 "))]
    assert lines[0][:2] == ["1", "CNN-S"] and lines[0][3] == "81.0"  # (84+72+84)/3, (86+74+86)/3
    assert lines[0][4] == "1.4"  # seed std sqrt(2)


def test_compare(folders):
    res = CliRunner().invoke(app, ["compare", str(folders[0]), str(folders[1])])
    assert res.exit_code == 0, res.output
    row = [l for l in res.output.splitlines() if l.startswith("CNN-S")][0].split()
    assert row[1:4] == ["91.00", "89.00", "2.00"]  # ID ours / published / difference
    assert row[-1] == "16"  # every cell filled on both sides


def test_a_folder_without_matrices_is_a_one_line_error(tmp_path):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "driftmatrix", "recommend", str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == f"error: {tmp_path}: no drift-matrix JSON files found (run `driftmatrix matrices` first)"
