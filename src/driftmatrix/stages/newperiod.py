"""``driftmatrix estimate --data PATH``: every cutoff model's score on a new period, before its
labels arrive, and whether to retrain (docs/estimates.md, "driftmatrix estimate --data PATH"): each
unit runs on the new inputs as its registered model serves them, every method estimates its score
from the unit's held-out rows (as the backtest at cutoff i) and from its latest labelled period
(``<method>@prev``), and each model's policy decides (:func:`decide`); a drop within the noise is
never ``retrain``."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from driftmatrix.config import Params, estimate_config
from driftmatrix.data.sources.tabular import read_inputs
from driftmatrix.data.table import DataError, DatasetMeta, read_manifest
from driftmatrix.estimate.backtest import ModelScores, estimate_from_history
from driftmatrix.estimate.cells import from_doc
from driftmatrix.estimate.domain import WeightCache, image_features, read_slice_inputs, table_features
from driftmatrix.estimate.methods import CAP_SLACK, CONFIDENCE_METHODS, METHODS
from driftmatrix.learn.score import forward_stats
from driftmatrix.runtime.executor import torch_threads
from driftmatrix.stages.estimates import load_model
from driftmatrix.tracking.runs import configure, load_registered
from driftmatrix.units.environment import Environment
from driftmatrix.units.experiment import ExperimentInfo
from driftmatrix.units.store import CheckpointStore, ScoreStore

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def read_images(path: str | Path, size: int) -> tuple[np.ndarray, list[str]]:
    """(uint8 (N, size, size, 3), file names) of every image under ``path`` (a folder, searched
    recursively, or an ``.npy``), decoded as ingestion decodes them; class folders are ignored."""
    from driftmatrix.features.transform import read_images as decode_files

    path = Path(path)
    if path.is_file() and path.suffix == ".npy":
        arr = np.load(path, allow_pickle=False)
        if arr.ndim != 4 or arr.shape[1:] != (size, size, 3) or arr.dtype != np.uint8:
            raise DataError(f"{path}: expected uint8 images (N, {size}, {size}, 3) as the slices hold, got {arr.dtype} "
                            f"{arr.shape}")
        return arr, [f"{path.name}[{k}]" for k in range(len(arr))]
    if not path.is_dir():
        raise DataError(f"{path}: no such folder (or .npy of images)")
    files = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not files:
        raise DataError(f"{path}: no images ({', '.join(IMAGE_SUFFIXES)}) found")
    return decode_files(files, (size, size)), [str(f.relative_to(path)) for f in files]


def read_period(params: Params, data: str | Path, slices_dir: str | Path, meta) -> tuple[Any, np.ndarray | None]:
    """(raw inputs, their input features for ``IW-inputs`` or None) of the new period at ``data``,
    read as ingestion reads the dataset, labels ignored: images, a feature frame or documents."""
    if meta.input_kind == "image":
        images_path = Path(slices_dir) / "images.npy"
        if not images_path.exists():
            raise DataError(f"{slices_dir}: no images.npy, but the dataset holds images (run `driftmatrix slice`)")
        images, _ = read_images(data, int(np.load(images_path, mmap_mode="r", allow_pickle=False).shape[1]))
        return images, image_features(images)
    ds = params.dataset
    options = dict(ds.options) if ds.source == "table" else {"input": ds.options.get("input_fields") or "text"}
    frame, report = read_inputs(data, meta.numeric, meta.categorical, **{**options, "progress": False})
    log.info("estimate: %s: %s", data, report.summary())
    if not len(frame):
        raise DataError(f"{data}: no record kept ({report.summary()})")
    if meta.input_kind == "text":
        return frame["text"].tolist(), None
    return frame, table_features(frame[list(meta.numeric)].to_numpy(np.float64)) if meta.numeric else None


@dataclass(frozen=True)
class Choice:
    method: str
    reason: str


#: Suffix of the estimates that start from the unit's latest labelled period (the backtest's
#: ``previous_period``): ``carry-forward@prev`` is the unit's score on that period.
PREVIOUS = "@prev"
#: Methods that can be trusted for the retrain flag. Carry-forward from M[i, i] predicts no drop
#: by construction, so it could never raise the flag: it is the baseline, not a candidate
#: (carry-forward@prev, the drop seen so far, is one).
CANDIDATES = tuple(m for m in METHODS if m != "carry-forward") + tuple(m + PREVIOUS for m in METHODS)
#: Under a detected label shift: the methods that do not read the model's confidences.
SHIFT_CANDIDATES = ("trend", "BBSE") + tuple(m + PREVIOUS for m in ("carry-forward", "trend", "BBSE"))


def backtested(summary: Mapping[str, Any]) -> dict[str, float]:
    """Backtest MAE by estimate name (``<method>@prev``: one period ahead, on the same future cells)."""
    out = {}
    for part, suffix in ((summary, ""), (summary.get("previous_period") or {}, PREVIOUS)):
        out.update({m + suffix: r["mae"] for m, r in part.items() if m in METHODS and r.get("mae") is not None})
    return out


def choose(summary: Mapping[str, Any] | None, shifted: bool) -> Choice:
    """The estimate a model's retrain flag is trusted from: the lowest backtest MAE among the
    candidates (:data:`SHIFT_CANDIDATES` under a label shift); trend without a backtest."""
    pool = SHIFT_CANDIDATES if shifted else CANDIDATES
    if not summary:
        return Choice("trend", "no backtest (run `driftmatrix estimates`): trend, the matrix's own decay")
    maes = backtested(summary)
    ranked = sorted((maes[m], m) for m in pool if m in maes)
    if not ranked:
        return Choice("trend", "no backtested method applies")
    mae, m = ranked[0]
    why = f"backtest MAE {mae:.2f}"
    if "carry-forward" in maes and m != "carry-forward":
        why += f" vs carry-forward {maes['carry-forward']:.2f}"
    if summary.get("noise_floor") is not None:
        why += f", noise floor {summary['noise_floor']:.2f}"
    if shifted:
        why += "; label shift: confidence-based methods not trusted"
    return Choice(m, why)


def unit_outputs(params: Params, model: str, ms: ModelScores, raw, checkpoints_dir: str | Path, slices_dir: str | Path,
                 source: str = "checkpoints", scores_dir: str | Path = "outputs/scores") -> dict[tuple[int, int], np.ndarray]:
    """(seed, cutoff index) -> the unit's outputs on the new rows ``raw``, made as the served model
    and the evaluate stage make them. With ``source="registry"`` no checkpoint is read: the
    environment comes from the scores' copy, each unit from its registered version."""
    from driftmatrix.features import transform
    from driftmatrix.tracking import pyfunc as serving

    store = CheckpointStore(checkpoints_dir, model)
    recorded = (ScoreStore(scores_dir, model) if source == "registry" else store).environment()
    if recorded is None:
        raise DataError(f"{Path(scores_dir) / model}: no scores (run `driftmatrix evaluate -m {model}`)"
                        if source == "registry" else
                        f"{Path(checkpoints_dir) / model}: no checkpoints (run `driftmatrix train -m {model}`)")
    env = Environment.from_dict(recorded)
    exp = ExperimentInfo(params, model, slices_dir, env)
    shape = np.shape(raw)[1:] if exp.meta.input_kind == "image" else None  # the slices' images, read at their size
    config = {**serving.serving_config(params, exp, shape), "device": env.device}
    out = {}
    with torch_threads(max(1, env.threads or 1)):
        inputs = transform.model_inputs(config, raw, transform.load_encoder(config, env.device), env.device)
        for unit in exp.plan.units:
            net = unit_network(params, unit, store, config, env.device, source, scores_dir)
            if net is not None:
                out[ms.seeds.index(unit.seed), unit.cutoff_index] = transform.forward(net, inputs, config)
    return out


