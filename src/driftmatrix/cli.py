"""Command line: one thin command per pipeline stage; heavy imports inside them (an instant ``--help``)."""

from __future__ import annotations

import gc
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Optional

import typer

from driftmatrix.config import PolicyConfig, load_params, policy_config
from driftmatrix.errors import ConfigError, DataError, untrusted_model

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Temporal drift matrices: train on the past, score on every period.")
data_app = typer.Typer(no_args_is_help=True, help="Raw data: generate the built-in default, fetch real datasets.")
app.add_typer(data_app, name="data")

PARAMS_OPT = typer.Option(Path("params.yaml"), "--params", "-p", help="Parameter file.")
SLICES_OPT = typer.Option(Path("outputs/slices"))
CHECKPOINTS_OPT = typer.Option(Path("outputs/checkpoints"))
SCORES_OPT = typer.Option(Path("outputs/scores"))
FEATURES_OPT = typer.Option(Path("outputs/features"), "--features", help="Feature caches (embed stage).")


@app.callback()
def _main(verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    from driftmatrix.tracking.server import RedactingFormatter

    handler = logging.StreamHandler()  # credentials in URIs masked in every line
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%H:%M:%S"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    for noisy in ("alembic", "mlflow", "urllib3", "git", "matplotlib", "PIL", "filelock", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


# --- data -------------------------------------------------------------------------------------
@data_app.command("generate")
def data_generate(params: Path = PARAMS_OPT,
                  out: Optional[Path] = typer.Option(None, help="Target folder (default: dataset.path)."),
                  force: bool = typer.Option(False, help="Rewrite even if the folder is complete.")) -> None:
    """Write the built-in dataset in the format of dataset.source: yearbook portraits, amazon
    reviews or arxiv papers (see src/driftmatrix/data/synthetic*.py)."""
    from driftmatrix.data import synthetic

    p = load_params(params)
    target = out or Path(p.dataset.path)
    if holds_real_data(target) and not force:
        typer.echo(f"{target} holds data that was not generated here (no .complete stamp): left as it is")
        return
    refuse_foreign_table(p.dataset, target)
    what, n = synthetic.write_builtin(p.dataset.source, p.synthetic, target, force=force)
    typer.echo(f"synthetic {what} ({p.synthetic.scenario}): {n} {'images' if what == 'yearbook' else 'documents'} "
               f"in {target}")


def refuse_foreign_table(dataset, target: Path) -> None:
    """For ``source: table``, a table of the user's not there yet is an error, not generated data."""
    from driftmatrix.data.synthetic_table import COLUMNS

    options = dict(dataset.options or {})
    if dataset.source == "table" and not (options.get("label") == COLUMNS[-1] and options.get("input") is None):
        raise DataError(f"{target}: no data there yet, and `data generate` has no generator for this table "
                        f"(dataset.options.label {options.get('label')!r}): put your file(s) in {target}, "
                        f"then `dvc add {Path(target).parts[0]}` and `make repro`")


def holds_real_data(target: Path) -> bool:
    """True when ``target`` exists with content but was not written by ``data generate``."""
    return target.exists() and not (target / ".complete").exists() and \
        (target.is_file() or any(target.iterdir()))


@data_app.command("fetch")
def data_fetch(dataset: str = typer.Argument(..., help="amazon | yearbook | arxiv"),
               dest: Optional[Path] = typer.Option(None, help="Target folder (default: data/<dataset>)."),
               url: Optional[str] = typer.Option(None, help="Download this URL instead of the official source."),
               sha256: Optional[str] = typer.Option(None, help="Expected sha256 of the (single) file."),
               category: list[str] = typer.Option([], "--category", "-c",
                                                  help="Amazon category (repeatable; default: the paper's 7)."),
               progress: bool = typer.Option(True, help="Progress bar on stderr.")) -> None:
    """Download a real dataset (resumable, verified) into data/<dataset>/, or print the manual steps."""
    from driftmatrix.data.fetch import fetch

    fetch(dataset, dest, url=url, sha256=sha256, categories=category or None, progress=progress, echo=typer.echo)


# --- pipeline stages ---------------------------------------------------------------------------
def stage_params(path: Path):
    """params.yaml for a stage that trains nothing: estimators named by import path are not imported to
    check them (seconds for scikit-learn), as ingest, the first stage, and each train stage do."""
    return load_params(path, estimators=False)


@app.command()
def code(out: Path = typer.Option(Path("outputs/code"))) -> None:
    """Digest each stage's code (comments, docstrings and log lines aside): the first stage; each
    other stage depends on its own digest, so `dvc repro` reruns a stage when its code changed."""
    from driftmatrix.stages import code as stage

    digests = stage.run(".", out)
    files = {f for stage_files in digests.values() for f in stage_files}
    typer.echo(f"code digests of {len(digests)} stages ({len(files)} files) -> {out}")


@app.command()
def ingest(params: Path = PARAMS_OPT, strict: bool = typer.Option(False, help="Any dropped record is an error."),
           out: Path = typer.Option(Path("outputs/ingested")),
           option: list[str] = typer.Option([], "--option", "-o", help="Reader option key=value (YAML value), "
                                             "repeatable; overrides params.yaml dataset.options."),
           path: Optional[Path] = typer.Option(None, help="Raw input (default: dataset.path).")) -> None:
    """Read the configured raw dataset into the normalised table."""
    from driftmatrix.stages import ingest as stage

    p = load_params(params)
    overrides = _parse_options(option)
    if overrides or path is not None:
        ds = p.dataset
        p = replace(p, dataset=replace(ds, options={**dict(ds.options), **overrides},
                                       path=str(path) if path is not None else ds.path))
    result = stage.run(p, out, strict=strict)
    typer.echo(result.report.summary())


def _parse_options(items: list[str]) -> dict:
    """``key=value`` pairs; values are read as YAML (``7``, ``[title, text]``, ``2014-01-01``)."""
    import yaml

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option {item!r}: expected key=value")
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


@app.command("slice")
def slice_cmd(params: Path = PARAMS_OPT, src: Path = typer.Option(Path("outputs/ingested")),
              out: Path = SLICES_OPT) -> None:
    """Cut the table into periods (slicing.period x width), drop slices under slicing.min_samples
    (reported), split each into train and test (slicing.test_fraction, stratified)."""
    from driftmatrix.stages import slice as stage

    typer.echo(stage.describe(stage.run(stage_params(params), src, out)))


@app.command()
def validate(params: Path = PARAMS_OPT, slices: Path = SLICES_OPT,
             out: Path = typer.Option(Path("outputs/validation"))) -> None:
    """Great Expectations gate on every slice. A failed critical check of the data exits 1 (a
    mistake in params.yaml exits 2, as everywhere); see docs/audit.md."""
    from driftmatrix.audit.gate import ValidationFailed
    from driftmatrix.stages import validate as stage

    try:
        stage.run(stage_params(params), slices, out, echo=typer.echo)
    except ValidationFailed as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1)


