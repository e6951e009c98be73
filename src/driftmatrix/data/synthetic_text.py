"""Built-in text datasets with controllable drift, written in the real datasets' formats.

``driftmatrix data generate`` writes Amazon-layout reviews (``dataset.source: amazon``; 1-5 stars,
skewed to 5, with sentiment cue words) or arXiv-layout papers (``arxiv``; one or two of 7
categories, each with its terminology), so they go through the same reader as the real data. Each
year draws from a generator seeded from (seed, year). Drift (:data:`SCENARIOS`) moves linearly with
the year's place ``f`` on the timeline: a cue or term comes from the late lexicon with probability
``vocab * f``, so early models meet words they never saw, and the label mix moves from ``start`` to
``end``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from driftmatrix.config import SyntheticConfig


@dataclass(frozen=True)
class TextDrift:
    vocab: float = 0.0  # probability that a cue or term comes from the late lexicon, at f = 1
    label: float = 0.0  # 0 = fixed label mix, 1 = the full move from the early to the late mix


SCENARIOS: dict[str, TextDrift] = {
    "none": TextDrift(),
    "vocabulary": TextDrift(vocab=0.9),
    "label-shift": TextDrift(label=1.0),
    "mixed": TextDrift(vocab=0.9, label=1.0),
}


def drift_for(scenario: str) -> TextDrift:
    try:
        return SCENARIOS[scenario]
    except KeyError:
        raise ValueError(f"synthetic.scenario {scenario!r} is not a text scenario; one of {sorted(SCENARIOS)}") from None


# --- reviews -----------------------------------------------------------------------------------
CUES_EARLY = {
    1: ("terrible", "broke quickly", "asked for a refund", "waste of money", "useless", "awful"),
    2: ("disappointing", "flimsy", "mediocre", "felt cheap", "sent it back"),
    3: ("okay", "average", "decent enough", "fine for the price", "alright"),
    4: ("good", "solid", "quite happy", "reliable", "nice quality"),
    5: ("excellent", "perfect", "love it", "amazing", "fantastic"),
}
CUES_LATE = {
    1: ("total scam", "pure trash", "a nightmare", "zero stars", "ripoff"),
    2: ("meh", "underwhelming", "overhyped", "sketchy build", "janky"),
    3: ("mid", "passable", "so-so", "serviceable", "middling"),
    4: ("legit", "good vibes", "would recommend", "sturdy", "worth it"),
    5: ("goated", "obsessed", "chef's kiss", "elite", "game changer"),
}
PRODUCTS = {  # category -> (early nouns, late nouns)
    "All_Beauty": (("lotion", "shampoo", "lipstick", "hair dryer"), ("serum", "sunscreen", "face mask", "hair oil")),
    "Books": (("paperback", "hardcover", "novel", "cookbook"), ("ebook", "audiobook", "box set", "graphic novel")),
    "Electronics": (("dvd player", "mp3 player", "camera", "charger"),
                    ("earbuds", "smartwatch", "usb-c hub", "streaming stick")),
}
FILLER_REVIEW = ("the", "this", "it", "arrived", "on", "time", "after", "a", "week", "i", "bought", "for", "my",
                 "family", "and", "use", "daily", "works", "as", "described", "would", "say", "overall")
RATING_EARLY = np.array([0.10, 0.07, 0.10, 0.18, 0.55])  # skewed toward 5 stars
RATING_LATE = np.array([0.14, 0.06, 0.07, 0.13, 0.60])


def _lexicon(early: tuple[str, ...], late: tuple[str, ...], p_late: float, rng: np.random.Generator) -> str:
    pool = late if rng.random() < p_late else early
    return pool[rng.integers(len(pool))]


def review_text(rating: int, category: str, frac: float, drift: TextDrift, rng: np.random.Generator) -> str:
    """One review: 1-3 cues of its rating (or a neighbour's), a product noun, filler words."""
    p_late = drift.vocab * frac
    words = list(rng.choice(FILLER_REVIEW, size=rng.integers(8, 20)))
    for _ in range(rng.integers(1, 4)):
        level = int(np.clip(rating + (rng.choice((-1, 1)) if rng.random() < 0.25 else 0), 1, 5))
        words.insert(rng.integers(len(words) + 1), _lexicon(CUES_EARLY[level], CUES_LATE[level], p_late, rng))
    early, late = PRODUCTS[category]
    words.insert(rng.integers(len(words) + 1), _lexicon(early, late, p_late, rng))
    return " ".join(words).capitalize() + "."


def reviews_for_year(cfg: SyntheticConfig, year: int, frac: float, drift: TextDrift) -> Iterator[tuple[str, dict]]:
    """``(category, record)`` for every review of one year, in the Amazon Reviews 2023 schema."""
    rng = np.random.default_rng([cfg.seed, year])
    probs = RATING_EARLY + (RATING_LATE - RATING_EARLY) * drift.label * frac
    ratings = rng.choice(np.arange(1, 6), size=cfg.per_year, p=probs / probs.sum())
    start = datetime(year, 1, 1, tzinfo=timezone.utc).timestamp()
    span = datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp() - start
    cats = sorted(PRODUCTS)
    for k, rating in enumerate(ratings):
        category = cats[rng.integers(len(cats))]
        ms = int((start + rng.random() * span) * 1000)
        text = review_text(int(rating), category, frac, drift, rng)
        title = _lexicon(CUES_EARLY[int(rating)], CUES_LATE[int(rating)], drift.vocab * frac, rng)
        asin = f"B{year % 100:02d}{rng.integers(10**6):06d}"
        yield category, {"rating": float(rating), "title": title.capitalize(), "text": text, "images": [],
                         "asin": asin, "parent_asin": asin, "user_id": f"U{year}{k:06d}", "timestamp": ms,
                         "helpful_vote": int(rng.integers(0, 5)), "verified_purchase": bool(rng.random() < 0.9)}


# --- papers ------------------------------------------------------------------------------------
CATEGORIES = ("cs.LG", "hep-ph", "cs.CV", "cs.AI", "hep-th", "quant-ph", "gr-qc")
TERMS = {  # category -> (early terminology, late terminology)
    "cs.LG": (("support vector machines", "kernel methods", "boosting", "graphical models", "bayesian inference"),
              ("transformers", "diffusion models", "large language models", "self-supervised learning",
               "fine-tuning")),
    "cs.CV": (("edge detection", "sift features", "image segmentation", "optical flow", "stereo matching"),
              ("vision transformers", "object detection", "neural rendering", "image generation",
               "contrastive pretraining")),
    "cs.AI": (("expert systems", "classical planning", "constraint satisfaction", "ontologies", "logic programs"),
              ("language agents", "reasoning benchmarks", "tool use", "alignment", "preference optimisation")),
    "hep-ph": (("parton distributions", "electroweak fits", "supersymmetric spectra", "quark masses",
                "higgs mass bounds"),
               ("lhc run data", "dark matter portals", "flavour anomalies", "effective field theory",
                "collider signatures")),
    "hep-th": (("string compactifications", "d-branes", "supergravity", "conformal field theory", "gauge theories"),
               ("holography", "the swampland", "scattering amplitudes", "entanglement entropy",
                "celestial holography")),
    "quant-ph": (("entanglement", "bell inequalities", "quantum teleportation", "decoherence", "cavity qed"),
                 ("quantum advantage", "variational circuits", "error-correcting codes", "nisq devices",
                  "qubit calibration")),
    "gr-qc": (("black holes", "the cosmological constant", "gravitational collapse", "wormholes",
               "post-newtonian expansions"),
              ("gravitational waves", "ligo events", "binary mergers", "waveform models", "ringdown")),
}
RELATED = {"cs.LG": ("cs.AI", "cs.CV"), "cs.CV": ("cs.LG",), "cs.AI": ("cs.LG",), "hep-ph": ("hep-th",),
           "hep-th": ("hep-ph", "gr-qc"), "quant-ph": ("hep-th", "gr-qc"), "gr-qc": ("hep-th",)}
MIX_EARLY = np.array([0.07, 0.22, 0.07, 0.12, 0.22, 0.16, 0.14])  # order of CATEGORIES
MIX_LATE = np.array([0.28, 0.10, 0.18, 0.12, 0.10, 0.14, 0.08])
TITLE_TEMPLATES = ("On {a} and {b}", "A study of {a} with {b}", "Revisiting {a}: the role of {b}",
                   "{a} meets {b}", "Towards {a} for {b}")
SENTENCES = ("We study {a} in the context of {b}.", "Our results on {a} improve on earlier work on {b}.",
             "We propose a new approach to {a}.", "Connections between {a} and {b} are discussed.",
             "Experiments show that {a} matters.", "We derive bounds for {a} using {b}.")
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


def paper_categories(frac: float, drift: TextDrift, rng: np.random.Generator) -> list[str]:
    """A primary category from the year's mix, plus a related one 30% of the time."""
    mix = MIX_EARLY + (MIX_LATE - MIX_EARLY) * drift.label * frac
    primary = CATEGORIES[rng.choice(len(CATEGORIES), p=mix / mix.sum())]
    cats = [primary]
    if rng.random() < 0.3:
        related = RELATED[primary]
        cats.append(related[rng.integers(len(related))])
    return cats


def paper_text(cats: list[str], frac: float, drift: TextDrift, rng: np.random.Generator) -> tuple[str, str]:
    """(title, abstract) in the terminology of ``cats``; 15% of terms come from another category."""
    p_late = drift.vocab * frac

    def term() -> str:
        cat = cats[rng.integers(len(cats))] if rng.random() >= 0.15 else CATEGORIES[rng.integers(len(CATEGORIES))]
        return _lexicon(*TERMS[cat], p_late, rng)

    title = TITLE_TEMPLATES[rng.integers(len(TITLE_TEMPLATES))].format(a=term(), b=term())
    sentences = [SENTENCES[rng.integers(len(SENTENCES))].format(a=term(), b=term())
                 for _ in range(rng.integers(3, 6))]
    return title[0].upper() + title[1:], " ".join(sentences)


def papers_for_year(cfg: SyntheticConfig, year: int, frac: float, drift: TextDrift) -> Iterator[dict]:
    """Every paper of one year as an arXiv metadata snapshot record."""
    rng = np.random.default_rng([cfg.seed, year])
    start = datetime(year, 1, 1, tzinfo=timezone.utc).timestamp()
    span = datetime(year + 1, 1, 1, tzinfo=timezone.utc).timestamp() - start
    for k in range(cfg.per_year):
        cats = paper_categories(frac, drift, rng)
        title, abstract = paper_text(cats, frac, drift, rng)
        t = datetime.fromtimestamp(start + rng.random() * span, tz=timezone.utc)
        created = f"{DAYS[t.weekday()]}, {t.day} {MONTHS[t.month - 1]} {t.year} {t:%H:%M:%S} GMT"
        yield {"id": f"{t.year % 100:02d}{t.month:02d}.{k:05d}", "submitter": "Synthetic Author",
               "authors": "A. Author, B. Author", "title": title, "comments": None, "journal-ref": None,
               "doi": None, "report-no": None, "categories": " ".join(cats), "license": None,
               "abstract": abstract, "versions": [{"version": "v1", "created": created}],
               "update_date": t.strftime("%Y-%m-%d"), "authors_parsed": [["Author", "A.", ""]]}


# --- writing -----------------------------------------------------------------------------------
def _years(cfg: SyntheticConfig) -> Iterator[tuple[int, float]]:
    for k in range(cfg.years):
        yield cfg.first_year + k, k / max(cfg.years - 1, 1)


def _complete(root: Path, cfg: SyntheticConfig, force: bool) -> tuple[Path, str, bool]:
    stamp = root / ".complete"
    expected = f"{cfg}"
    return stamp, expected, (not force and stamp.exists() and stamp.read_text() == expected)


def _write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w") as fh:
        for rec in records:
            fh.write(json.dumps(rec) + "\n")
    tmp.replace(path)


def _write_dataset(cfg: SyntheticConfig, root: str | Path, force: bool,
                   files: Callable[[TextDrift], dict[str, list[dict[str, Any]]]]) -> int:
    """Write ``files(drift)`` (file name -> records) under ``root`` once; skipped when complete."""
    root = Path(root)
    stamp, expected, done = _complete(root, cfg, force)
    n = cfg.per_year * cfg.years
    if done:
        return n
    root.mkdir(parents=True, exist_ok=True)
    for name, records in files(drift_for(cfg.scenario)).items():
        _write_lines(root / name, records)
    stamp.write_text(expected)
    return n


def write_reviews(cfg: SyntheticConfig, root: str | Path, force: bool = False) -> int:
    """``root/<Category>.jsonl`` for the three categories; skipped when already complete."""
    def files(drift: TextDrift) -> dict[str, list[dict[str, Any]]]:
        by_cat: dict[str, list[dict]] = {c: [] for c in PRODUCTS}
        for year, frac in _years(cfg):
            for category, rec in reviews_for_year(cfg, year, frac, drift):
                by_cat[category].append(rec)
        return {f"{c}.jsonl": recs for c, recs in by_cat.items()}

    return _write_dataset(cfg, root, force, files)


def write_papers(cfg: SyntheticConfig, root: str | Path, force: bool = False) -> int:
    """``root/arxiv-metadata-oai-snapshot.json``; skipped when already complete."""
    def files(drift: TextDrift) -> dict[str, list[dict[str, Any]]]:
        records = [rec for year, frac in _years(cfg) for rec in papers_for_year(cfg, year, frac, drift)]
        return {"arxiv-metadata-oai-snapshot.json": records}

    return _write_dataset(cfg, root, force, files)


WRITERS = {"amazon": write_reviews, "arxiv": write_papers}  # dataset.source -> generator in its format
