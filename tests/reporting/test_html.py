"""The HTML report: self-contained, every image decodes in a real headless browser, and hovering
a heatmap cell shows its value, seed std, n_eval and seeds."""

import html as html_lib
import json
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


HOVER = ("<script>window.addEventListener('load',function(){"
         "function hover(model,i,j){var c=document.querySelector('canvas[data-model=\"'+model+'\"]'),"
         "r=c.getBoundingClientRect(),s=+c.dataset.cell,K=6;"
         "c.dispatchEvent(new MouseEvent('mousemove',{bubbles:true,"
         "clientX:r.left+(+c.dataset.left+(j+.5)*s)*r.width/c.width,"
         "clientY:r.top+(+c.dataset.top+(K-1-i+.5)*s)*r.height/c.height}));"
         "var t=document.getElementById('dm-tip');return t.hidden?'(hidden)':t.textContent}"
         "var out={ffn:hover('FFN-S',1,3),gru:hover('BiGRU-S',4,0),empty:hover('FFN-S',5,0)};"
         "var box=document.querySelector('#dm-curves input[data-model=\"BiGRU-S\"]');box.click();"
         "out.hidden=document.querySelector('#dm-curves g[data-model=\"BiGRU-S\"]').style.display;"
         "out.shown=document.querySelector('#dm-curves g[data-model=\"FFN-S\"]').style.display;"
         "var p=document.createElement('pre');p.id='hover-check';p.textContent=JSON.stringify(out);"
         "document.body.appendChild(p)})</script>")
N_EVAL = [[100 + 10 * i + j for j in range(6)] for i in range(6)]


@pytest.fixture(scope="module")
def cohort():
    slices = [f"{y}-H{h}" for y in (2020, 2021, 2022) for h in (1, 2)]
    rng = np.random.default_rng(1)
    ffn = rng.uniform(0.4, 0.9, (3, 6, 6))
    ffn[:, 5, 0] = np.nan  # a cell never scored
    ffn[2, 1, 3] = np.nan  # one seed missing in the hovered cell
    models = {
        "FFN-S": DriftMatrices("FFN-S", slices, ffn, metric="Balanced MSE", unit="", higher_is_better=False,
                               dataset="toy", family="FFN", seeds=[0, 1, 2],
                               extra={"n_eval": N_EVAL, "stale": 7, "window": "expanding", "precision": "bf16"}),
        "BiGRU-S": DriftMatrices("BiGRU-S", slices, rng.uniform(0.4, 0.9, (3, 6, 6)), metric="Balanced MSE",
                                 unit="", higher_is_better=False, dataset="toy", family="Recurrent")}
    return Cohort(models)


def render_dom(page: Path, tmp_path: Path, script: str) -> str:
    """The DOM of ``page`` with ``script`` appended, after headless Chromium ran it (skip without one)."""
    browser = next((shutil.which(b) for b in BROWSERS if shutil.which(b)), None)
    if browser is None:
        pytest.skip("no chromium / google-chrome on PATH")
    probe = tmp_path / "probe.html"
    probe.write_text(page.read_text().replace("</body>", script + "</body>"))
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=10000", "--dump-dom", probe.as_uri()],
                         capture_output=True, text=True, timeout=90)
    assert out.stdout, out.stderr[-2000:]
    return out.stdout


