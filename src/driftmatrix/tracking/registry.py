"""What a deployer reads in the model registry, written by the report stage (:func:`annotate`):

- this project's versions of the matrices' units get tags and a description of their own
  drift-matrix row (M[i, i], the mean over j > i, the decay); other clones' versions are untouched;
- every registered model's description says what it is, takes and returns, and links the matrices run;
- for each H of ``advisor.horizons`` the advisor's pick (best served score when retrained every H
  periods; never a baseline) gets the alias ``recommended-h<H>`` on its latest cutoff's lowest-seed
  version, and no other model keeps it;
- the alias ``recommended`` goes the same way to the policy stage's model (to none for no model).

Only what differs is written, so a second run over the same matrices writes nothing.
"""

from __future__ import annotations

import logging
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from driftmatrix.tracking import runs as tracking
from driftmatrix.config import ConfigError, Params, build

log = logging.getLogger(__name__)

ALIAS_PREFIX = "recommended-h"
POLICY_ALIAS = "recommended"  # the policy stage's recommended (model, policy): its model's latest cutoff


@dataclass(frozen=True)
class AdvisorConfig:
    """``params.yaml: advisor`` (optional): retraining horizons whose pick becomes an alias."""

    horizons: tuple[int, ...] = (1,)


def advisor_config(params: Params) -> AdvisorConfig:
    cfg = build(AdvisorConfig, params.extra.get("advisor"), "params.yaml: advisor")
    bad = [h for h in cfg.horizons if h < 1]
    if bad:
        raise ConfigError(f"params.yaml: advisor.horizons: expected periods >= 1, got {bad[0]!r}")
    return cfg


def _fmt(value: float) -> str:
    return "n/a" if value is None or not math.isfinite(value) else f"{value:.4g}"


def row_scores(values: np.ndarray, i: int, higher_is_better: bool) -> tuple[float, float, float]:
    """The unit's own row of a matrix: M[i, i], the mean of its filled cells j > i, the decay."""
    from driftmatrix.analysis.summary import decay

    row = np.asarray(values, dtype=float)
    future = row[i + 1:][~np.isnan(row[i + 1:])]
    own, fut = float(row[i]), float(future.mean()) if len(future) else float("nan")
    return own, fut, decay(own, fut, higher_is_better)


def version_tags(matrices, version, train_rows: float | None) -> dict[str, str]:
    """The tags a version should carry, from its model's seed-level matrices (none if not their unit)."""
    cutoff, seed = version.tags.get("cutoff"), version.tags.get("seed")
    seeds = [int(s) for s in (matrices.seeds or [])]
    if cutoff not in matrices.slices or seed is None or not seed.lstrip("-").isdigit() or int(seed) not in seeds:
        return {}
    i, s = matrices.slices.index(cutoff), seeds.index(int(seed))
    if "unit_keys" in matrices.extra and matrices.extra["unit_keys"][s][i] != version.tags.get("unit_key"):
        return {}
    return row_tags(matrices, cutoff, seed, matrices.seed_values[s, i], train_rows)


def row_tags(matrices, cutoff: str, seed: str, row: np.ndarray, train_rows: float | None) -> dict[str, str]:
    """A unit's version tags from its drift-matrix ``row`` (``matrices``: anything with the
    dataset, model, metric, unit, slices and higher_is_better of its model's matrices)."""
    own, future, decay = row_scores(row, matrices.slices.index(cutoff), matrices.higher_is_better)
    tags = {"dataset": matrices.dataset, "model": matrices.model, "cutoff": cutoff, "seed": seed,
            "metric": f"{matrices.metric} ({matrices.unit})" if matrices.unit else matrices.metric,
            "in_distribution": _fmt(own), "future_mean": _fmt(future), "decay": _fmt(decay)}
    if train_rows is not None:
        tags["train_rows"] = str(int(train_rows))
    return {k: v for k, v in tags.items() if v}