@app.command()
def audit(params: Path = PARAMS_OPT, slices: Path = SLICES_OPT,
          out: Path = typer.Option(Path("outputs/audit")),
          validation: Path = typer.Option(Path("outputs/validation")),
          track: bool = typer.Option(True, help="Log the audit's MLflow run (the DVC stage: --no-track; "
                                                "`driftmatrix report --track` logs it).")) -> None:
    """Between-slice label/covariate drift matrices, prevalence, plots and report.html, from the
    slices alone (`driftmatrix report` correlates them with the models' decay)."""
    from driftmatrix.stages import audit as stage

    result = stage.run(stage_params(params), slices, out, validation, track=track)
    typer.echo(f"audit of {result['dataset']}: {', '.join(result['measures'])} -> {out / 'report.html'}")


@app.command()
def embed(params: Path = PARAMS_OPT, slices: Path = SLICES_OPT,
          out: Path = typer.Option(Path("outputs/features"), "--out", "--features", help="Feature caches."),
          model: list[str] = typer.Option([], "--model", "-m", help="Only the encoders of these models "
                                          "(repeatable; default: every model in params.yaml).")) -> None:
    """Run each frozen encoder the configured models need once over every row; resumable."""
    from driftmatrix.stages import embed as stage

    for m in stage.run(stage_params(params), slices, out, model or None):
        typer.echo(f"{m['encoder']}: {m['n']} rows, dim {m['dim']}, "
                   f"{'token states + pooled' if m['has_states'] else 'pooled'} -> {m['path']}")


