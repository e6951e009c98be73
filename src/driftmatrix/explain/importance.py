"""Permutation importance of tabular models per cutoff: which features a model leans on, and how
that changes as the world drifts (``driftmatrix importance``).

For every tabular model (``inputs == "table"``) of ``params.yaml`` and every cutoff i, the unit of
the first seed is scored on its **own held-out rows**: the test splits of the slices in its
training window (rows it never trained on, from the periods it knew). Each feature column is then
shuffled among those rows (``repeats`` seeded permutations) and the score drop is its importance,
in the cell metric's points (positive = the model needs the feature; for a lower-is-better
metric the sign is turned so that this still holds). Writes ``<out>/<model>.json`` (``features``,
``cutoffs``, ``values`` F x K, ``std``, ``baseline``), ``<out>/<model>.png`` (features x cutoffs
heatmap) and ``<out>/report.html`` with every model's heatmap.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from driftmatrix.config import Params

log = logging.getLogger(__name__)

REPEATS = 3
MAX_ROWS = 5_000  # held-out rows per cutoff at most (a seeded draw)


def held_out_rows(slice_ids: np.ndarray, split: np.ndarray, window, max_rows: int = MAX_ROWS) -> np.ndarray:
    """Test-split rows of the window's slices (at most ``max_rows``, drawn with a fixed seed)."""
    rows = np.flatnonzero(np.isin(slice_ids, np.asarray(window)) & (split == "test"))
    if len(rows) > max_rows:
        rows = np.sort(np.random.default_rng(0).choice(rows, max_rows, replace=False))
    return rows


def score(model, num, cat, targets, task: str, metric) -> float:
    """The cell metric (``tasks.MetricInfo``) of ``model`` on these rows, signed so that higher is better."""
    from driftmatrix.learn.tasks import cell_score

    value, _ = cell_score(task, model.predict_arrays(num, cat), targets, metric=metric.key)
    return value if metric.higher_is_better else -value


def permutation_importance(model, num: np.ndarray, cat: np.ndarray, targets: np.ndarray, task: str,
                           metric, repeats: int = REPEATS,
                           seed: int = 0) -> tuple[float, np.ndarray, np.ndarray]:
    """(baseline score, mean drop per feature, std of the drops): numeric features first, then
    categorical, as the columns of ``num`` and ``cat``."""
    base = score(model, num, cat, targets, task, metric)
    n_num = num.shape[1]
    drops = np.zeros((n_num + cat.shape[1], repeats))
    for f in range(drops.shape[0]):
        for r in range(repeats):
            perm = np.random.default_rng([seed, f, r]).permutation(len(num))
            n2, c2 = num.copy(), cat.copy()
            if f < n_num:
                n2[:, f] = num[perm, f]
            else:
                c2[:, f - n_num] = cat[perm, f - n_num]
            drops[f, r] = base - score(model, n2, c2, targets, task, metric)
    return base, drops.mean(axis=1), drops.std(axis=1)


def model_importance(params: Params, model: str, slices_dir, checkpoints_dir, features_dir) -> dict[str, Any]:
    """Permutation importance of ``model`` at every cutoff whose first-seed unit is trained."""
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.units.experiment import Experiment

    exp = Experiment(params, model, slices_dir, features_dir,
                     recorded_environment(params, model, checkpoints_dir, resolve_if_missing=True))
    store = CheckpointStore(checkpoints_dir, model)
    seed = exp.plan.seeds[0]
    features = list(exp.meta.features)
    values = np.full((len(features), len(exp.labels)), np.nan)
    std, baseline = np.full_like(values, np.nan), [None] * len(exp.labels)
    for i in range(len(exp.labels)):
        unit = exp.plan.unit(seed, i)
        if not store.done(unit.key):
            continue
        rows = held_out_rows(exp.slice_ids, exp.split, unit.window)
        if not len(rows):
            continue
        fitted = exp.load_unit(store, unit.key)
        base, mean, sd = permutation_importance(fitted, exp.inputs.num[rows].numpy(), exp.inputs.cat[rows].numpy(),
                                                exp.targets_np[rows], exp.meta.task, exp.metric)
        values[:, i], std[:, i], baseline[i] = mean, sd, base if exp.metric.higher_is_better else -base
        log.info("importance %s cutoff %s: %d held-out rows, top %s", model, exp.labels[i], len(rows),
                 features[int(np.nanargmax(mean))] if len(mean) else "-")
    return {"model": model, "seed": seed, "metric": exp.metric.key, "unit": exp.metric.unit,
            "features": features, "cutoffs": list(exp.labels), "values": _json(values), "std": _json(std),
            "baseline": baseline, "repeats": REPEATS, "rows": "test splits of each cutoff's window"}


def _json(m: np.ndarray) -> list:
    return [[None if not np.isfinite(v) else round(float(v), 5) for v in row] for row in m]


def run(params: Params, slices_dir="outputs/slices", checkpoints_dir="outputs/checkpoints",
        out_dir="outputs/importance", features_dir="outputs/features") -> dict[str, Any]:
    """Every tabular model's importance per cutoff: JSON, heatmaps and ``report.html``."""
    from driftmatrix.audit import figures, report
    from driftmatrix.models.catalog import get

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results, sections = {}, []
    for model in params.models:
        if get(model).inputs != "table":
            continue
        res = model_importance(params, model, slices_dir, checkpoints_dir, features_dir)
        results[model] = res
        (out / f"{model}.json").write_text(json.dumps(res, indent=2))
        grid = np.array([[np.nan if v is None else v for v in row] for row in res["values"]], dtype=float)
        png = figures.feature_grid(grid, res["features"], res["cutoffs"],
                                   f"{model}: permutation importance per cutoff (held-out rows)",
                                   f"score drop ({res['metric']})", xlabel="trained up to", cmap="viridis")
        (out / f"{model}.png").write_bytes(png)
        sections.append((model, report.img(png, f"{model} importance")))
    if not sections:
        sections = [("No tabular models", "<p class='note'>Permutation importance applies to tabular models.</p>")]
    (out / "report.html").write_text(report.render("Permutation importance per cutoff", sections))
    return results