def unit_network(params: Params, unit, store, config: Mapping[str, Any], device: str, source: str,
                 scores_dir: str | Path = "outputs/scores"):
    """A unit's network from the MLflow registry or its checkpoint (None, with a warning, without one)."""
    from driftmatrix.features import transform

    if source == "registry":
        configure(params.tracking)
        try:
            digest = ScoreStore(scores_dir, unit.model).read(unit.key).get("weights_digest")
            return load_registered(unit, digest).to(device)
        except LookupError as exc:  # no version of this unit and weights: the registry's own line says why
            raise DataError(f"{exc}; without --registry the checkpoints are read") from None
        except Exception as exc:  # noqa: BLE001 - any registry failure: one line, and the way out
            raise DataError(f"{unit.model} seed {unit.seed} cutoff {unit.cutoff}: the MLflow registry did not give "
                            f"a model ({type(exc).__name__}: {str(exc)[:200]}); without --registry the "
                            f"checkpoints are read") from None
    if not store.done(unit.key):
        log.warning("%s seed %d cutoff %s: no checkpoint; skipped", unit.model, unit.seed, unit.cutoff)
        return None
    return transform.load_network(store.folder(unit.key), config, device)


#: Standard errors of the held-out cell within which a drop is sampling noise, never a retrain.
NOISE_SE = 2.0


