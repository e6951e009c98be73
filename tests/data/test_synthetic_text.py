"""Built-in text datasets: real formats (read by the real readers), determinism, documented drift."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from driftmatrix.cli import app
from driftmatrix.config import SyntheticConfig
from driftmatrix.data import synthetic_text as st
from driftmatrix.data.sources.amazon import read_amazon
from driftmatrix.data.sources.arxiv import read_arxiv

REVIEWS = SyntheticConfig(scenario="mixed", seed=0, first_year=2014, years=4, per_year=300)
PAPERS = SyntheticConfig(scenario="mixed", seed=0, first_year=2000, years=6, per_year=300)


def contains_any(texts, phrases) -> np.ndarray:
    return np.array([any(p in t for p in phrases) for t in texts])


@pytest.fixture(scope="module")
def reviews(tmp_path_factory):
    root = tmp_path_factory.mktemp("reviews")
    st.write_reviews(REVIEWS, root)
    return root, read_amazon(root, sample_size=0, start="2014-01-01", end="2017-12-31", progress=False)


@pytest.fixture(scope="module")
def papers(tmp_path_factory):
    root = tmp_path_factory.mktemp("papers")
    st.write_papers(PAPERS, root)
    return root, read_arxiv(root, start=2000, end=2005, progress=False)


def test_reviews_are_read_whole_by_the_amazon_reader(reviews):
    root, result = reviews
    assert sorted(p.name for p in root.glob("*.jsonl")) == ["All_Beauty.jsonl", "Books.jsonl", "Electronics.jsonl"]
    table = result.table
    assert len(table) == REVIEWS.years * REVIEWS.per_year and result.report.dropped == {}
    assert result.meta.task == "regression" and sorted(table["period"].unique())[:2] == ["2014-H1", "2014-H2"]
    share = table["label"].value_counts(normalize=True)
    assert set(share.index) == {1.0, 2.0, 3.0, 4.0, 5.0} and share[5.0] > 0.45 and share.idxmax() == 5.0


def test_review_cues_carry_the_rating_and_their_vocabulary_drifts(reviews):
    table = reviews[1].table
    year = table["timestamp"].dt.year
    late = [c for cues in st.CUES_LATE.values() for c in cues]
    first, last = table[year == 2014], table[year == 2017]
    assert contains_any(first["text"], late).mean() < 0.25 < 0.7 < contains_any(last["text"], late).mean()
    fives = contains_any(first["text"], st.CUES_EARLY[5])
    assert (first["label"][fives] >= 4).mean() > 0.9  # a 5-star cue appears in 4-5 star reviews
    assert (last["label"] == 5).mean() > (first["label"] == 5).mean()  # label shift toward 5 stars


def test_papers_are_read_whole_by_the_arxiv_reader_with_all_seven_categories(papers):
    _, result = papers
    table = result.table
    assert len(table) == PAPERS.years * PAPERS.per_year and result.report.dropped == {}
    labels = table[list(result.meta.label_columns)].to_numpy()
    assert result.meta.class_names == st.CATEGORIES and labels.shape[1] == 7
    assert labels.sum(1).min() >= 1 and labels.sum(1).max() <= 2 and (labels.sum(1) == 2).mean() > 0.1
    for y in range(2000, 2006):  # every category has positives every year (macro AUC is defined)
        assert labels[table["timestamp"].dt.year == y].sum(0).min() > 0


def test_paper_mix_and_terminology_drift(papers):
    _, result = papers
    table = result.table
    year = table["timestamp"].dt.year
    lg = table["label_cs.LG"]
    assert lg[year == 2005].mean() > 2 * lg[year == 2000].mean()
    late = [t for _, late_terms in st.TERMS.values() for t in late_terms]
    assert contains_any(table["text"][year == 2000], late).mean() < 0.2
    assert contains_any(table["text"][year == 2005], late).mean() > 0.8
    assert table["text"].str.contains("\n\n").all()  # title, blank line, abstract


def test_no_drift_scenario_keeps_the_early_vocabulary(tmp_path):
    cfg = SyntheticConfig(scenario="none", first_year=2014, years=3, per_year=100)
    texts = [r["text"] for y, f in st._years(cfg) for _, r in st.reviews_for_year(cfg, y, f, st.drift_for("none"))]
    assert not contains_any(texts, [c for cues in st.CUES_LATE.values() for c in cues]).any()
    with pytest.raises(ValueError, match="text scenario"):
        st.write_reviews(SyntheticConfig(scenario="fading-cue"), tmp_path)


def test_generation_is_deterministic_and_skipped_when_complete(tmp_path):
    small = SyntheticConfig(scenario="mixed", first_year=2000, years=2, per_year=20)
    st.write_papers(small, tmp_path / "a")
    st.write_papers(small, tmp_path / "b")
    name = "arxiv-metadata-oai-snapshot.json"
    assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    stamp = (tmp_path / "a" / name).stat().st_mtime_ns
    st.write_papers(small, tmp_path / "a")
    assert (tmp_path / "a" / name).stat().st_mtime_ns == stamp
    st.write_papers(SyntheticConfig(scenario="mixed", seed=1, first_year=2000, years=2, per_year=20), tmp_path / "a")
    assert (tmp_path / "a" / name).read_bytes() != (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("source, expected", [("amazon", "Books.jsonl"), ("arxiv", "arxiv-metadata-oai-snapshot.json")])
def test_data_generate_follows_the_dataset_source(tmp_path, source, expected):
    params = {"dataset": {"name": "t", "source": source, "path": str(tmp_path / "raw"),
                          "task": "regression" if source == "amazon" else "multilabel"},
              "synthetic": {"scenario": "mixed", "first_year": 2014, "years": 1, "per_year": 10},
              "models": {"FFN-S": {}}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(params))
    result = CliRunner().invoke(app, ["data", "generate", "--params", str(tmp_path / "p.yaml")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "raw" / expected).exists() and "10 documents" in result.output
