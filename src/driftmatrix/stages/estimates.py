"""The ``estimates`` stage (after ``matrices``): backtest every estimator on every model's drift
matrices; writes ``outputs/estimates/`` (``backtest.json``, ``backtest.csv``, ``<model>.json``: formats
in docs/estimates.md and docs/CONTRACTS.md) and the DVC metrics ``metrics/estimates.json``. Its MLflow
run is logged by the report stage (:func:`log_folder`), which starts MLflow anyway, or here with
``--track``."""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from driftmatrix.config import METRICS, EstimateConfig, Params, estimate_config, evaluation_metric, metric_for
from driftmatrix.data.table import DataError, DatasetMeta, read_manifest
from driftmatrix.analysis import matrixfile
from driftmatrix.estimate import backtest
from driftmatrix.estimate.backtest import Backtest, ModelScores
from driftmatrix.estimate.cells import from_doc
from driftmatrix.estimate.domain import SliceInputs, WeightCache, read_slice_inputs
from driftmatrix.estimate.methods import CAP_SLACK, METHODS
from driftmatrix.tracking import runs as tracking
from driftmatrix.units.environment import Environment
from driftmatrix.units.plan import model_plan, slice_hashes
from driftmatrix.units.store import ScoreStore, current_row

log = logging.getLogger(__name__)

DVC_METRICS = Path("metrics/estimates.json")


def load_model(params: Params, model: str, manifest: Mapping[str, Any], scores_dir: str | Path) -> ModelScores | None:
    """One model's seed-level cells and statistics from its current plan's scores; None when nothing is scored."""
    store = ScoreStore(scores_dir, model)
    recorded = store.environment()
    if recorded is None:
        return None
    plan = model_plan(params, model, manifest, Environment.from_dict(recorded))
    hashes = slice_hashes(manifest)
    S, K = len(plan.seeds), len(plan.labels)
    values, n_eval = np.full((S, K, K), np.nan), np.full((S, K, K), np.nan)
    stats = [[[None] * K for _ in range(K)] for _ in range(S)]
    for unit in plan.units:
        s, i = plan.seeds.index(unit.seed), unit.cutoff_index
        cells = store.read(unit.key)["cells"]
        row = current_row(plan, unit, hashes, cells)
        values[s, i] = [np.nan if v is None else v for v in row["values"]]
        n_eval[s, i] = [np.nan if v is None else v for v in row["n_eval"]]
        for cell in plan.cells(unit, hashes):
            stats[s][i][cell.j] = from_doc((cells.get(cell.key) or {}).get("stats"))
    if np.isnan(values).all():
        return None
    metric = metric_for(DatasetMeta.from_dict(manifest["dataset"]).task, evaluation_metric(params))
    return ModelScores(model, list(plan.labels), list(plan.seeds), values, n_eval, stats,
                       [plan.unit(plan.seeds[0], i).window for i in range(K)], metric.higher_is_better,
                       metric.key, plan.units[0].family)


def from_matrices(m) -> ModelScores:
    """A folder's drift matrices (ours or published) as cells without forward-pass statistics: only the
    matrix methods apply, the noise floor only where ``n_eval`` is recorded. Cumulative windows are assumed."""
    S, K = m.seed_values.shape[0], len(m.slices)
    n = np.asarray(m.extra.get("n_eval", np.full((K, K), np.nan)), dtype=float)
    metric = next((k for k, v in METRICS.items() if v.name.lower() == m.metric.lower()), m.metric.lower())
    return ModelScores(m.model, list(m.slices), list(m.seeds or range(S)), np.asarray(m.seed_values, dtype=float),
                       np.broadcast_to(n, (S, K, K)).copy(), [[[None] * K for _ in range(K)] for _ in range(S)],
                       [tuple(range(i + 1)) for i in range(K)], m.higher_is_better, metric, m.family)


#: What ``previous_period`` keeps of the one-period-ahead backtest's summary, per method (and all the rest).
PREVIOUS_KEYS = ("mae", "bias", "n_cells", "mae_by_seed", "coverage", "rho")


def backtest_model(ms: ModelScores, min_ess: float = 30.0, shift_threshold: float = 0.1,
                   cap_slack: float = CAP_SLACK, cache: WeightCache | None = None) -> list[Backtest]:
    """One model's backtest per reference (as at cutoff i, one period ahead), flags not yet
    calibrated across models (:func:`combine`). They keep nothing of ``ms``'s per-cell statistics."""
    return [backtest.run(ms, min_ess, shift_threshold, cap_slack=cap_slack, cache=cache, reference=r)
            for r in backtest.REFERENCES]


def read_and_backtest(params: Params, model: str, manifest: Mapping[str, Any], scores_dir: str | Path,
                      inputs: SliceInputs | None, cfg: EstimateConfig, cache: WeightCache
                      ) -> tuple[list[Backtest], ModelScores] | None:
    """``model`` read from its scores and backtested (None when nothing is scored): its backtests and
    the model without its per-cell statistics and slice inputs, which are most of its memory and are
    freed on return, before the next model is read; the summaries and ``<model>.json`` read the rest."""
    ms = load_model(params, model, manifest, scores_dir)
    if ms is None:
        return None
    runs = backtest_model(replace(ms, inputs=inputs), cfg.min_ess, cfg.label_shift, cfg.cap_slack, cache)
    return runs, replace(ms, stats=(), inputs=None)