@app.command()
def train(model: str = typer.Option(..., "--model", "-m", help="Registry name, e.g. CNN-S."),
          params: Path = PARAMS_OPT, slices: Path = SLICES_OPT, out: Path = CHECKPOINTS_OPT,
          features: Path = FEATURES_OPT) -> None:
    """Train a fresh model per (cutoff, seed) on its training window (train.window: the cumulative
    history by default); skips the units already trained under the same key."""
    from driftmatrix.stages import train as stage

    stage.run(load_params(params), model, slices, out, features_dir=features)


@app.command()
def evaluate(model: str = typer.Option(..., "--model", "-m"), params: Path = PARAMS_OPT, slices: Path = SLICES_OPT,
             checkpoints: Path = CHECKPOINTS_OPT, out: Path = SCORES_OPT, features: Path = FEATURES_OPT) -> None:
    """Score every checkpoint on every slice in one pass; write drift-matrix rows."""
    from driftmatrix.stages import evaluate as stage

    stage.run(stage_params(params), model, slices, checkpoints, out, features_dir=features)


@app.command()
def matrices(params: Path = PARAMS_OPT, scores: Path = SCORES_OPT, out: Path = typer.Option(Path("outputs/matrices")),
             slices: Path = SLICES_OPT,
             metrics: Path = typer.Option(None, help="DVC metrics file [default: metrics/metrics.json]."),
             plots: Path = typer.Option(None, help="Matrix CSVs DVC plots [default: metrics/matrices].")) -> None:
    """Seed-averaged matrices of the current configuration, summary scores, DVC metrics and plots
    (numbers only; `driftmatrix report` draws and logs them)."""
    from driftmatrix.stages import matrices as stage

    stage.run(stage_params(params), scores, out, slices_dir=slices, metrics_path=metrics or stage.DVC_METRICS,
              plots_dir=plots or stage.DVC_MATRICES)


@app.command("estimates")
def estimates_cmd(params: Path = PARAMS_OPT, scores: Path = SCORES_OPT, slices: Path = SLICES_OPT,
                  out: Path = typer.Option(Path("outputs/estimates")),
             metrics: Path = typer.Option(None, help="DVC metrics file [default: metrics/estimates.json]."),
             track: bool = typer.Option(False, "--track", help="Log one MLflow run (in the pipeline the report stage logs it)."),
             matrices: Optional[Path] = typer.Option(None, "--matrices", help="Backtest the matrix methods only "
                                                     "(carry-forward, trend) on this folder of drift matrices, e.g. "
                                                     "published ones (no scores needed).")) -> None:
    """Backtest every label-free estimator on the drift matrices: each future cell estimated from
    what was known at its cutoff, against its true value (docs/estimates.md)."""
    from driftmatrix.stages import estimates as stage

    if matrices is not None:
        result = stage.run_matrices(matrices, out)
    else:
        result = stage.run(stage_params(params), slices, scores, out, metrics or stage.DVC_METRICS, track=track)
    for model, s in result.items():
        ahead = s.get("previous_period") or {}
        typer.echo(f"{model}: noise floor {s['noise_floor']}, method chosen per period from earlier periods: "
                   f"MAE {s.get('causal_mae')} (carry-forward {(s.get('carry-forward') or {}).get('mae')}; trusted "
                   f"next: {s.get('trusted_method')}); one period ahead: MAE {ahead.get('causal_mae')} (trusted next: "
                   f"{ahead.get('trusted_method')})")