def noise(ms: ModelScores, i: int, summary: Mapping[str, Any] | None) -> float:
    """NOISE_SE binomial standard errors of cutoff i's held-out cell M[i, i] (seed mean), in the
    matrix's points, for accuracy-type metrics; else the backtest's noise floor (0 without one)."""
    if "accuracy" in ms.metric:
        p, n = float(np.nanmean(ms.values[:, i, i])) / 100.0, float(np.nanmean(ms.n_eval[:, i, i]))
        if n > 0 and 0.0 <= p <= 1.0:
            return NOISE_SE * 100.0 * float(np.sqrt(p * (1.0 - p) / n))
    return float((summary or {}).get("noise_floor") or 0.0)


def decide(rule: Mapping[str, Any] | None, ms: ModelScores, i: int, lag: int, drop: float) -> tuple[str, float, float]:
    """(what, signal, tau) of a unit's policy on the new period: retrain when signal > tau. ``rule``:
    the model's policy (``recommendation.json`` per_model; None: the estimate trigger at tau 0); the
    drift trigger, whose statistic needs an audit of the new period, is decided by the estimated drop."""
    policy = (rule or {}).get("policy", "estimate")
    if policy == "never":
        return "never retrained", 0.0, np.inf
    if policy == "periodic":  # a unit trained at cutoff i serves periods i+1..i+H
        return f"every {rule['param']} periods: lag", float(lag), float(rule["param"])
    tau = 0.0 if rule is None else np.inf if rule.get("next_tau") is None else float(rule["next_tau"])
    sign = 1.0 if ms.higher_is_better else -1.0
    M = sign * np.nanmean(ms.values, axis=0)
    if policy == "label":
        return "label trigger: drop on the latest labelled period", float(M[i, i] - M[i, -1]), tau
    if policy == "cumulative":
        return "cumulative trigger: summed drop", float(np.nansum(M[i, i] - M[i, i + 1:]) + drop), tau
    return f"{policy} trigger: estimated drop", drop, tau