def combine(runs: Mapping[str, list[Backtest]], models: Mapping[str, ModelScores], shift_threshold: float = 0.1
            ) -> dict[str, tuple[Backtest, Backtest, dict[str, Any]]]:
    """Each model's two backtests and summary (with ``previous_period``: the one-period-ahead
    backtest's, only methods that estimate every future cell that way, so not IW-inputs), BBSE's flag
    calibrated on every model's cells per reference."""
    for k in range(len(backtest.REFERENCES)):
        backtest.calibrate_flags([r[k] for r in runs.values()], shift_threshold)
        for name, r in runs.items():
            r[k].summary.update(backtest.summarize(r[k], models[name], shift_threshold))
    out = {}
    for name, (bt, ahead_bt) in runs.items():
        ahead = ahead_bt.summary
        previous = {m: {k: ahead[m][k] for k in PREVIOUS_KEYS if k in ahead[m]} for m in METHODS
                    if m in ahead and ahead[m]["n_cells"] == ahead["n_future_cells"]}
        previous.update({k: v for k, v in ahead.items() if k not in METHODS})
        out[name] = bt, ahead_bt, {**bt.summary, "previous_period": previous}
    return out


def backtest_models(models: Mapping[str, ModelScores], min_ess: float = 30.0, shift_threshold: float = 0.1,
                    cap_slack: float = CAP_SLACK, cache: WeightCache | None = None
                    ) -> dict[str, tuple[Backtest, Backtest, dict[str, Any]]]:
    """:func:`backtest_model` of each model, then :func:`combine`. ``cache``: shared domain weights."""
    runs = {name: backtest_model(ms, min_ess, shift_threshold, cap_slack, cache) for name, ms in models.items()}
    return combine(runs, models, shift_threshold)


def run_matrices(folder: str | Path, out_dir: str | Path, shift_threshold: float = 0.1) -> dict[str, dict[str, Any]]:
    """Backtest the matrix methods on any folder of drift matrices (e.g. published ones) into ``out_dir``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    models = {name: from_matrices(m) for name, m in matrixfile.load_folder(folder).items()}
    summaries = {}
    for name, (bt, ahead, summaries[name]) in backtest_models(models, shift_threshold=shift_threshold).items():
        (out_dir / f"{name}.json").write_text(json.dumps(model_doc(models[name], bt, ahead)))
    (out_dir / "backtest.json").write_text(json.dumps(summaries, indent=2))
    (out_dir / "backtest.csv").write_text(csv_rows(summaries))
    return summaries


def _json(a: np.ndarray):
    return matrixfile.nested_lists(a, 4)


def model_doc(ms: ModelScores, bt: Backtest, ahead: Backtest) -> dict[str, Any]:
    """``<model>.json`` (docs/estimates.md): per method the estimated matrices, intervals and errors;
    ``policy_estimates``: each cell one period ahead (``ahead``) by the method chosen causally."""
    methods = {}
    for name, est in bt.estimates.items():
        if not np.isfinite(est).any():
            continue
        err = bt.error(name)
        with warnings.catch_warnings():  # cells with no estimate in any seed stay NaN
            warnings.simplefilter("ignore", RuntimeWarning)
            mean_err = np.nanmean(err, axis=0)
        entry = {"estimate": _json(est), "error": _json(err), "mean_error": _json(mean_err)}
        if np.isfinite(bt.lo[name]).any():
            entry["lo"], entry["hi"] = _json(bt.lo[name]), _json(bt.hi[name])
        methods[name] = entry
    return {"model": ms.model, "family": ms.family, "slices": list(ms.slices), "seeds": list(ms.seeds),
            "metric": ms.metric, "truth": _json(ms.values), "label_shift": _json(bt.label_shift),
            "estimated_label_shift": _json(bt.estimated_shift), "methods": methods, "summary": bt.summary,
            "policy_estimates": _json(ahead.causal)}


def csv_rows(backtests: Mapping[str, Mapping[str, Any]]) -> str:
    lines = ["model,reference,method,mae,bias,n_cells,coverage,rho,noise_floor,mae_label_shift,mae_no_label_shift"]
    for model, s in backtests.items():
        for reference, part in (("window", s), ("previous", s.get("previous_period") or {})):
            for m in METHODS:
                if m in part:
                    r = part[m]
                    vals = [r["mae"], r["bias"], r["n_cells"], r.get("coverage"), r.get("rho"), s["noise_floor"],
                            r.get("mae_label_shift"), r.get("mae_no_label_shift")]
                    lines.append(",".join([model, reference, m] + ["" if v is None else str(v) for v in vals]))
    return "\n".join(lines) + "\n"


def dvc_metrics(backtests: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Per model, flat for `dvc exp show`: noise floor, the causal choice's MAE (``best_mae``) and every method's."""
    out = {}
    for model, s in backtests.items():
        ahead = s.get("previous_period") or {}
        rec = {"noise_floor": s["noise_floor"], "best_mae": s.get("causal_mae"),
               "best_mae_previous_period": ahead.get("causal_mae")}
        rec.update({f"mae_{m}": s[m]["mae"] for m in METHODS if m in s})
        out[model] = rec
    return out


