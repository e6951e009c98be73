"""Saliency stage: maps, concentration table, figures and MLflow logging for chosen checkpoints.

Reads ``params.yaml: saliency`` and writes under ``outputs/saliency/`` (both in
docs/explain-and-tune.md). The images of a cell are its evaluation set subsampled with a seed fixed
per evaluation year, so every model and cutoff of the same cell type looks at the same portraits."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from driftmatrix.config import ConfigError, Params
from driftmatrix.data.table import DataError, read_manifest
from driftmatrix.explain import concentration as conc
from driftmatrix.learn.score import eval_mask
from driftmatrix.models.catalog import REGISTRY
from driftmatrix.tracking import runs as tracking
from driftmatrix.units.environment import recorded_environment
from driftmatrix.units.experiment import Experiment
from driftmatrix.units.store import CheckpointStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SaliencyConfig:
    pairs: tuple[tuple[str, str], ...]
    eval_years: tuple[str, ...]
    n_images: int = 500
    batch_size: int = 128
    block: int = 2


def saliency_config(params: Params) -> SaliencyConfig:
    raw = dict(params.extra.get("saliency") or {})
    where = "params.yaml: saliency"
    sizes = ("n_images", "batch_size", "block")
    unknown = sorted(set(raw) - {"pairs", "eval_years", *sizes})
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}")
    pairs = []
    for p in raw.get("pairs") or []:
        if not isinstance(p, Mapping) or set(p) != {"model", "cutoff"}:
            raise ConfigError(f"{where}.pairs: each entry is {{model: <name>, cutoff: <slice label>}}, got {p!r}")
        pairs.append((str(p["model"]), str(p["cutoff"])))
    years = tuple(str(y) for y in raw.get("eval_years") or [])
    if bool(pairs) != bool(years):
        raise ConfigError(f"{where}: pairs and eval_years go together (both empty turns saliency off)")
    cfg = SaliencyConfig(tuple(pairs), years, **{k: int(raw[k]) for k in sizes if k in raw})
    if min(cfg.n_images, cfg.batch_size, cfg.block) < 1:
        raise ConfigError(f"{where}: n_images, batch_size and block must be >= 1")
    return cfg


def applicable_pairs(cfg: SaliencyConfig, params: Params, labels: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """The configured (model, cutoff) pairs saliency can compute here, and why each other cannot."""
    kept, skipped = [], []
    for model, cutoff in cfg.pairs:
        if model not in params.models:
            skipped.append(f"{model} at {cutoff}: {model} is not among params.yaml's models")
        elif model not in REGISTRY or REGISTRY[model].modality != "image":
            skipped.append(f"{model} at {cutoff}: saliency maps need an image model")
        elif cutoff not in labels:
            skipped.append(f"{model} at {cutoff}: {cutoff} is not a slice label")
        else:
            kept.append((model, cutoff))
    return kept, skipped


def slice_index(labels: list[str], label: str, what: str) -> int:
    try:
        return labels.index(label)
    except ValueError:
        raise ConfigError(f"params.yaml: saliency {what} {label!r} is not a slice label "
                          f"({labels[0]}..{labels[-1]})") from None


def select_rows(slice_ids: np.ndarray, split: np.ndarray, cutoff: int, j: int, n: int) -> np.ndarray:
    """Up to ``n`` rows of the evaluation set of cell (cutoff, j), sorted; the draw depends on j only."""
    rows = np.flatnonzero(eval_mask(slice_ids, split, cutoff, j))
    if len(rows) > n:
        rows = np.sort(np.random.default_rng(j).choice(rows, n, replace=False))
    return rows


def forward_builder(exp):
    """loaded checkpoint -> (module, prepare) from [-1, 1] pixels, through a frozen backbone if any."""
    if exp.spec.inputs == "pixels":
        return lambda model: (model, None)
    if exp.spec.inputs == "pooled" and exp.spec.modality == "image":
        from driftmatrix.explain.adapters import encoder_prepare
        from driftmatrix.features import encoders
        from driftmatrix.features.cache import embed_config

        sources = embed_config(exp.params.extra.get("embed")).sources
        prepare = encoder_prepare(encoders.load(exp.spec.encoder, sources, exp.device))
        return lambda head: (head, prepare)
    raise ConfigError(f"saliency: {exp.spec.name} is not an image model (inputs {exp.spec.inputs!r})")


def pixel_inputs(exp, slices_dir: str | Path):
    if exp.spec.inputs == "pixels":
        return exp.inputs
    from driftmatrix.features.inputs import load_inputs

    return load_inputs("pixels", slices_dir).to(exp.device)


def finished_seeds(exp, checkpoints_dir: str | Path, cutoff: int) -> list[tuple[int, str]]:
    """(seed, unit key) of every seed of the plan whose unit at ``cutoff`` is trained."""
    store = CheckpointStore(checkpoints_dir, exp.spec.name)
    found = [(s, exp.plan.unit(s, cutoff).key) for s in exp.plan.seeds]
    found = [(s, k) for s, k in found if store.done(k)]
    if not found:
        raise DataError(f"saliency: no finished checkpoint of {exp.spec.name} at cutoff "
                        f"{exp.labels[cutoff]} in {checkpoints_dir} (run `driftmatrix train` first)")
    return found


def cell_maps(exp, forward, pixels, checkpoints: list[tuple[int, str]], rows: np.ndarray,
              batch_size: int, block: int = 1, checkpoints_dir: str | Path = "outputs/checkpoints",
              ) -> tuple[np.ndarray, np.ndarray, list[dict[str, float]]]:
    """Per seed the mean saliency map (S, H, W) and mean concentration scores, and the mean image."""
    import torch

    from driftmatrix.explain.saliency import mean_saliency

    per_image = {"top5_share_img": lambda m: conc.top_share(conc.pool(m.cpu().numpy(), block)),
                 "entropy_img": lambda m: conc.normalised_entropy(conc.pool(m.cpu().numpy(), block))}
    store = CheckpointStore(checkpoints_dir, exp.spec.name)
    maps, image, img_scores = [], None, []
    for _, key in checkpoints:
        module, prepare = forward(exp.load_unit(store, key))
        module.eval()
        batches = (pixels.batch(torch.as_tensor(rows[k:k + batch_size]))[0] for k in range(0, len(rows), batch_size))
        summary = mean_saliency(module, batches, prepare, per_image)
        maps.append(summary.mean_map.cpu().numpy())
        img_scores.append(dict(summary.per_image))
        image = ((summary.mean_image.cpu().numpy().transpose(1, 2, 0) + 1.0) / 2.0).clip(0, 1)
    return np.stack(maps), image, img_scores


def summarise(rows: list[dict[str, Any]]):
    """Seed mean and std (ddof=1) of the concentration scores per model, cutoff and eval year."""
    import pandas as pd

    return pd.DataFrame(rows).groupby(["model", "family", "cutoff", "eval"], sort=False).agg(
        seeds=("seed", "count"), n_images=("n_images", "first"), block=("block", "first"),
        top5_share=("top5_share", "mean"), top5_share_std=("top5_share", "std"),
        entropy=("entropy", "mean"), entropy_std=("entropy", "std"),
        top5_share_img=("top5_share_img", "mean"), entropy_img=("entropy_img", "mean")).reset_index()


def draw_grid(cells: Mapping[tuple[str, str], np.ndarray], image: np.ndarray, models: list[str],
              cutoffs: list[str], eval_year: str, path: Path) -> Path:
    """Models as rows, the evaluation year's mean image then one column per cutoff."""
    from driftmatrix.reporting.figures import _plt, save

    plt = _plt()
    fig, axes = plt.subplots(len(models), len(cutoffs) + 1, squeeze=False,
                             figsize=(1.9 * (len(cutoffs) + 1), 1.9 * len(models) + 0.4))
    for r, model in enumerate(models):
        axes[r, 0].imshow(image, interpolation="nearest")
        axes[r, 0].set_ylabel(model)
        for c, cutoff in enumerate(cutoffs, start=1):
            m = cells.get((model, cutoff))
            if m is not None:
                axes[r, c].imshow(m, cmap="inferno", vmin=0, vmax=max(float(m.max()), 1e-12),
                                  interpolation="nearest")
            if r == 0:
                axes[r, c].set_title(f"trained to {cutoff}", fontsize=9)
        if r == 0:
            axes[r, 0].set_title(f"mean image {eval_year}", fontsize=9)
    for ax in axes.ravel():
        ax.set(xticks=[], yticks=[])
    fig.suptitle(f"Gradient saliency, evaluated on {eval_year}", fontsize=10)
    fig.tight_layout()
    return save(fig, path, dpi=110)