@app.command()
def estimate(data: Path = typer.Option(..., "--data", help="The new period in the dataset's format, labels "
                                       "ignored: a folder of images or an .npy of uint8 images, or a feature or "
                                       "text table read with the dataset's options."),
             params: Path = PARAMS_OPT, slices: Path = SLICES_OPT, scores: Path = SCORES_OPT,
             checkpoints: Path = CHECKPOINTS_OPT,
             estimates: Path = typer.Option(Path("outputs/estimates"), help="Where backtest.json is."),
             out: Path = typer.Option(Path("outputs/estimates/new-period")),
             ahead: int = typer.Option(1, min=1, help="Periods between the last slice and the new one."),
             latest: bool = typer.Option(False, help="Only the latest cutoff's units (the deployed ones)."),
             registry: bool = typer.Option(False, help="Load the models from the MLflow registry, not the checkpoints.")) -> None:
    """Every cutoff model's score on a new period before its labels arrive, per method, and each
    model's decision under its policy (outputs/policy; a drop within the noise never retrains)."""
    from driftmatrix.stages import newperiod

    p = load_params(params)
    records = newperiod.run(p, data, slices, scores, checkpoints, estimates, out, ahead=ahead, latest=latest,
                            source="registry" if registry else "checkpoints", policy_dir=estimates.parent / "policy")
    typer.echo(newperiod.render(records))
    flagged = sorted({f"{r['model']}@{r['cutoff']}" for r in records if r["retrain"]})
    typer.echo(f"\nretrain: {', '.join(flagged) if flagged else 'none'} -> {out}")


@app.command("repair-lock", hidden=True)
def repair_lock(path: Path = typer.Argument(Path("dvc.lock"))) -> None:
    """Move a dvc.lock or .dvc/tmp/rwlock torn by a killed `dvc repro` aside (`make repro` does this first)."""
    from driftmatrix.runtime.dvc import repair_dvc_lock, repair_dvc_rwlock

    aside = repair_dvc_lock(path)
    if aside is not None:
        typer.echo(f"{path} was torn by a killed `dvc repro`: moved to {aside}; the next `dvc repro` reruns each "
                   "stage once (finished units and scores are kept)")
    table = path.parent / ".dvc" / "tmp" / "rwlock"
    aside = repair_dvc_rwlock(table)
    if aside is not None:
        typer.echo(f"{table} (DVC's stage locks) was torn by a killed `dvc repro`: moved to {aside}")


@app.command()
def status(params: Path = PARAMS_OPT, slices: Path = SLICES_OPT, checkpoints: Path = CHECKPOINTS_OPT,
           scores: Path = SCORES_OPT) -> None:
    """Per model, the K x S grid of done / stale / missing units, the cells still to score, and
    what `dvc repro` would do about it (reads files only; nothing runs)."""
    from driftmatrix.units import status as stage

    statuses = stage.read_status(load_params(params), slices, checkpoints, scores)
    for s in statuses:
        typer.echo(stage.render(s) + "\n")
    typer.echo(f"legend: {stage.DONE} done, {stage.STALE} stale (trained under other settings or data: redone), "
               f"{stage.MISSING} missing")
    typer.echo("dvc repro would:\n" + "\n".join(f"  {line}" for line in stage.would_do(statuses)))
    typer.echo("(from the current outputs/slices; if the raw data or slicing changed, the slice stage "
               "runs first and the plan follows it)")


