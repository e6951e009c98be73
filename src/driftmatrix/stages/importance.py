"""Importance stage: permutation importance of every tabular model per cutoff, on each cutoff's
held-out rows (``explain.importance``): a features x cutoffs heatmap per model."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from driftmatrix.analysis.matrixfile import nested_lists
from driftmatrix.config import Params
from driftmatrix.errors import DataError
from driftmatrix.explain.importance import REPEATS, held_out_rows, permutation_importance

log = logging.getLogger(__name__)


def model_importance(params: Params, model: str, slices_dir, checkpoints_dir, features_dir) -> dict[str, Any]:
    """Permutation importance of ``model`` at every cutoff whose first-seed unit is trained."""
    from driftmatrix.units.store import CheckpointStore
    from driftmatrix.units.environment import recorded_environment
    from driftmatrix.models.tabular import UntrustedModel
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
        try:
            fitted = exp.load_unit(store, unit.key)
        except UntrustedModel as exc:
            raise DataError(f"{store.dir / unit.key}: {model} cutoff {unit.cutoff} seed {unit.seed}: {exc}") from None
        base, mean, sd = permutation_importance(fitted, exp.inputs.num[rows].numpy(), exp.inputs.cat[rows].numpy(),
                                                exp.targets_np[rows], exp.meta.task, exp.metric)
        values[:, i], std[:, i], baseline[i] = mean, sd, base if exp.metric.higher_is_better else -base
        log.info("importance %s cutoff %s: %d held-out rows, top %s", model, exp.labels[i], len(rows),
                 features[int(np.nanargmax(mean))] if len(mean) else "-")
    return {"model": model, "seed": seed, "metric": exp.metric.key, "unit": exp.metric.unit,
            "features": features, "cutoffs": list(exp.labels),
            "values": nested_lists(values, 5), "std": nested_lists(std, 5),
            "baseline": baseline, "repeats": REPEATS, "rows": "test splits of each cutoff's window"}


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
        res = results[model] = model_importance(params, model, slices_dir, checkpoints_dir, features_dir)
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