@pytest.fixture(scope="module")
def report(cohort, tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    (root / "audit").mkdir()
    (root / "audit" / "report.html").write_text("<html></html>")
    return html.run(cohort, root / "report" / "report.html", audit=root / "audit" / "report.html")


def test_report_is_self_contained(report):
    text = report.read_text()
    assert "http://" not in text and "https://" not in text and "<link" not in text and "@import" not in text
    scripts = re.findall(r"<script[^>]*>", text)
    assert scripts and all("src=" not in tag for tag in scripts)  # inline only
    assert text.count('<img alt=') == 7
    assert all(src.startswith("data:image/png;base64,") for src in re.findall(r'src="([^"]+)"', text))
    assert 'href="../audit/report.html"' in text
    assert "2022-H2" in text and "lower is better" in text
    for section in ("summary", "interactive", "robustness", "cutoffs", "families", "advisor", "figures", "audit"):
        assert f'id="{section}"' in text


def test_no_audit_section_without_audit(cohort, tmp_path):
    text = html.run(cohort, tmp_path / "r.html", audit=tmp_path / "missing.html").read_text()
    assert 'id="audit"' not in text


def test_images_decode_in_headless_chromium(report, tmp_path):
    found = re.search(r'<pre id="img-check">([^<]*)</pre>', render_dom(report, tmp_path, PROBE))
    assert found
    widths = [int(w) for w in found.group(1).split(",")]
    assert len(widths) == 7 and all(w > 0 for w in widths), widths


def test_inline_data_holds_every_cell_with_its_seeds_and_n_eval(report, cohort):
    text = report.read_text()
    data = json.loads(re.search(r'<script type="application/json" id="dm-data">(.*?)</script>', text, re.S).group(1))
    assert data["slices"] == cohort.slices and [m["name"] for m in data["models"]] == ["BiGRU-S", "FFN-S"]
    gru, ffn = data["models"]
    np.testing.assert_allclose(np.array(ffn["mean"], dtype=float), cohort.means["FFN-S"], atol=1e-5)
    assert ffn["mean"][5][0] is None and ffn["n_eval"] == N_EVAL and ffn["seeds"] == [0, 1, 2]
    assert ffn["n_cell"][1][3] == 2 and ffn["n_cell"][0][0] == 3
    assert gru["n_eval"] is None and gru["seeds"] is None and gru["n_cell"] is None  # every seed everywhere
    assert text.count("<canvas data-model=") == 2 and text.count('<input type="checkbox" checked data-model=') == 2


def test_training_setup_is_shown_only_when_known(report, cohort, tmp_path):
    text = report.read_text()
    setup = re.search(r"<h3>Training setup</h3>(<table>.*?</table>)", text).group(1)
    for cell in ("training window", "precision", "stale rows", "expanding", "bf16", ">7<", "0, 1, 2"):
        assert cell in setup
    assert setup.count("n/a") == 3  # BiGRU-S has none of them
    plain = Cohort({n: DriftMatrices(n, m.slices, m.seed_values, metric=m.metric, unit="",
                                     higher_is_better=False) for n, m in cohort.models.items()})
    assert "Training setup" not in html.run(plain, tmp_path / "plain.html").read_text()


def test_hovering_a_heatmap_cell_shows_its_value_std_n_eval_and_seeds(report, cohort, tmp_path):
    found = re.search(r'<pre id="hover-check">(.*?)</pre>', render_dom(report, tmp_path, HOVER), re.S)
    assert found
    out = json.loads(html_lib.unescape(found.group(1)))
    ffn = cohort.models["FFN-S"]
    value, std = np.nanmean(ffn.seed_values[:, 1, 3]), np.nanstd(ffn.seed_values[:, 1, 3], ddof=1)
    assert out["ffn"].splitlines() == [
        "FFN-S · trained up to 2020-H2 · evaluated 2021-H2 (future, lag +2)",
        f"value {value:.3f} · seed std {std:.3f}",
        "n_eval 113 · seeds 2 of 3 (0, 1, 2)"]
    gru = cohort.models["BiGRU-S"].mean[4, 0]
    assert out["gru"].splitlines()[0] == "BiGRU-S · trained up to 2022-H1 · evaluated 2020-H1 (past, lag -4)"
    assert f"value {gru:.3f}" in out["gru"] and "n_eval n/a · seeds 3 of 3 (ids not recorded)" in out["gru"]
    assert out["empty"].splitlines()[1] == "not scored"
    assert out["hidden"] == "none" and out["shown"] == ""  # unticking a model hides its curve
