"""The ``policy`` stage (after ``estimates``): every retraining policy replayed on each model's
matrices (:mod:`driftmatrix.analysis.policy`) and the recommended (model, policy) for ``params.yaml:
policy``; also ``driftmatrix policy PATH`` on any folder of matrices (no estimate or drift trigger
without the estimates and audit stages' outputs). Inputs and ``outputs/policy/``: docs/policy.md.
No matplotlib here (it would double the stage's time): the report stage draws the frontier, logs
the MLflow run (:func:`log_folder`) and points the registry alias ``recommended``.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from driftmatrix.analysis import matrixfile, policy as pol
from driftmatrix.analysis.tables import Cohort
from driftmatrix.config import PolicyConfig
from driftmatrix.tracking import runs as tracking

log = logging.getLogger(__name__)

DVC_METRICS = Path("metrics/policy.json")


def estimates_of(folder: str | Path | None, cohort: Cohort) -> dict[str, np.ndarray]:
    """model -> E (S, K, K) aligned with the matrices' seeds; models without one are left out."""
    out = {}
    for model, dm in cohort.models.items():
        path = None if folder is None else Path(folder) / f"{model}.json"
        if path is None or not path.exists():
            continue
        doc = json.loads(path.read_text())
        if doc.get("policy_estimates") is None or list(doc.get("slices", [])) != list(dm.slices):
            continue
        E = np.array(doc["policy_estimates"], dtype=float)
        seeds = doc.get("seeds") or []
        if dm.seeds and all(s in seeds for s in dm.seeds):
            out[model] = E[[seeds.index(s) for s in dm.seeds]]
        elif E.shape[0] == dm.n_seeds:
            out[model] = E
    return out


def window_drift(audit_dir: str | Path | None, slices) -> np.ndarray | None:
    """The audit's D[r, t] (K, K), or None when it has none for these slices."""
    path = None if audit_dir is None else Path(audit_dir) / "drift.json"
    if path is None or not path.exists():
        return None
    doc = json.loads(path.read_text())
    wd = doc.get("window_drift")
    if not wd or list(doc.get("slices", [])) != list(slices):
        return None
    return np.array(wd["values"], dtype=float)


def seconds_of(dm) -> np.ndarray | None:
    """(S, K) training seconds per unit from the matrices' provenance (NaN where unknown)."""
    secs = dm.extra.get("seconds")
    return None if secs is None else np.array(secs, float)  # None -> NaN


@dataclass(frozen=True)
class Outcome:
    runs: dict  # model -> [pol.Run]
    rec: pol.Recommendation  # with each model's best deployable run at the price of a retrain
    cohort: Cohort


def compute(cohort: Cohort, cfg: PolicyConfig, E: Mapping[str, np.ndarray] | None = None,
            D: np.ndarray | None = None) -> Outcome:
    runs = {m: pol.evaluate(st, cfg.label_delay, (E or {}).get(m), D, seconds_of(cohort.models[m]),
                            cohort.higher_is_better, cfg.retrain_cost, cfg.budget) for m, st in cohort.stacks.items()}
    rec = pol.recommend(runs, cohort.families, cfg.retrain_cost, cfg.budget, cohort.higher_is_better, cohort.unit)
    return Outcome(runs, rec, cohort)


def _run_doc(r: pol.Run) -> dict:
    doc = {**pol.run_doc(r), "description": pol.describe(r)}
    if r.seconds is not None:
        doc["seconds"] = pol.json_number(float(np.nanmean(r.seconds)))
    if r.taus is not None:  # the tau a deployer uses at the next decision (null: no retrain yet)
        tau = float(np.median([ts[-1] for ts in r.taus]))
        doc["next_tau"] = tau if math.isfinite(tau) else None
    return doc