def estimate_model(ms: ModelScores, outputs: Mapping[tuple[int, int], np.ndarray], task: str, ahead: int,
                   summary: Mapping[str, Any] | None, rule: Mapping[str, Any] | None, shift_threshold: float,
                   min_ess: float, cutoffs: Sequence[int] | None = None,
                   cap_slack: float = CAP_SLACK, target_x: np.ndarray | None = None,
                   cache=None) -> list[dict[str, Any]]:
    """One record per cutoff (seeds averaged): every method's estimate, the trusted one and its drop,
    the policy's decision (:func:`decide`) and the retrain flag. ``target_x``: the new rows' input
    features for ``IW-inputs``; ``cache``: a ``domain.WeightCache`` of this period."""
    K = ms.K
    records = []
    for i in cutoffs if cutoffs is not None else range(K):
        per_seed, shifts, ess = [], [], {"IW": [], "IW-inputs": []}
        for s in range(len(ms.seeds)):
            if (s, i) not in outputs or not np.isfinite(ms.values[s, i, i]):
                continue
            target = from_doc(forward_stats(outputs[s, i], None, task))
            est = estimate_from_history(ms, s, i, K - 1 - i + ahead, target, min_ess, shift_threshold=shift_threshold,
                                        cap_slack=cap_slack, target_x=target_x, period="new", cache=cache)
            latest = est if i == K - 1 else estimate_from_history(
                ms, s, i, ahead, target, min_ess, shift_threshold=shift_threshold, cap_slack=cap_slack, latest=K - 1)
            est = {**est, **{m + PREVIOUS: e for m, e in latest.items()}}
            per_seed.append((ms.values[s, i, i], est))
            if "BBSE" in est:
                shifts.append((est["BBSE"].flags["label_shift_tv"], est["BBSE"].flags["label_shift"]))
            for m in ess:
                if m in est:
                    ess[m].append(est[m].flags["ess"])
        if not per_seed:
            continue
        id_score = float(np.mean([v for v, _ in per_seed]))
        methods = {m: round(float(np.mean([e[m].value for _, e in per_seed])), 3)
                   for m in METHODS + tuple(m + PREVIOUS for m in METHODS) if all(m in e for _, e in per_seed)}
        shift = float(np.mean([tv for tv, _ in shifts])) if shifts else None
        shifted = bool(shifts) and sum(flag for _, flag in shifts) * 2 > len(shifts)  # most seeds
        choice = choose(summary, shifted)
        trusted = choice.method if choice.method in methods else "trend"
        drop = round(id_score - methods[trusted] if ms.higher_is_better else methods[trusted] - id_score, 3)
        lag = K - 1 - i + ahead
        what, signal, tau = decide(rule, ms, i, lag, drop)
        floor = noise(ms, i, summary)
        records.append({
            "model": ms.model, "cutoff": ms.slices[i], "cutoff_index": i, "lag": lag,
            "seeds": len(per_seed), "in_distribution": round(id_score, 3), "estimates": methods,
            "drops": {m: round(id_score - v if ms.higher_is_better else v - id_score, 3) for m, v in methods.items()},
            "trusted": trusted, "why": choice.reason, "drop": drop, "noise": round(floor, 3),
            "decision": {"policy": what, "signal": round(signal, 4), "tau": None if np.isinf(tau) else round(tau, 4)},
            "retrain": bool(signal > tau and drop > floor),
            "label_shift_tv": None if shift is None else round(shift, 4), "label_shift": shifted,
            "iw_ess": None if not ess["IW"] else round(float(np.mean(ess["IW"])), 1),
            "iw_inputs_ess": None if not ess["IW-inputs"] else round(float(np.mean(ess["IW-inputs"])), 1),
            "warning": ("the labels of this period seem to have moved (estimated total variation "
                        f"{shift:.2f} > {shift_threshold}, predicted classes moved beyond chance): confidence-based estimates "
                        f"({', '.join(CONFIDENCE_METHODS)}) are not to be trusted") if shifted else None})
    return records


