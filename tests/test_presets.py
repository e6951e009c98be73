"""The paper presets reproduce the paper's slices: K, first cutoff and the per-cutoff picks.

Yearbook is checked on a table with the real per-year portrait counts. They are not published as
such; they follow from the published drift matrices (CC BY 4.0, ../shared/reference): a future
cell M[i, j] (j > i) scores all n_j portraits of year j and is a 5-seed mean, so every published
future value in column j is a multiple of 100 / (5 n_j). The smallest such n_j for every year
1906-2013, plus 5 for 1905 (no future column; its test split holds 2 portraits), add up to the
paper's 37,921 portraits. The shared-fixture test below re-checks that reading when available.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from driftmatrix.analysis.summary import cutoff_indices
from driftmatrix.config import load_params
from driftmatrix.data.table import DatasetMeta
from driftmatrix.data.periods import PERIOD_MONTHS
from driftmatrix.data.slicing import make_slices

REPO = Path(__file__).resolve().parents[1]
PRESETS = REPO / "presets"
REFERENCE = REPO.parent / "shared" / "reference" / "drift-happens-yearbook"

YEARBOOK_COUNTS = {
    1905: 5, 1906: 3, 1908: 23, 1909: 32, 1910: 23, 1911: 17, 1912: 12, 1913: 32, 1914: 14, 1915: 32,
    1916: 18, 1919: 18, 1922: 11, 1923: 47, 1924: 1, 1925: 109, 1926: 12, 1927: 48, 1928: 123, 1929: 152,
    1930: 154, 1931: 176, 1932: 243, 1933: 272, 1934: 326, 1935: 492, 1936: 154, 1937: 307, 1938: 402, 1939: 160,
    1940: 402, 1941: 93, 1942: 220, 1943: 704, 1944: 858, 1945: 834, 1946: 404, 1947: 379, 1948: 406, 1949: 178,
    1950: 387, 1951: 222, 1952: 328, 1953: 267, 1954: 581, 1955: 748, 1956: 269, 1957: 233, 1958: 272, 1959: 503,
    1960: 299, 1961: 367, 1962: 411, 1963: 259, 1964: 313, 1965: 651, 1966: 487, 1967: 1036, 1968: 336, 1969: 617,
    1970: 828, 1971: 198, 1972: 478, 1973: 313, 1974: 769, 1975: 819, 1976: 358, 1977: 542, 1978: 234, 1979: 637,
    1980: 602, 1981: 255, 1982: 494, 1983: 404, 1984: 1197, 1985: 497, 1986: 273, 1987: 583, 1988: 360, 1989: 777,
    1990: 801, 1991: 428, 1992: 472, 1993: 223, 1994: 532, 1995: 637, 1996: 417, 1997: 507, 1998: 634, 1999: 656,
    2000: 458, 2001: 627, 2002: 717, 2003: 411, 2004: 508, 2005: 442, 2006: 70, 2007: 243, 2008: 306, 2009: 505,
    2010: 521, 2011: 87, 2012: 126, 2013: 493,
}
IMAGE = DatasetMeta(name="yearbook", task="binary", input_kind="image", class_names=("F", "M"))


def yearbook_table(counts: dict[int, int]) -> pd.DataFrame:
    """One row per portrait; labels alternate within a year (both classes where a year has two)."""
    rows = [{"id": f"{y}_{k:04d}", "timestamp": pd.Timestamp(year=y, month=6, day=1, tz="UTC"),
             "period": str(y), "source": "yearbook", "label": (k + y) % 2}
            for y, n in counts.items() for k in range(n)]
    return pd.DataFrame(rows)


def picked(labels: list[str]) -> list[str]:
    return [labels[i] for i in cutoff_indices(len(labels))]


def test_yearbook_preset_keeps_the_papers_104_years_from_1905():
    params = load_params(PRESETS / "yearbook.yaml")
    rows, manifest = make_slices(yearbook_table(YEARBOOK_COUNTS), IMAGE, params.slicing)
    labels = [s["label"] for s in manifest["slices"]]
    assert len(labels) == 104 and labels[0] == "1905" and labels[-1] == "2013"
    assert manifest["dropped"] == [] and len(rows) == sum(YEARBOOK_COUNTS.values()) == 37_921
    assert picked(labels) == ["1905", "1944", "1978", "2012"]  # protocol section 2
    by_label = {s["label"]: s for s in manifest["slices"]}
    assert by_label["1905"]["n_test"] == 2  # the published 1905 diagonal is a mean of 2-portrait cells
    assert by_label["1924"]["n"] == 1


@pytest.mark.skipif(not (REFERENCE / "manifest.json").exists(), reason="shared reference fixture not available")
def test_yearbook_counts_and_slices_agree_with_the_published_matrices():
    published = json.loads((REFERENCE / "manifest.json").read_text())["slices"]
    assert published == [str(y) for y in YEARBOOK_COUNTS]
    doc = json.loads((REFERENCE / "CNN-M.json").read_text())
    values = np.array(doc["values"], dtype=float)
    for j, n in enumerate(YEARBOOK_COUNTS.values()):
        if j == 0:
            continue
        step = 100.0 / (5 * n)  # 5-seed mean of k / n_j in percent
        future = values[:j, j]
        assert np.all(np.abs(future / step - np.round(future / step)) * step < 1.5e-4), doc["slices"][j]


def test_yearbook_preset_gate_passes_the_tiny_years_and_still_reports_them(tmp_path):
    from driftmatrix.audit import gate
    from driftmatrix.stages import validate as validate_stage
    from testkit.slices import write_slices

    params = load_params(PRESETS / "yearbook.yaml")
    early = {y: n for y, n in YEARBOOK_COUNTS.items() if y <= 1926}  # every year under 20 portraits
    rows, manifest = make_slices(yearbook_table(early), IMAGE, params.slicing)
    manifest["data_version"] = "test"
    slices = write_slices(tmp_path / "slices", rows.drop(columns=["_pos", "_start", "_label"]), manifest)
    summary = validate_stage.run(params, slices, tmp_path / "validation", echo=lambda _: None)
    assert summary["passed"]
    warned = {(w["slice"], w["expectation"]) for w in summary["warnings"]}
    assert ("1924", "classes_present") in warned  # one portrait: one class, visible as a warning


def _periodic_table(start: str, end: str, freq: str = "7D") -> pd.DataFrame:
    stamps = pd.date_range(pd.Timestamp(start, tz="UTC"), pd.Timestamp(end, tz="UTC") + pd.Timedelta(hours=23),
                           freq=freq)
    return pd.DataFrame({"id": [f"r{k:06d}" for k in range(len(stamps))], "timestamp": stamps,
                         "period": "", "source": "x", "label": np.arange(len(stamps)) % 5 + 1.0})


@pytest.mark.parametrize("preset, k, first, last, cutoffs", [
    ("amazon", 20, "2014-H1", "2023-H2", ["2014-H1", "2017-H1", "2020-H1", "2023-H1"]),
    ("arxiv", 26, "2000", "2025", ["2000", "2008", "2016", "2024"]),
])
def test_text_presets_slice_the_protocol_periods(preset, k, first, last, cutoffs):
    params = load_params(PRESETS / f"{preset}.yaml")
    opts = params.dataset.options
    assert opts["period"] == params.slicing.period and params.slicing.width == 1
    table = _periodic_table(f"{opts['start']}-01-01" if isinstance(opts["start"], int) else opts["start"],
                            f"{opts['end']}-12-31" if isinstance(opts["end"], int) else opts["end"])
    # the first period holds a single row: the authors keep every observed period
    second = table["timestamp"].iloc[0] + pd.DateOffset(months=PERIOD_MONTHS[params.slicing.period])
    table = pd.concat([table.iloc[:1], table[table["timestamp"] >= second]])
    meta = DatasetMeta(name=preset, task="regression", input_kind="text")
    _, manifest = make_slices(table, meta, params.slicing)
    labels = [s["label"] for s in manifest["slices"]]
    assert (len(labels), labels[0], labels[-1]) == (k, first, last)
    assert manifest["slices"][0]["n"] == 1 and manifest["dropped"] == []
    assert picked(labels) == cutoffs



def test_every_preset_names_registered_models_and_the_prior_baseline():
    from driftmatrix.models.catalog import REGISTRY

    for path in sorted(PRESETS.glob("*.yaml")):
        models = load_params(path).models
        assert "Prior" in models, path.name
        unknown = sorted(set(models) - set(REGISTRY))
        assert not unknown, (path.name, unknown)