def recommendation_doc(o: Outcome, cfg: PolicyConfig) -> dict:
    return {"model": o.rec.model, "text": o.rec.text, "retrain_cost": cfg.retrain_cost, "budget": cfg.budget,
            "label_delay": cfg.label_delay, **({} if o.rec.run is None else {"run": _run_doc(o.rec.run)}),
            "per_model": {m: _run_doc(r) for m, r in o.rec.per_model.items()}}


def metrics_doc(o: Outcome) -> dict:
    """Flat numbers per model for `dvc exp show`: never, the chosen policy, each nested trigger, the oracle."""
    out: dict = {"recommended": o.rec.model or "none"}
    for m, rs in o.runs.items():
        if not rs:
            continue
        by = {(r.policy, r.param): r for r in rs}
        best = o.rec.per_model.get(m)
        rec = {"never": pol.json_number(by["never", None].score)}
        if best is not None:
            k = min(int(round(best.retrains)), max(r.param for r in rs if r.policy == "oracle"))
            rec.update({"chosen_score": pol.json_number(best.score), "chosen_retrains": best.retrains,
                        "oracle_same_retrains": pol.json_number(by["oracle", k].score)})
        for t in pol.SIGNALS:
            r = by.get((t, pol.NESTED))
            if r is not None:
                rec.update({f"{t}_score": pol.json_number(r.score), f"{t}_retrains": r.retrains})
        out[m] = rec
    return out


def run(matrices_dir: str | Path = "outputs/matrices", out_dir: str | Path = "outputs/policy",
        cfg: PolicyConfig = PolicyConfig(), estimates_dir: str | Path | None = "outputs/estimates",
        audit_dir: str | Path | None = "outputs/audit", metrics_path: str | Path | None = DVC_METRICS) -> Outcome:
    """The whole stage; writes ``out_dir`` (and ``metrics_path`` when given)."""
    cohort = Cohort(matrixfile.load_folder(matrices_dir))
    E = estimates_of(estimates_dir, cohort)
    D = window_drift(audit_dir, cohort.slices)
    o = compute(cohort, cfg, E, D)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "policies.csv").write_text(pol.csv_text(o.runs))
    for model, rs in o.runs.items():
        (out / f"{model}.json").write_text(json.dumps(pol.model_doc(model, rs)))
    (out / "recommendation.json").write_text(json.dumps(recommendation_doc(o, cfg), indent=2))
    if metrics_path:
        Path(metrics_path).parent.mkdir(parents=True, exist_ok=True)
        Path(metrics_path).write_text(json.dumps(metrics_doc(o), indent=2))
    log.info("policy: %d models (estimates for %s, drift %s); %s", len(o.runs), sorted(E) or "none",
             "yes" if D is not None else "no", o.rec.text)
    return o


def log_folder(params, out_dir: str | Path = "outputs/policy", plot: Path | None = None) -> str | None:
    """One MLflow run ``policy · <dataset>``: each model's chosen policy, the files and ``plot`` (None: no folder)."""
    out_dir = Path(out_dir)
    rec_path = out_dir / "recommendation.json"
    if not rec_path.exists():
        return None
    import mlflow

    rec = json.loads(rec_path.read_text())
    dataset = params.dataset.name
    exp_id = tracking.configure(params.tracking)
    with tracking.stage_run(exp_id, f"policy · {dataset}", {"kind": "policy", "dataset": dataset}) as run:
        mlflow.log_metrics({f"{model}.{k}": v for model, r in rec["per_model"].items() for k, v in r.items()
                            if k in ("retrains", "score", "std", "seconds") and isinstance(v, (int, float))
                            and math.isfinite(v)})
        mlflow.log_params({k: rec[k] for k in ("retrain_cost", "budget", "label_delay")})
        mlflow.set_tags({"recommended": rec["model"] or "none", "recommendation": rec["text"][:5000]})
        for f in [*sorted(out_dir.iterdir()), *([plot] if plot else [])]:
            if f.suffix in (".csv", ".json", ".png"):
                mlflow.log_artifact(str(f), artifact_path="policy")
        return run.info.run_id