def run(params: Params, data: str | Path, slices_dir: str | Path = "outputs/slices",
        scores_dir: str | Path = "outputs/scores", checkpoints_dir: str | Path = "outputs/checkpoints",
        estimates_dir: str | Path = "outputs/estimates", out: str | Path | None = None, ahead: int = 1,
        latest: bool = False, source: str = "checkpoints",
        policy_dir: str | Path = "outputs/policy") -> list[dict[str, Any]]:
    """Estimate every model's cutoff units (or the latest) on the period at ``data``, ``ahead``
    periods after the last slice, and decide under each model's policy; writes ``out`` (JSON, CSV)."""
    cfg = estimate_config(params)
    manifest = read_manifest(slices_dir)
    meta = DatasetMeta.from_dict(manifest["dataset"])
    raw, features = read_period(params, data, slices_dir, meta)
    log.info("estimate: %d rows from %s", len(raw), data)
    backtest_path = Path(estimates_dir) / "backtest.json"
    backtests = json.loads(backtest_path.read_text()) if backtest_path.exists() else {}
    rec_path = Path(policy_dir) / "recommendation.json"
    rules = json.loads(rec_path.read_text())["per_model"] if rec_path.exists() else {}
    inputs, target_x, cache = ((read_slice_inputs(slices_dir), features, WeightCache())
                               if cfg.iw_inputs and features is not None else (None, None, None))
    records = []
    for model in params.models:
        ms = load_model(params, model, manifest, scores_dir)
        if ms is None:
            log.warning("estimate: %s has no scores; skipped", model)
            continue
        try:
            outputs = unit_outputs(params, model, ms, raw, checkpoints_dir, slices_dir, source, scores_dir)
        except DataError as exc:
            log.warning("estimate: %s", exc)
            continue
        records += estimate_model(replace(ms, inputs=inputs), outputs, meta.task, ahead, backtests.get(model),
                                  rules.get(model), cfg.label_shift, cfg.min_ess, [ms.K - 1] if latest else None,
                                  cfg.cap_slack, target_x, cache)
    if not records:
        raise DataError(f"no model of {list(params.models)} could be estimated on {data} (see the warnings above)")
    if out is not None:
        write(records, Path(out), {"data": str(data), "rows": int(len(raw)), "policies": rules,
                                   "noise_se": NOISE_SE, "label_shift": cfg.label_shift, "ahead": ahead})
    return records


def write(records: Sequence[Mapping[str, Any]], out: Path, meta: Mapping[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "estimates.json").write_text(json.dumps({**meta, "records": list(records)}, indent=2))
    lines = ["model,cutoff,method,estimate,drop,in_distribution,trusted,retrain,label_shift_tv"]
    for r in records:
        for m, v in r["estimates"].items():
            lines.append(",".join(str(x) for x in (r["model"], r["cutoff"], m, v, r["drops"][m], r["in_distribution"],
                                                   int(m == r["trusted"]), int(r["retrain"] and m == r["trusted"]),
                                                   "" if r["label_shift_tv"] is None else r["label_shift_tv"])))
    (out / "estimates.csv").write_text("\n".join(lines) + "\n")


def render(records: Sequence[Mapping[str, Any]]) -> str:
    """The printed table: per model the trusted method and its policy, then per cutoff the scores,
    the trusted estimate, the policy's signal and the flag (every estimate is in the JSON and CSV)."""
    out, model = [], None
    for r in records:
        d = r["decision"]
        if r["model"] != model:
            model = r["model"]
            when = f"{d['policy']} > {d['tau']:g}" if d["tau"] is not None else f"{d['policy']}: no retrain due"
            out.append(f"\n{model}: trusts {r['trusted']} ({r['why']}); policy: {when}, and only a drop beyond "
                       f"{NOISE_SE:g} standard errors of the held-out cell (noise) retrains")
            out.append(f"  {'cutoff':<8}{'ID':>7}{'latest':>8}{'estimate':>10}  {'trusted':<22}{'drop':>6}{'noise':>7}"
                       f"{'signal':>8}  flag")
        due = d["tau"] is not None and d["signal"] > d["tau"]
        flag = "RETRAIN" if r["retrain"] else "ok (drop within noise)" if due else "ok"
        if r["warning"]:
            flag += f"  (label shift {r['label_shift_tv']:.2f}: confidence-based estimates not trusted)"
        latest = r["estimates"].get("carry-forward" + PREVIOUS, float("nan"))
        out.append(f"  {r['cutoff']:<8}{r['in_distribution']:>7.1f}{latest:>8.1f}{r['estimates'][r['trusted']]:>10.1f}"
                   f"  {r['trusted']:<22}{r['drop']:>6.1f}{r['noise']:>7.1f}{d['signal']:>8.2f}  {flag}")
    return "\n".join(out).lstrip("\n")
