"""Golden test: the published Yearbook tables follow from the published matrices."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from driftmatrix.analysis import matrixfile
from driftmatrix.analysis.tables import Cohort

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO / ".." / "shared" / "reference" / "drift-happens-yearbook"

pytestmark = pytest.mark.skipif(not (REFERENCE / "tables.json").exists(),
                                reason="shared reference fixture not available")


@pytest.fixture(scope="module")
def cohort() -> Cohort:
    return Cohort(matrixfile.load_folder(REFERENCE))


@pytest.fixture(scope="module")
def tables() -> dict:
    return json.loads((REFERENCE / "tables.json").read_text())


def _r(x: float, decimals: int) -> float:
    return round(x, decimals) + 0.0  # +0.0 turns -0.0 into 0.0


def test_published_summary_csv(cohort):
    with (REFERENCE / "published_summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(r["model"] for r in rows) == sorted(cohort.models)
    for row in rows:
        s = cohort.summaries[row["model"]]
        ours = (_r(s.in_distribution, 1), _r(s.future, 1), _r(s.decay, 1))
        assert ours == (float(row["in_distribution"]), float(row["future"]), float(row["decay"])), row


def test_robustness_table_values_and_order(cohort, tables):
    d = tables["decimals"]
    ours = [[m, _r(f, d), _r(dec, d)] for m, f, dec in cohort.robustness()]
    assert ours == tables["robustness"]["rows"]


def test_cutoffs_labels_rows_and_rank_order(cohort, tables):
    d = tables["decimals"]
    assert [cohort.slices[i] for i in cohort.cutoff_indices] == [c["cutoff"] for c in tables["cutoffs"]]
    for i, published in zip(cohort.cutoff_indices, tables["cutoffs"]):
        ours = [[rank, m, _r(a, d), _r(b, d), _r(c, d)] for rank, m, a, b, c in cohort.cutoff_table(i)]
        assert ours == published["rows"], published["cutoff"]


def test_by_family(cohort, tables):
    d = tables["decimals"]
    by_family = tables["byFamily"]
    assert by_family["cutoffLabels"] == [cohort.slices[i] for i in cohort.cutoff_indices]
    ours = {f: [[_r(a, d), _r(b, d)] for a, b in cells] for f, cells in cohort.family_cutoffs().items()}
    assert ours == {r["family"]: r["cells"] for r in by_family["rows"]}


def test_headline_numbers_of_protocol(cohort):
    """protocol.md section 7 (Table 5 of the paper)."""
    expected = {"MLP-S": (69.3, 62.3, 7.1), "CNN-M": (92.3, 78.4, 13.9), "CNN-L": (92.8, 79.0, 13.7),
                "ViT-S": (74.2, 64.6, 9.6), "DINOv3-S": (65.8, 57.9, 7.9)}
    for model, want in expected.items():
        s = cohort.summaries[model]
        assert (_r(s.in_distribution, 1), _r(s.future, 1), _r(s.decay, 1)) == want