def log_to_mlflow(params: Params, backtests: Mapping[str, Mapping[str, Any]], files: list[Path]) -> str:
    """One run ``estimates · <dataset>``: MAE, bias and coverage per model and method, and the files."""
    import mlflow

    dataset = params.dataset.name
    exp_id = tracking.configure(params.tracking)
    with tracking.stage_run(exp_id, f"estimates · {dataset}", {"kind": "estimates", "dataset": dataset}) as run:
        metrics = {}
        for model, s in backtests.items():
            ahead = s.get("previous_period") or {}
            metrics.update({f"{model}.noise_floor": s.get("noise_floor"), f"{model}.causal_mae": s.get("causal_mae"),
                            f"{model}.previous_period.causal_mae": ahead.get("causal_mae")})
            for m in METHODS:
                key = f"{model}.{m.replace('+', '_')}"  # MLflow keys take no "+": AC+cap -> AC_cap
                metrics.update({f"{key}.{k}": (s.get(m) or {}).get(k) for k in ("mae", "bias", "coverage", "rho")})
                metrics[f"{model}.previous_period.{m.replace('+', '_')}.mae"] = (ahead.get(m) or {}).get("mae")
        mlflow.log_metrics({k: v for k, v in metrics.items() if v is not None})
        mlflow.set_tags({f"trusted_method.{model}": s["trusted_method"] for model, s in backtests.items()
                         if "trusted_method" in s})
        for f in files:
            mlflow.log_artifact(str(f), artifact_path="estimates")
        return run.info.run_id


def log_folder(params: Params, out_dir: str | Path = "outputs/estimates") -> str | None:
    """:func:`log_to_mlflow` of the stage's folder (None without a backtest), called by the report
    stage so that MLflow starts once (about 2.7 s, more than the estimation itself)."""
    out_dir = Path(out_dir)
    path = out_dir / "backtest.json"
    if not path.exists():
        return None
    files = [path, out_dir / "backtest.csv", *sorted(p for p in out_dir.glob("*.json") if p != path)]
    return log_to_mlflow(params, json.loads(path.read_text()), [f for f in files if f.exists()])


def run(params: Params, slices_dir: str | Path = "outputs/slices", scores_dir: str | Path = "outputs/scores",
        out_dir: str | Path = "outputs/estimates", metrics_path: str | Path | None = DVC_METRICS,
        track: bool = False) -> dict[str, dict[str, Any]]:
    """The whole stage; returns backtest.json's content."""
    cfg = estimate_config(params)
    manifest = read_manifest(slices_dir)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # model-independent: read once, weights shared by all models; opt-in (docs/estimates.md: cost)
    inputs = read_slice_inputs(slices_dir) if cfg.iw_inputs else None
    # one model's per-cell statistics in memory at a time (at 250 units of 50 periods, 136 MiB each)
    models, runs, cache = {}, {}, WeightCache()
    for name in params.models:
        done = read_and_backtest(params, name, manifest, scores_dir, inputs, cfg, cache)
        if done is None:
            log.warning("estimates: no scored cells for %s; left out", name)
            continue
        runs[name], models[name] = done
    if not models:
        raise DataError(f"{scores_dir}: no scored cells for {list(params.models)} (run the evaluate stage first)")
    summaries, files = {}, []
    for name, (bt, ahead, summaries[name]) in combine(runs, models, cfg.label_shift).items():
        ms = models[name]
        path = out_dir / f"{name}.json"
        path.write_text(json.dumps(model_doc(ms, bt, ahead)))
        files.append(path)
        log.info("estimates: %s: noise floor %s, %s; chosen causally: MAE %s (one period ahead %s)%s", name,
                 bt.summary["noise_floor"], ", ".join(f"{m} {bt.summary[m]['mae']}" for m in METHODS if m in bt.summary),
                 bt.summary["causal_mae"], ahead.summary["causal_mae"],
                 "" if ms.metric == "accuracy" else f"; {ms.metric}: carry-forward and trend only")
    (out_dir / "backtest.json").write_text(json.dumps(summaries, indent=2))
    (out_dir / "backtest.csv").write_text(csv_rows(summaries))
    files = [out_dir / "backtest.json", out_dir / "backtest.csv", *files]
    if metrics_path:
        Path(metrics_path).parent.mkdir(parents=True, exist_ok=True)
        Path(metrics_path).write_text(json.dumps(dvc_metrics(summaries), indent=2))
    if track:
        log.info("estimates: logged run %s", log_to_mlflow(params, summaries, files))
    return summaries