def run(params: Params, slices_dir: str | Path = "outputs/slices",
        checkpoints_dir: str | Path = "outputs/checkpoints", out_dir: str | Path = "outputs/saliency",
        log_mlflow: bool = True, features_dir: str | Path = "outputs/features") -> dict[str, Any]:
    """Compute every configured cell, write arrays, tables and figures; log to the checkpoints' runs."""
    import pandas as pd

    cfg = saliency_config(params)
    out = Path(out_dir)
    labels = [str(s["label"]) for s in read_manifest(slices_dir)["slices"]] if cfg.pairs else []
    pairs, skipped = applicable_pairs(cfg, params, labels)
    for reason in skipped:
        log.info("saliency: skipped %s", reason)
    years = tuple(y for y in cfg.eval_years if y in labels)
    if not pairs or not years:  # saliency off or inapplicable (e.g. text models): an explained output for DVC
        out.mkdir(parents=True, exist_ok=True)
        (out / "concentration.json").unlink(missing_ok=True)  # nothing of an earlier run is logged again
        why = skipped + [f"eval year {y} is not a slice label" for y in cfg.eval_years if y not in labels]
        (out / "README.txt").write_text("saliency: nothing to compute: " +
                                        ("; ".join(why) if why else "no (model, cutoff) pairs in params.yaml") + "\n")
        if cfg.pairs:
            log.info("saliency: nothing to compute for the configured models and slices (see %s)", out / "README.txt")
        return {"cells": 0, "summary": []}
    cfg = replace(cfg, pairs=tuple(pairs), eval_years=years)
    models = list(dict.fromkeys(m for m, _ in cfg.pairs))
    cutoffs = list(dict.fromkeys(c for _, c in cfg.pairs))
    table: list[dict[str, Any]] = []
    grids: dict[str, dict[tuple[str, str], np.ndarray]] = {e: {} for e in cfg.eval_years}
    images: dict[str, np.ndarray] = {}
    logged: list[dict[str, Any]] = []  # what each unit's MLflow run gets (log_folder)
    for model in models:
        exp = Experiment(params, model, slices_dir, features_dir,
                         recorded_environment(params, model, checkpoints_dir, resolve_if_missing=True))
        pixels = pixel_inputs(exp, slices_dir)
        forward = forward_builder(exp)
        for cutoff in (c for m, c in cfg.pairs if m == model):
            i = slice_index(exp.labels, cutoff, "cutoff")
            checkpoints = finished_seeds(exp, checkpoints_dir, i)
            seeds = [s for s, _ in checkpoints]
            for eval_year in cfg.eval_years:
                j = slice_index(exp.labels, eval_year, "eval year")
                rows = select_rows(exp.slice_ids, exp.split, i, j, cfg.n_images)
                maps, image, img_scores = cell_maps(exp, forward, pixels, checkpoints, rows, cfg.batch_size,
                                                    cfg.block, checkpoints_dir)
                npz = out / "arrays" / model / f"cutoff{cutoff}_eval{eval_year}.npz"
                npz.parent.mkdir(parents=True, exist_ok=True)
                np.savez_compressed(npz, maps=maps, mean=maps.mean(axis=0), seeds=np.array(seeds),
                                    image=image, rows=rows)
                table += [{"model": model, "family": exp.spec.family, "cutoff": cutoff, "eval": eval_year, "seed": s,
                           "n_images": len(rows), "block": cfg.block, **conc.scores(m, cfg.block), **extra}
                          for s, m, extra in zip(seeds, maps, img_scores)]  # per seed: mean map, mean per image
                grids[eval_year][(model, cutoff)] = maps.mean(axis=0)
                images.setdefault(eval_year, image)
                logged += [{"model": model, "unit_key": key, "seed": s, "cutoff": cutoff, "eval": eval_year,
                            "npz": str(npz.relative_to(out))} for s, key in checkpoints]
                log.info("saliency %s cutoff %s eval %s: %d images x %d seeds", model, cutoff, eval_year,
                         len(rows), len(seeds))
    figures = {e: draw_grid(grids[e], images[e], models, cutoffs, e, out / f"saliency_eval{e}.png")
               for e in cfg.eval_years}
    summary = summarise(table)
    pd.DataFrame(table).to_csv(out / "concentration.csv", index=False)
    summary.to_csv(out / "concentration_summary.csv", index=False)
    result = {"rows": table, "summary": json.loads(summary.to_json(orient="records")),
              "figures": {e: str(p) for e, p in figures.items()}, "logged": logged}
    (out / "concentration.json").write_text(json.dumps(result, indent=2))
    if log_mlflow:
        log_folder(params, out)
    return result