@app.command()
def saliency(params: Path = PARAMS_OPT, slices: Path = SLICES_OPT, checkpoints: Path = CHECKPOINTS_OPT,
             out: Path = typer.Option(Path("outputs/saliency")), features: Path = FEATURES_OPT,
             mlflow: bool = typer.Option(True, help="Log maps and scores to each checkpoint's run.")) -> None:
    """Gradient saliency maps and concentration scores of the checkpoints in params.yaml: saliency."""
    from driftmatrix.stages import saliency as stage

    result = stage.run(stage_params(params), slices, checkpoints, out, log_mlflow=mlflow, features_dir=features)
    for r in result["summary"]:
        typer.echo(f"{r['model']:<10} cutoff {r['cutoff']:<8} eval {r['eval']:<8} top-5% share {r['top5_share']:.3f} "
                   f"(per image {r['top5_share_img']:.3f})  entropy {r['entropy']:.3f}")
    typer.echo(f"-> {out}")


@app.command()
def tune(model: list[str] = typer.Option([], "--model", "-m", help="Registry name (repeatable; default: "
                                         "every model in params.yaml)."),
         params: Path = PARAMS_OPT, slices: Path = SLICES_OPT,
         n_trials: Optional[int] = typer.Option(None, help="Finished trials wanted (default: tune.n_trials)."),
         storage: Optional[str] = typer.Option(None, help="Optuna storage URL (default: tune.storage)."),
         presets: Optional[Path] = typer.Option(None, help="Preset folder (default: tune.presets_dir)."),
         features: Path = FEATURES_OPT) -> None:
    """Optuna search on data up to the tuning cutoff only; resumable; writes presets/tuned/<dataset>-<model>.yaml."""
    from driftmatrix.stages import tune as stage

    p = load_params(params)
    for name in model or list(p.models):
        r = stage.run(p, name, slices, n_trials=n_trials, storage=storage, presets_dir=presets, features_dir=features)
        best = (f"best {r['best_value']:.4f} (trial {r['best_trial']}) -> {r['preset']}" if "preset" in r
                else "no complete trial")
        typer.echo(f"{r['study']}: {r['finished']} finished trials ({r['ran']} now, {r['seconds']} s), {best}")


@app.command()
def plan(params: list[Path] = typer.Option([Path("params.yaml")], "--params", "-p",
                                           help="Preset(s) to plan; several are also pooled on one cluster."),
         n: list[int] = typer.Option([1, 8, 64], "--n", "-n", help="GPUs (or CPU workers); repeatable."),
         scale: str = typer.Option("gpu", help="gpu: the authors' A100 GPU-hours | cpu: our measured CPU rates."),
         order: str = typer.Option("lpt", help="lpt (longest first) | fifo (submission order)."),
         share: Optional[float] = typer.Option(None, help="GPUs per unit for every model "
                                               "(default: runtime.num_gpus and overrides; 0 counts as 1)."),
         price: float = typer.Option(2.0, help="$ per GPU-hour (or worker-hour)."),
         slices: Path = typer.Option(Path("outputs/slices"), help="Slice sizes from this manifest when it "
                                     "is of the preset's dataset (else the paper's K and size, equal slices)."),
         periods: Optional[int] = typer.Option(None, help="Number of slices (overrides the manifest)."),
         rows: Optional[int] = typer.Option(None, help="Dataset rows (with --periods or the paper's K).")) -> None:
    """Simulate the Ray schedule of a study on N GPUs: makespan, utilisation, cost (see scaleplan.py)."""
    from driftmatrix.runtime import scaleplan

    if scale not in ("gpu", "cpu"):
        raise typer.BadParameter("--scale must be gpu or cpu")
    manifest_path = slices / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else None
    studies = {}
    for path in params:
        p = load_params(path)
        same = manifest if manifest and manifest["dataset"].get("name") == p.dataset.name else None
        shape = scaleplan.shape_of(p, same, share=share, periods=periods, rows=rows, need_rows=scale == "cpu")
        if scale == "cpu":
            studies[p.dataset.name] = scaleplan.cpu_units(shape)
        elif p.dataset.name in scaleplan.PAPER:
            studies[p.dataset.name] = scaleplan.gpu_units(shape, scaleplan.PAPER[p.dataset.name])
        else:
            raise typer.BadParameter(f"{path}: no published GPU-hours for dataset {p.dataset.name!r} "
                                     f"(known: {sorted(scaleplan.PAPER)}); use --scale cpu")
    typer.echo(scaleplan.describe(scale, order, share))
    typer.echo(scaleplan.format_rows(scaleplan.rows_for(studies, n, order), price,
                                     "GPU" if scale == "gpu" else "worker"))