def new_version(record: Mapping[str, Any], train_rows: float | None) -> tuple[dict[str, str], str]:
    """(tags, description) :func:`annotate` would give a unit's version, from the unit's drift-matrix
    row record (``evaluate.row_record``): the evaluate stage creates its version with them, so that
    the report stage finds them written (five calls a version less; it still corrects what differs)."""
    from types import SimpleNamespace

    view = SimpleNamespace(**{k: record[k] for k in ("dataset", "model", "unit", "slices", "higher_is_better")},
                           metric=record["metric_name"])
    row = np.array([np.nan if v is None else v for v in record["values"]], dtype=float)
    tags = row_tags(view, record["cutoff"], str(record["seed"]), row, train_rows)
    return tags, version_description(view, tags, record["unit_key"])


def version_description(matrices, tags: Mapping[str, str], unit_key: str | None) -> str:
    unit = matrices.unit or ""
    n_future = len(matrices.slices) - 1 - matrices.slices.index(tags["cutoff"])
    future = (f"{tags['future_mean']} {unit} on average over the {n_future} later period(s)" if n_future
              else "no later period yet")
    rows = f", {tags['train_rows']} training rows" if "train_rows" in tags else ""
    return (f"{matrices.model} trained on {matrices.dataset} up to {tags['cutoff']} (seed {tags['seed']}{rows}). "
            f"{matrices.metric}: {tags['in_distribution']} {unit} in distribution, {future}; decay "
            f"{tags['decay']}. Unit {unit_key or '?'}.").replace("  ", " ")


def model_description(spec, dataset: str, config: Mapping[str, Any] | None, matrices_run: str | None,
                      exp_id: str | None, horizons: list[int]) -> str:
    """What the registered model is, what it takes and gives, its aliases and the matrices run."""
    lines = [f"**{spec.name}** ({spec.family}) on **{dataset}**: {spec.description}.",
             "One version per training cutoff and seed: the model trained on every period up to "
             "the cutoff. Aliases `cutoff-<label>` (lowest seed), `cutoff-<label>-seed-<s>`"
             + (", and `recommended-h<H>` on the version the retraining advisor picks for horizon H "
                f"({', '.join(map(str, horizons))}) when this model leads" if horizons else "") + "."]
    if config:
        if config.get("modality") == "image":
            h, w, c = config.get("image_shape") or ("H", "W", 3)
            takes = (f"uint8 images (N, {h}, {w}, {c}) (image files: `driftmatrix.features.transform.read_images(paths, "
                     f"({h}, {w}))`)")
        elif config.get("modality") == "table":
            takes = (f"a DataFrame of the raw feature columns {[*config.get('numeric', []), *config.get('categorical', [])]} "
                     "(any dtype, null where a value is missing)")
        else:
            takes = "raw strings (the model runs its encoder" + (
                f" {config['encoder']}" if config.get("encoder") else "") + " itself)"
        lines.append(f"`predict` takes {takes} and returns "
                     + ("the predicted value" if config.get("task") == "regression" else
                        "class probabilities") + f" as columns {', '.join(config.get('columns') or [])}.")
    if matrices_run:
        link = f"#/experiments/{exp_id}/runs/{matrices_run}" if exp_id else f"runs:/{matrices_run}"
        lines.append(f"Drift matrices, report and heatmaps: run [{matrices_run}]({link}).")
    lines.append("Load: `mlflow.pyfunc.load_model(\"models:/<name>@<alias>\")`; serve: "
                 "`mlflow models serve -m models:/<name>@<alias> --env-manager local -h 127.0.0.1`.")
    return "\n\n".join(lines)


def _config_of(client, version) -> dict[str, Any] | None:
    """The pyfunc config of a version's MLmodel (None when absent or unreadable)."""
    import yaml

    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = client.download_artifacts(version.run_id, "model/MLmodel", tmp)
            doc = yaml.safe_load(Path(path).read_text())
        return dict(doc["flavors"]["python_function"].get("config") or {})
    except Exception:  # noqa: BLE001 - descriptive only
        return None