def log_folder(params: Params, out_dir: str | Path = "outputs/saliency") -> int:
    """Each map's metrics, ``.npz`` and figure on its unit's live MLflow run, from the stage's folder
    (its concentration.json); returns how many (unit, eval year) it logged. The report stage calls
    it, so that a pipeline starts MLflow once. Through the client API: the finished runs are not
    re-opened, so their recorded training times stay as they were."""
    import time

    import mlflow
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    out = Path(out_dir)
    doc = json.loads((out / "concentration.json").read_text()) if (out / "concentration.json").exists() else {}
    if not doc.get("logged"):
        return 0
    exp_id = tracking.configure(params.tracking)
    client, now, done = MlflowClient(), int(time.time() * 1000), 0
    runs = {m: tracking.live_runs(exp_id, params.dataset.name, m) for m in {e["model"] for e in doc["logged"]}}
    rows = {(r["model"], r["cutoff"], r["eval"], int(r["seed"])): r for r in doc["rows"]}
    for entry in doc["logged"]:
        run_id = runs[entry["model"]].get(entry["unit_key"])
        if run_id is None:  # a unit with no MLflow run (yet): nothing to attach to
            continue
        eval_year, row = entry["eval"], rows[entry["model"], entry["cutoff"], entry["eval"], int(entry["seed"])]
        try:
            client.log_batch(run_id, metrics=[
                Metric(f"saliency_top5_share_eval{eval_year}", float(row["top5_share"]), now, 0),
                Metric(f"saliency_entropy_eval{eval_year}", float(row["entropy"]), now, 0)])
            client.log_artifact(run_id, str(out / entry["npz"]), artifact_path="saliency")
            client.log_artifact(run_id, str(out / Path(doc["figures"][eval_year]).name), artifact_path="saliency")
            done += 1
        except mlflow.exceptions.MlflowException as exc:
            log.warning("saliency: could not log to MLflow run %s: %s", run_id, exc)
    return done
