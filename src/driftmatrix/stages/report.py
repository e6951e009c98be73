"""Report stage: heatmaps, the HTML report and the MLflow record of the seed-averaged matrices.

Reads ``outputs/matrices`` (or any folder of published matrices) and writes ``outputs/report``:
``plots/<model>.png`` on one colour scale and ``report.html``; with an audit's ``drift.json``, the
audit's data drift against each model's decay (``drift_vs_decay.json``). With ``--track`` (the DVC
stage) it logs the MLflow runs ``matrices · <dataset>`` and those the audit, estimates and policy stages left
to it (one MLflow start for all), and makes the model registry agree with the matrices
(:mod:`driftmatrix.tracking.registry`; the alias ``recommended`` follows the policy stage's pick).
"""

from __future__ import annotations

import csv
import json
import logging
import math
from pathlib import Path

from driftmatrix.analysis import matrixfile
from driftmatrix.analysis.tables import Cohort
from driftmatrix.config import Params
from driftmatrix.reporting import drift_decay, figures, html
from driftmatrix.stages import audit as audit_stage, estimates as estimates_stage, policy as policy_stage
from driftmatrix.stages import saliency as saliency_stage
from driftmatrix.tracking import registry as registry_info, runs as tracking

log = logging.getLogger(__name__)


def write_frontier(cohort: Cohort, policies: Path, png: Path) -> Path | None:
    """The policy stage's frontier (``policies.csv``) as a PNG, or None without one."""
    if not policies.exists():
        return None
    with policies.open() as f:
        rows = list(csv.DictReader(f))
    return figures.save(figures.policy_frontier(rows, cohort.metric, cohort.unit, cohort.higher_is_better), png)


def log_to_mlflow(params: Params, cohort: Cohort, matrices: list[Path], plots: list[Path], report: Path,
                  dataset: str, decay_metrics: dict[str, float] | None = None) -> str:
    """One run per dataset with the summary metrics and every file; returns the run id."""
    import mlflow

    exp_id = tracking.configure(params.tracking)
    with tracking.stage_run(exp_id, f"matrices · {dataset}", {"kind": "matrices", "dataset": dataset}) as run:
        mlflow.set_tags({"metric": cohort.metric, "models": ",".join(cohort.models)})
        mlflow.log_metrics({f"{m}.{k}": v for m, s in cohort.summaries.items()
                            for k, v in s.as_dict().items() if not math.isnan(v)})
        mlflow.log_metrics({k: v for k, v in (decay_metrics or {}).items() if math.isfinite(v)})
        for sub, files in (("matrices", matrices), ("plots", plots), ("report", [report])):
            for f in files:
                mlflow.log_artifact(str(f), artifact_path=sub)
        return run.info.run_id


def run(matrices_dir: str | Path = "outputs/matrices", report_path: str | Path = "outputs/report/report.html",
        audit: str | Path | None = "outputs/audit/report.html", title: str | None = None,
        params: Params | None = None, estimates: str | Path | None = None) -> Path:
    """The whole stage; returns the report's path. Only with ``params`` (the DVC stage) is anything
    tracked. ``estimates``: the estimates stage's folder (default: beside the matrices)."""
    matrices_dir, report_path = Path(matrices_dir), Path(report_path)
    estimates = matrices_dir.parent / "estimates" if estimates is None else estimates
    cohort = Cohort(matrixfile.load_folder(matrices_dir))
    dataset = cohort.first.dataset or (params.dataset.name if params else "")
    sc = figures.scales(cohort)  # one colour scale for every model's heatmap
    plots = [figures.save(figures.model_heatmap(cohort, name, sc), report_path.parent / "plots" / f"{name}.png")
             for name in cohort.models]
    audit_doc = drift_decay.read_audit(audit)
    decay = None if audit_doc is None else drift_decay.correlations(audit_doc, cohort)
    if decay is not None:
        (report_path.parent / "drift_vs_decay.json").write_text(json.dumps(decay, indent=2))
    policy_dir = matrices_dir.parent / "policy"
    frontier = write_frontier(cohort, policy_dir / "policies.csv", report_path.parent / "plots" / "policy_frontier.png")
    report = html.run(cohort, report_path, audit=audit, title=title or f"Drift matrices: {dataset}",
                      decay=decay, policy_png=frontier, estimates=estimates,
                      importance=matrices_dir.parent / "importance", policy=policy_dir)
    log.info("report: %s (%d heatmaps)", report, len(plots))
    if params is not None:
        files = sorted(f for f in matrices_dir.iterdir() if f.suffix in (".json", ".csv"))
        run_id = log_to_mlflow(params, cohort, files, plots, report, dataset,
                               drift_decay.metrics(decay) if decay else None)
        log.info("report: logged run %s", run_id)
        if audit is not None and (audit_run := audit_stage.log_folder(params, Path(audit).parent)):
            log.info("report: logged the audit stage's run %s", audit_run)
        estimates_run = estimates_stage.log_folder(params, estimates)
        if estimates_run:
            log.info("report: logged the estimates stage's run %s", estimates_run)
        policy_run = policy_stage.log_folder(params, policy_dir, frontier)
        if policy_run:
            log.info("report: logged the policy stage's run %s", policy_run)
        if maps := saliency_stage.log_folder(params, matrices_dir.parent / "saliency"):
            log.info("report: logged %d saliency maps on their units' runs", maps)
        rec = policy_dir / "recommendation.json"
        recommended = json.loads(rec.read_text())["model"] if rec.exists() else None
        registry_info.annotate(params, cohort, run_id, recommended)  # version scores, descriptions, aliases
    return report
