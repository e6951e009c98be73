"""The long-format matrix CSVs DVC plots, and the Vega-Lite template that draws them."""

import csv
import json
from pathlib import Path

import numpy as np

from driftmatrix.analysis.matrixfile import DriftMatrices
from driftmatrix.analysis.tables import Cohort
from driftmatrix.reporting import dvcfiles

REPO = Path(__file__).resolve().parents[2]
SLICES = ["1950", "1951", "1952"]


def _model(name, seed_values, **extra):
    return DriftMatrices(name, SLICES, np.asarray(seed_values, dtype=float), seeds=[0, 1], extra=extra)


def _read(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_one_row_per_cell_with_mean_std_and_n_eval(tmp_path):
    a = np.arange(9, dtype=float).reshape(3, 3)
    stack = np.stack([a, a + 2])
    stack[:, 2, 0] = np.nan
    n_eval = [[10, 11, 12], [20, 21, None], [30, 31, 32]]
    cohort = Cohort({"A": _model("A", stack, n_eval=n_eval), "B": _model("B", stack[:1])})
    (tmp_path / "Gone.csv").write_text("stale\n")
    written = dvcfiles.write_matrix_csvs(cohort, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.csv", "B.csv"] == sorted(p.name for p in written)
    rows = _read(tmp_path / "A.csv")
    assert list(rows[0]) == list(dvcfiles.COLUMNS) and len(rows) == 9
    assert rows[1] == {"trained_up_to": "1950", "evaluated": "1951", "value": "2", "std": "1.41421", "n_eval": "11"}
    assert rows[5]["n_eval"] == ""                       # unknown count for that cell
    assert rows[6]["value"] == rows[6]["std"] == ""       # never scored
    b = _read(tmp_path / "B.csv")
    assert b[4]["value"] == "4" and b[4]["std"] == "" and b[4]["n_eval"] == ""  # one seed, no n_eval


def test_misshapen_n_eval_is_ignored_not_a_crash():
    m = _model("A", np.zeros((1, 3, 3)), n_eval=[[1, 2], [3, 4]])
    assert dvcfiles.n_eval_grid(m) is None
    assert all(r[4] is None for r in dvcfiles.long_rows(m))


def test_template_and_plot_declaration_match_the_csv_columns():
    import yaml

    template = json.loads((REPO / ".dvc" / "plots" / "drift_matrix.json").read_text())
    assert template["data"]["values"] == "<DVC_METRIC_DATA>"
    assert template["facet"]["column"]["field"] == "rev"           # revisions side by side
    text = json.dumps(template)
    for field in ("value", "std", "n_eval"):
        assert f"datum.{field}" in text
    plots = yaml.safe_load((REPO / "dvc.yaml").read_text())["plots"]
    decl = next(p["metrics/matrices"] for p in plots if "metrics/matrices" in p)
    assert decl["template"] == "drift_matrix" and {decl["x"], decl["y"]} == {"evaluated", "trained_up_to"}
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["matrices"]
    assert {"metrics/matrices": {"cache": False}} in stage["outs"]
    assert stage["metrics"] == [{"metrics/metrics.json": {"cache": False}}]