def annotate(params: Params, cohort, matrices_run: str | None = None, recommended: str | None = None) -> dict[str, Any]:
    """Make the registry agree with ``cohort`` (the matrices just reported; ``recommended``: the policy
    stage's model); returns ``{"versions": n tagged, "aliases": {alias: "name/version"}}``."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from driftmatrix.models.catalog import BASELINE_FAMILY, REGISTRY
    from driftmatrix.tracking.pyfunc import quiet_mlflow

    cfg = params.tracking
    horizons = sorted(set(advisor_config(params).horizons))
    if not (cfg.register and cfg.log_models):
        return {"versions": 0, "aliases": {}}
    exp_id = tracking.configure(cfg)
    client = MlflowClient()
    dataset, project = params.dataset.name, tracking.project_id()
    registered: dict[str, Any] = {}
    latest: dict[str, Any] = {}  # model -> this project's version of its latest cutoff, lowest seed
    touched = 0
    with quiet_mlflow():
        for model, matrices in cohort.models.items():
            name = tracking.registered_name(dataset, model)
            try:
                rm = client.get_registered_model(name)
            except MlflowException:
                continue
            registered[model] = rm
            versions = sorted((v for v in client.search_model_versions(f"name = {tracking.quote(name)}",
                                                                        max_results=100_000)
                               if v.tags.get(tracking.PROJECT_TAG, project) == project), key=lambda v: int(v.version))
            rows = {r.info.run_id: r.data.metrics.get("train_rows") for r in tracking.model_runs(exp_id, model)}
            for v in versions:
                want = version_tags(matrices, v, rows.get(v.run_id))
                if not want:
                    continue
                if (want["cutoff"], int(want["seed"])) == (cohort.slices[-1], min(matrices.seeds)):
                    latest.setdefault(model, v)
                for key, value in want.items():
                    if v.tags.get(key) != value:
                        client.set_model_version_tag(name, v.version, key, value)
                        touched += 1
                text = version_description(matrices, want, v.tags.get("unit_key"))
                if (v.description or "") != text:
                    client.update_model_version(name, v.version, description=text)
            spec = REGISTRY.get(model)
            if spec is not None:
                config = _config_of(client, versions[0]) if versions else None
                text = model_description(spec, dataset, config, matrices_run, exp_id, horizons)
                if (rm.description or "") != text:
                    client.update_registered_model(name, description=text)
                if matrices_run and rm.tags.get("matrices_run") != matrices_run:
                    client.set_registered_model_tag(name, "matrices_run", matrices_run)
    if recommended is not None and cohort.families.get(recommended) == BASELINE_FAMILY:
        recommended = None  # the deployer is told in words; no alias points at the baseline
    picks: dict[str, str] = {}
    for alias, model in {**recommend(cohort, registered, horizons, latest),
                         POLICY_ALIAS: recommended if recommended in latest else None}.items():
        picks.update(point(client, dataset, registered, alias, model, latest))
    if touched or picks:
        log.info("registry: %d version tags written; %s", touched,
                 ", ".join(f"{a} -> {p}" for a, p in picks.items()) or "no advisor alias")
    return {"versions": touched, "aliases": picks}


def recommend(cohort, registered: Mapping[str, Any], horizons: list[int],
              latest: Mapping[str, Any]) -> dict[str, str | None]:
    """``recommended-h<H>`` -> the advisor's pick among ``registered`` for each H (None: no model)."""
    from driftmatrix.analysis import advisor
    from driftmatrix.models.catalog import BASELINE_FAMILY

    stacks = {m: st for m, st in cohort.stacks.items() if m in registered
              and cohort.families.get(m) != BASELINE_FAMILY}  # never the Prior baseline
    out: dict[str, str | None] = {}
    for h in horizons:
        ranked = [s for s in advisor.rank_for_horizon(stacks, h, cohort.higher_is_better) if math.isfinite(s.mean)] \
            if stacks else []
        # the leader, or the next one when the leader has no version to point at
        out[f"{ALIAS_PREFIX}{int(h)}"] = next((p.model for p in ranked if p.model in latest), None)
    return out


def point(client, dataset: str, registered: Mapping[str, Any], alias: str, model: str | None,
          latest: Mapping[str, Any]) -> dict[str, str]:
    """``alias`` on ``latest[model]`` and on no other registered model of ``dataset`` (None: on none)."""
    out = {}
    target = None if model is None else (tracking.registered_name(dataset, model), str(latest[model].version))
    for m, rm in registered.items():
        name = tracking.registered_name(dataset, m)
        held = {a: str(v) for a, v in (rm.aliases or {}).items()}
        if target and name == target[0]:
            if held.get(alias) != target[1]:
                client.set_registered_model_alias(name, alias, target[1])
            out[alias] = f"{name}/{target[1]}"
        elif alias in held:
            client.delete_registered_model_alias(name, alias)
    return out