@app.command()
def importance(params: Path = PARAMS_OPT, slices: Path = SLICES_OPT, checkpoints: Path = CHECKPOINTS_OPT,
               out: Path = typer.Option(Path("outputs/importance")), features: Path = FEATURES_OPT) -> None:
    """Permutation importance of every tabular model per cutoff, on each cutoff's held-out rows:
    a features x cutoffs heatmap per model (outputs/importance/report.html)."""
    from driftmatrix.stages import importance as stage

    for model, res in stage.run(stage_params(params), slices, checkpoints, out, features).items():
        last = [row[-1] for row in res["values"]]
        ranked = sorted((v, f) for f, v in zip(res["features"], last) if v is not None)[::-1][:3]
        typer.echo(f"{model:<10} at {res['cutoffs'][-1]}: " + ", ".join(f"{f} {v:.2f}" for v, f in ranked))
    typer.echo(f"-> {out / 'report.html'}")


@app.command("models")
def list_models() -> None:
    """List the model registry (name, family, modality)."""
    from driftmatrix.models.catalog import REGISTRY

    for name, spec in REGISTRY.items():
        typer.echo(f"{name:<16} {spec.family:<10} {spec.modality}")


# --- analysis of finished matrices (own matrices or a folder of published JSON) ----------------
MATRICES_ARG = typer.Argument(Path("outputs/matrices"),
                              help="Folder of drift-matrix JSON (ours or the published format).")


def _cohort(path: Path):
    from driftmatrix.analysis import matrixfile
    from driftmatrix.analysis.tables import Cohort

    return Cohort(matrixfile.load_folder(path))


@app.command()
def summarize(path: Path = MATRICES_ARG,
              fmt: str = typer.Option("json", "--format", "-f", help="json | csv")) -> None:
    """One record per model: family, in-distribution, future, decay, TD score, backward."""
    from driftmatrix.reporting import text

    records = text.summary_records(_cohort(path))
    if fmt == "csv":
        typer.echo(text.summary_csv(records), nl=False)
    elif fmt == "json":
        typer.echo(json.dumps(records, indent=2))
    else:
        raise typer.BadParameter("--format must be json or csv")


@app.command()
def recommend(path: Path = MATRICES_ARG,
              horizon: Optional[int] = typer.Option(None, "--horizon", "-H", min=1,
                                                    help="Periods between retrains."),
              tolerance: Optional[float] = typer.Option(None, "--tolerance", "-t", min=0.0,
                                                        help="Points of the metric a model may lose on "
                                                             "average before it is retrained.")) -> None:
    """Rank models by expected score when retrained every H periods (all H if not given); with
    --tolerance, each model's longest retraining horizon that stays within it of a fresh model."""
    from driftmatrix.reporting import text

    cohort = _cohort(path)
    if tolerance is not None:
        typer.echo(text.cadences(cohort, tolerance))
        return
    typer.echo(text.horizon_ranking(cohort, horizon) if horizon else text.horizon_leaders(cohort))


