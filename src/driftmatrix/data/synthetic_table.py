"""Built-in tabular default: a customer table over years with known drift (``source: table``).

``table.csv`` has a ``year``, the label ``churn`` and numeric and categorical features with
covariate drift (``age``, ``income``, ``region``), concept drift (``score``'s effect flips at
:func:`flip_year`), a late category (``channel = app``) and a few ``unknown`` ages the reader drops.
Year y has its own generator and the schedule a fixed ``span``, so appending a year leaves earlier
rows byte-identical."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

FLIP_AT = 0.5  # share of the span after which the score's effect is reversed
APP_AT = 0.66  # share of the span after which channel "app" exists
REGIONS = ("north", "east", "west", "south", "centre")
CHANNELS = ("web", "store", "phone")
PLANS = ("basic", "plus", "pro")
COLUMNS = ("id", "year", "age", "income", "tenure", "usage", "score", "region", "channel", "plan", "churn")


def flip_year(cfg) -> int:
    """First year in which ``score`` lowers churn."""
    return cfg.first_year + int(np.ceil(FLIP_AT * cfg.span))


def app_year(cfg) -> int:
    """First year in which channel ``app`` occurs."""
    return cfg.first_year + int(np.ceil(APP_AT * cfg.span))


def year_rows(cfg, year: int) -> list[list]:
    """The rows of one year (deterministic in (seed, year))."""
    rng = np.random.default_rng([cfg.seed, year, 7])
    n = cfg.per_year
    t = (year - cfg.first_year) / max(cfg.span - 1, 1)  # 0 .. 1 over the span
    age = rng.normal(38 + 14 * t, 9, n).clip(18, 90)
    income = np.exp(rng.normal(10.3 + 0.5 * t, 0.45, n))
    tenure = rng.exponential(4.0, n).clip(0, 40)
    usage = rng.gamma(2.0, 5.0 + 10.0 * t, n)
    score = rng.normal(0, 1, n)
    region_p = np.array([0.35 - 0.25 * t, 0.2, 0.2, 0.1 + 0.25 * t, 0.15])
    region = rng.choice(len(REGIONS), n, p=region_p / region_p.sum())
    channels = list(CHANNELS) + (["app"] if year >= app_year(cfg) else [])
    channel_p = np.array([0.4, 0.3, 0.3] + ([0.5] if len(channels) == 4 else []))
    channel = rng.choice(len(channels), n, p=channel_p / channel_p.sum())
    plan = rng.choice(len(PLANS), n, p=[0.5, 0.3, 0.2])
    sign = 1.0 if year < flip_year(cfg) else -1.0
    logit = (-0.2 + 1.6 * sign * score - 0.05 * (age - 40) - 0.6 * (np.log(income) - 10.5)
             - 0.15 * tenure + 0.03 * (usage - 15) + np.array([0.0, 0.3, -0.3, 0.5, 0.0])[region]
             + np.array([0.0, -0.4, 0.3, 1.8])[channel] + np.array([0.3, 0.0, -0.5])[plan])
    churn = rng.random(n) < 1.0 / (1.0 + np.exp(-logit))
    income_missing = rng.random(n) < 0.04
    age_bad = rng.random(n) < 0.002
    rows = []
    for k in range(n):
        rows.append([f"{year}-{k:06d}", year, "unknown" if age_bad[k] else f"{age[k]:.0f}",
                     "" if income_missing[k] else f"{income[k]:.2f}", f"{tenure[k]:.2f}", f"{usage[k]:.2f}",
                     f"{score[k]:.4f}", REGIONS[region[k]], channels[channel[k]], PLANS[plan[k]],
                     "yes" if churn[k] else "no"])
    return rows


def write_table(cfg, root: str | Path, force: bool = False) -> int:
    """Write ``root/table.csv`` (skipped when the ``.complete`` stamp matches); returns its rows."""
    root = Path(root)
    stamp = root / ".complete"
    n = cfg.years * cfg.per_year
    expected = f"table {cfg}\n{n}"
    if not force and stamp.exists() and stamp.read_text() == expected:
        return n
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / "table.csv.tmp"
    with open(tmp, "w", newline="") as fh:
        out = csv.writer(fh)
        out.writerow(COLUMNS)
        for year in range(cfg.first_year, cfg.first_year + cfg.years):
            out.writerows(year_rows(cfg, year))
    tmp.replace(root / "table.csv")
    stamp.write_text(expected)
    return n
