"""`make matrices` runs only the matrices and report stages on the scores present: `dvc repro`
without --single-item would first retrain and rescore whatever is stale upstream."""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_matrices_reproduces_only_the_matrices_and_report_stages():
    out = subprocess.run(["make", "-n", "-o", ".venv/.installed", "-C", str(REPO), "matrices"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    dvc = [ln.split() for ln in out.stdout.splitlines() if re.match(r"\s*dvc\b", ln)]
    assert dvc == [["dvc", "repro", "--single-item", "matrices"], ["dvc", "repro", "--single-item", "report"]]
    assert not re.search(r"driftmatrix (train|evaluate)\b", out.stdout)


def test_make_help_says_what_matrices_does():
    line = next(ln for ln in (REPO / "Makefile").read_text().splitlines() if ln.startswith("matrices:"))
    help_text = line.split("## ", 1)[1]
    assert "only the matrices and report stages" in help_text and "trains and scores nothing" in help_text