@app.command()
def policy(path: Path = MATRICES_ARG,
           out: Path = typer.Option(Path("outputs/policy"), help="Folder for policies.csv and <model>.json."),
           retrain_cost: Optional[float] = typer.Option(
               None, "--retrain-cost", min=0.0, help="Price of one retrain in points of served score "
                                                     "(default: params.yaml policy.retrain_cost, else 0.1)."),
           budget: Optional[int] = typer.Option(None, "--budget", min=0, help="At most this many retrains."),
           label_delay: Optional[int] = typer.Option(None, "--label-delay", min=0,
                                                     help="Periods until a period's labels arrive."),
           metrics: Optional[Path] = typer.Option(None, help="Also write the DVC metrics here (the stage does)."),
           params: Path = PARAMS_OPT) -> None:
    """Replay retraining policies (never, periodic, estimate-, cumulative-, label- and drift-triggered,
    hindsight oracle) on each model's matrices and recommend a (model, policy) for the price of a
    retrain; estimates and audit beside the matrices feed the triggers that need them."""
    from driftmatrix.reporting import text
    from driftmatrix.stages import policy as stage

    cfg = policy_config(stage_params(params)) if params.exists() else PolicyConfig()
    given = {"retrain_cost": retrain_cost, "budget": budget, "label_delay": label_delay}
    cfg = replace(cfg, **{k: v for k, v in given.items() if v is not None})
    o = stage.run(path, out, cfg, path.parent / "estimates", path.parent / "audit", metrics)
    typer.echo(text.policies(o.cohort, o.runs, o.rec, cfg.retrain_cost, cfg.budget) + f"\n-> {out / 'policies.csv'}")


@app.command()
def compare(ours: Path = typer.Argument(..., help="Our matrices folder."),
            published: Path = typer.Argument(..., help="Published matrices folder.")) -> None:
    """Cell-wise and summary differences between our matrices and published ones."""
    from driftmatrix.analysis import matrixfile, published as pub
    from driftmatrix.reporting import text

    typer.echo(text.comparison_table(pub.compare(matrixfile.load_folder(ours),
                                                 matrixfile.load_folder(published))))


@app.command()
def report(path: Path = MATRICES_ARG,
           out: Path = typer.Option(Path("outputs/report/report.html")),
           audit: Path = typer.Option(Path("outputs/audit/report.html"), help="Linked when present."),
           title: Optional[str] = typer.Option(None),
           track: bool = typer.Option(False, "--track", help="Also log matrices, heatmaps and report as one "
                                      "MLflow run (params.yaml: tracking); the report stage does."),
           params: Path = PARAMS_OPT) -> None:
    """Self-contained HTML report (tables and inlined figures) of a folder of matrices, and one
    heatmap PNG per model in plots/ beside it."""
    from driftmatrix.stages import report as stage

    typer.echo(stage.run(path, out, audit=audit, title=title, params=stage_params(params) if track else None))


#: Seconds a command runs without cyclic garbage collection: its imports (torch, MLflow,
#: great-expectations) make millions of objects that live as long as the process, and collecting
#: while they load walks them again and again (0.5-1 s of a stage process). Then what was loaded
#: is frozen out of later collections, and collection resumes.
IMPORT_GC_PAUSE_S = 10.0


def pause_gc_while_importing(seconds: float = IMPORT_GC_PAUSE_S) -> None:
    import os
    import threading

    def resume() -> None:
        gc.freeze()
        gc.enable()

    if not gc.isenabled():  # paused already (main called again in one process)
        return
    gc.disable()
    os.register_at_fork(after_in_child=gc.enable)  # a forked child has no timer thread
    timer = threading.Timer(seconds, resume)
    timer.daemon = True
    timer.start()


def main() -> None:
    pause_gc_while_importing()
    try:
        app()
    except Exception as exc:  # clear one-line errors for known user mistakes
        from driftmatrix.tracking.server import explain, redact

        if isinstance(exc, (ConfigError, DataError)) or untrusted_model(exc):
            typer.echo(f"error: {redact(str(exc))}", err=True)
            sys.exit(2)
        down = explain(exc)  # any stage whose MLflow tracking server or database stayed unreachable
        if down is not None:
            typer.echo(f"error: {down}", err=True)
            sys.exit(2)
        raise
    finally:  # the collections at exit would only walk torch's and MLflow's module graphs (about 1 s)
        gc.freeze()


if __name__ == "__main__":  # pragma: no cover
    main()
