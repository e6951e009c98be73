"""The HTML report: self-contained, and every image decodes in a real headless browser."""

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from driftmatrix.analysis.matrixfile import DriftMatrices
from driftmatrix.analysis.tables import Cohort
from driftmatrix.reporting import html

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
PROBE = ("<script>window.addEventListener('load',function(){var r=[];"
         "for(var i=0;i<document.images.length;i++){var im=document.images[i];"
         "r.push(im.complete&&im.naturalWidth>0?im.naturalWidth:0)}"
         "var p=document.createElement('pre');p.id='img-check';p.textContent=r.join(',');"
         "document.body.appendChild(p)})</script>")


@pytest.fixture(scope="module")
def cohort():
    slices = [f"{y}-H{h}" for y in (2020, 2021, 2022) for h in (1, 2)]
    rng = np.random.default_rng(1)
    models = {n: DriftMatrices(n, slices, rng.uniform(0.4, 0.9, (3, 6, 6)), metric="Balanced MSE",
                               unit="", higher_is_better=False, dataset="toy", family=f)
              for n, f in (("FFN-S", "FFN"), ("BiGRU-S", "Recurrent"))}
    return Cohort(models)


@pytest.fixture(scope="module")
def report(cohort, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    (root / "audit").mkdir()
    (root / "audit" / "report.html").write_text("<html></html>")
    return html.run(None, root / "report" / "report.html", audit=root / "audit" / "report.html",
                    cohort=cohort)


def test_report_is_self_contained(report):
    text = report.read_text()
    assert "<script" not in text and "http://" not in text and "https://" not in text
    assert text.count('<img alt=') == 7
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]+)"', text))
    assert 'href="../audit/report.html"' in text
    assert "2022-H2" in text and "lower is better" in text
    for section in ("summary", "robustness", "cutoffs", "families", "advisor", "figures", "audit"):
        assert f'id="{section}"' in text


def test_no_audit_section_without_audit(cohort, tmp_path):
    text = html.run(None, tmp_path / "r.html", audit=tmp_path / "missing.html", cohort=cohort).read_text()
    assert 'id="audit"' not in text


def test_images_decode_in_headless_chromium(report, tmp_path):
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no chromium / google-chrome on PATH")
    probe = tmp_path / "probe.html"
    probe.write_text(report.read_text().replace("</body>", PROBE + "</body>"))
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=90)
    found = re.search(r'<pre id="img-check">([^<]*)</pre>', out.stdout)
    assert found, out.stderr[-2000:]
    widths = [int(w) for w in found.group(1).split(",")]
    assert len(widths) == 7 and all(w > 0 for w in widths), widths
