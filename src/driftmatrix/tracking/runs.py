"""MLflow at the edge: one run and one registry version per unit, written by the driver alone.

Workers never write MLflow. Finished units leave a checkpoint and a sidecar record; :func:`sync_units`
makes MLflow agree with them, one pass per model: each current unit gets one live FINISHED run
(created from its sidecar with the training times, or restored), one registered version and its
cutoff aliases; a unit redone under a new key supersedes the old one. The sidecar is the record,
so a kill at any moment loses nothing: the next sync finishes the job.

Runs and versions are told apart by unit key, weights digest, hardware and project (clone): a sync
touches only its own project's. Models are logged weights-only and rebuilt on load (no unpickling).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence
from urllib.parse import urlparse

from driftmatrix.config import TrackingConfig, user_cache_dir
from driftmatrix.models.spec import PYFUNC_FORMAT

log = logging.getLogger(__name__)

#: MLflow 3 experiment kind that opens the UI on the runs table (not the GenAI overview).
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")
_CONFIGURED: dict[tuple[str, str], str] = {}
_SET_BY_US: set[str] = set()  # MLflow 3 exports the URI it is given to MLFLOW_TRACKING_URI
#: (unit key, run id) -> (row metrics, folder of row artifacts, evaluation dataset, step) or None
RowFor = Callable[[str, str], Optional[tuple]]
DescribedBy = Callable[[str, Any], Optional[tuple]]


def tracking_uri(cfg: TrackingConfig) -> str:
    """``MLFLOW_TRACKING_URI`` when the user set it, else ``tracking.uri``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    return env if env and env not in _SET_BY_US else cfg.uri


def fast_sqlite() -> None:
    """Commit to sqlite stores without an fsync each (WAL, synchronous=NORMAL): a unit's run is a
    dozen small commits; a power cut's lost commits are recreated by the next sync."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    if getattr(fast_sqlite, "done", False):
        return

    @event.listens_for(Engine, "connect")
    def _pragmas(dbapi_connection, _record):  # every new sqlite connection of this process
        if type(dbapi_connection).__module__.startswith("sqlite3"):
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

    @event.listens_for(Engine, "engine_connect")
    def _remember(connection):
        _ENGINES.add(connection.engine)

    atexit.register(close_stores)
    fast_sqlite.done = True


_ENGINES: "weakref.WeakSet[Any]" = weakref.WeakSet()


def close_stores() -> None:
    """Close this process's database connections at exit (sqlite folds its write-ahead log into the file)."""
    for engine in list(_ENGINES):
        engine.dispose()


def schema_template() -> Path | None:
    """An empty MLflow sqlite database at this MLflow version's schema head, made once per machine
    (a new store otherwise replays every schema migration, about 2 s); None if it cannot be made."""
    import mlflow

    cache = user_cache_dir()
    path = cache / f"mlflow-{mlflow.__version__}-schema.db"
    if path.is_file():
        return path
    try:
        import sqlalchemy
        from mlflow.store.db import utils as db_utils

        from driftmatrix.tracking.pyfunc import quiet_mlflow

        cache.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        engine = sqlalchemy.create_engine(f"sqlite:///{tmp}")
        with quiet_mlflow():
            db_utils._initialize_tables(engine)
        engine.dispose()
        tmp.replace(path)
        return path
    except Exception as exc:  # noqa: BLE001 - an optimisation only: MLflow initialises the store itself
        log.debug("no MLflow schema template (%s); MLflow will migrate the new store itself", exc)
        return None


def sqlite_file(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` store (connection options after ``?`` left out); None
    for other stores."""
    return Path(uri.removeprefix("sqlite:///").partition("?")[0]) if uri.startswith("sqlite:///") else None


def seed_sqlite_store(uri: str) -> None:
    """Start a not-yet-existing ``sqlite:///`` store from the schema template (see above)."""
    db = sqlite_file(uri)
    if db is None or db.exists() or not db.parent.is_dir():
        return
    template = schema_template()
    if template is not None:
        tmp = db.with_name(f"{db.name}.{os.getpid()}.tmp")
        shutil.copyfile(template, tmp)
        try:
            with contextlib.suppress(FileExistsError):  # a store another process created meanwhile stays
                os.link(tmp, db)
        finally:
            tmp.unlink()


def configure(cfg: TrackingConfig) -> str:
    """Point MLflow at the configured store and experiment (once per process); the experiment id."""
    import mlflow

    from driftmatrix.tracking.server import http_retry_defaults

    fast_sqlite()
    uri = tracking_uri(cfg)
    http_retry_defaults(uri)  # bounded, logged retries of transient HTTP errors (trackserver.py)
    if (uri, cfg.experiment) not in _CONFIGURED:
        seed_sqlite_store(uri)
    if os.environ.get("MLFLOW_TRACKING_URI") != uri:
        _SET_BY_US.add(uri)
    mlflow.set_tracking_uri(uri)
    if (uri, cfg.experiment) in _CONFIGURED:
        return _CONFIGURED[uri, cfg.experiment]
    exp = mlflow.get_experiment_by_name(cfg.experiment)
    if exp is None:
        location = None
        if uri.startswith("sqlite:") and uri == cfg.uri:
            location = Path(cfg.artifact_root).resolve().as_uri()
        elif (db := sqlite_file(uri)) is not None:  # a temporary store: artifacts beside its database
            location = (db.resolve().parent / "mlruns").as_uri()
        exp_id = mlflow.create_experiment(cfg.experiment, artifact_location=location,
                                          tags=dict([EXPERIMENT_KIND]))
    else:
        exp_id = exp.experiment_id
        if exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
            mlflow.MlflowClient().set_experiment_tag(exp_id, *EXPERIMENT_KIND)
    mlflow.set_experiment(experiment_id=exp_id)
    _CONFIGURED[uri, cfg.experiment] = exp_id
    return exp_id


def configure_in_background(cfg: TrackingConfig) -> threading.Thread:
    """:func:`configure` on a thread, overlapping a stage's work; a failure is left to its own :func:`configure`."""

    def warm() -> None:
        try:
            configure(cfg)
        except Exception:  # noqa: BLE001 - raised again, with context, by the stage's configure
            log.debug("MLflow set-up in the background failed; the stage will retry it", exc_info=True)

    thread = threading.Thread(target=warm, name="mlflow-setup", daemon=True)
    thread.start()
    return thread


def run_name(model: str, cutoff: str, seed: int) -> str:
    return f"{model} · cutoff {cutoff} · seed {seed}"


def registered_name(dataset: str, model: str) -> str:
    return f"{dataset}.{model}"


def alias_for(cutoff: str, seed: int | None = None) -> str:
    """Registry alias of a cutoff (``cutoff-1950``), optionally per seed (``cutoff-1950-seed-1``)."""
    base = "cutoff-" + re.sub(r"[^0-9A-Za-z_-]+", "_", cutoff)
    return base if seed is None else f"{base}-seed-{seed}"


def quote(value: Any) -> str:
    """A string literal for MLflow's filter syntax (quotes and backslashes escaped)."""
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def tag_filter(tags: Mapping[str, Any]) -> str:
    return " and ".join(f"tags.{k} = {quote(v)}" for k, v in tags.items())


def git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def model_runs(exp_id: str, model: str) -> list[Any]:
    """Every unit run of ``model``, deleted ones included (not by dataset: a renamed one keeps its runs)."""
    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client, runs, token = MlflowClient(), [], None
    filt = tag_filter({"kind": "cutoff", "model": model})
    while True:
        page = client.search_runs([exp_id], filter_string=filt, run_view_type=ViewType.ALL,
                                  max_results=5000, page_token=token)
        runs += list(page)
        token = page.token
        if not token:
            return runs


def _first(run) -> tuple:
    """Order of duplicates, the survivor first: live, oldest start, run id (every writer agrees)."""
    return run.info.lifecycle_stage != "active", run.info.start_time or 0, run.info.run_id


def live_runs(exp_id: str, dataset: str, model: str) -> dict[str, str]:
    """unit key -> id of this project's live FINISHED run of it (``dataset`` is not a filter)."""
    found: dict[str, str] = {}
    project = project_id()
    for r in sorted(model_runs(exp_id, model), key=_first):
        if r.info.lifecycle_stage == "active" and r.info.status == "FINISHED" and "unit_key" in r.data.tags \
                and r.data.tags.get(PROJECT_TAG, project) == project:
            found.setdefault(r.data.tags["unit_key"], r.info.run_id)
    return found


WEIGHTS_TAG = "weights_digest"  # sha256 of the unit's model.safetensors
MODEL_TAG = "model_logged"  # "true" when the run holds its ``model`` artifact


def unit_tags(record: Mapping[str, Any]) -> dict[str, str]:
    """What computed a unit: weights digest, precision, device, threads, hardware, ``lib.<name>`` versions."""
    env = record.get("environment") or {}
    tags = {k: env[k] for k in ("precision", "device", "threads", "hardware") if env.get(k) is not None}
    tags.update({f"lib.{name}": version for name, version in (env.get("libraries") or {}).items()})
    if record.get("weights_digest"):
        tags[WEIGHTS_TAG] = record["weights_digest"]
    return {k: str(v)[:5000] for k, v in tags.items()}


def same_hardware(tags: Mapping[str, str], record: Mapping[str, Any]) -> bool:
    """Whether ``tags`` (of a run or version) name the hardware of ``record`` (unknown: it matches)."""
    ours, theirs = (record.get("environment") or {}).get("hardware"), tags.get("hardware")
    return not ours or not theirs or str(ours) == theirs


def same_weights(run, record: Mapping[str, Any]) -> bool:
    """Whether ``run`` was made from the weights ``record`` describes (no digest: it matches)."""
    digest = record.get("weights_digest")
    return not digest or run.data.tags.get(WEIGHTS_TAG) == digest


def _driver_alive(run) -> bool:
    """A RUNNING run that a live process is still writing (never ours to delete)."""
    driver = run.data.tags.get(DRIVER_TAG)
    return run.info.status == "RUNNING" and bool(driver) and not _process_gone(driver)


def plan_runs(runs: Sequence[Any], dataset: str, wanted: Mapping[str, Mapping[str, Any]],
              project: str | None = None) -> tuple[dict[str, Any], list[tuple[Any, str | None]]]:
    """(unit key -> its surviving run, maybe a deleted one to restore; [(run to delete,
    ``superseded_by`` or None)]) for the runs of one model.

    The survivor is a unit's first FINISHED run (:func:`_first`) of the record's weights. Deleted:
    duplicates, older weights computed on the same hardware, runs a kill left unfinished, and this
    dataset's runs of a unit redone under a new key in the same slot. Left alone: RUNNING runs of
    live processes, other datasets' units, runs from other hardware and other ``project``s' runs.
    """
    slots = {(r["unit"]["cutoff"], str(r["unit"]["seed"])): k for k, r in wanted.items()}
    keep: dict[str, Any] = {}
    drop: list[tuple[Any, str | None]] = []
    for r in sorted(runs, key=_first):
        tags, active = r.data.tags, r.info.lifecycle_stage == "active"
        key, finished = tags.get("unit_key"), r.info.status == "FINISHED"
        slot = (tags.get("cutoff"), tags.get("seed"))
        if project is not None and tags.get(PROJECT_TAG, project) != project:
            continue  # another clone's run
        if key in wanted and finished and same_weights(r, wanted[key]) and key not in keep:
            keep[key] = r
        elif not active or _driver_alive(r):
            continue
        elif key in wanted and finished and not same_weights(r, wanted[key]):
            if same_hardware(tags, wanted[key]):  # retrained here; from other hardware: that machine's run
                drop.append((r, f"{key} (weights {str(wanted[key]['weights_digest'])[:12]})"))
        elif key in wanted or not finished:  # a duplicate, or left by a kill
            drop.append((r, None))
        elif tags.get("dataset") == dataset and slot in slots and key != slots[slot]:
            drop.append((r, slots[slot]))  # the unit was redone under a new key
    return keep, drop


def _metric(key: str, value: float, ts: int, step: int = 0):
    from mlflow.entities import Metric

    return Metric(key, float(value), ts, step)


def _dataset_input(name: str, digest: str, source: Mapping[str, Any], context: str):
    from mlflow.entities import Dataset, DatasetInput, InputTag

    return DatasetInput(Dataset(name=name, digest=digest[:36], source_type="dvc",
                                source=json.dumps(dict(source), sort_keys=True)),
                        tags=[InputTag("mlflow.data.context", context)])


def log_inputs(client, run_id: str, inputs: list, attempts: int = 4) -> None:
    """``client.log_inputs``, again when another writer inserted the same dataset at the same
    moment (a unique-key error): the next attempt finds the dataset and links it."""
    from mlflow.exceptions import MlflowException

    for attempt in range(attempts):
        try:
            return client.log_inputs(run_id, inputs)
        except MlflowException as exc:
            text = str(exc)
            if attempt == attempts - 1 or not ("unique constraint" in text.lower() or "UniqueViolation" in text):
                raise
            log.info("mlflow: dataset inserted by another writer meanwhile; linking it (attempt %d)", attempt + 2)
            time.sleep(0.2 * (attempt + 1))


def run_artifacts(client, artifact_uri: str):
    """The artifact repository of a run whose ``artifact_uri`` is known, as ``client.log_artifacts``
    builds it, without the ``get_run`` call (a query, or an HTTP round trip) it makes to look it up."""
    from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository
    from mlflow.utils.uri import add_databricks_profile_info_to_artifact_uri

    uri = add_databricks_profile_info_to_artifact_uri(artifact_uri, client.tracking_uri)
    return get_artifact_repository(uri, tracking_uri=client.tracking_uri)


def finish_run(client, run_id: str, end_time: int, status: str = "FINISHED") -> None:
    """``client.set_terminated`` without the ``get_run`` it makes first to print the run's link: a
    whole run read back: over HTTP, a round trip a unit (19 before, 18 now)."""
    from mlflow.entities import RunStatus

    client._tracking_client.store.update_run_info(run_id, run_status=RunStatus.from_string(status),
                                                  end_time=end_time, run_name=None)


def unit_run_rows(record: Mapping[str, Any], folder: Path | None, extra_tags: Mapping[str, str],
                  run_id: str | None = None):
    """What a unit's run holds (:class:`bulk.RunRows`): tags, params, losses, times, training data
    and the model folder. ``run_id``: made here when None (a run the client creates gets its id later)."""
    import uuid

    from mlflow.entities import Param, RunTag

    from driftmatrix.tracking.bulk import RunRows

    unit = record["unit"]
    tags = {"kind": "cutoff", "dataset": unit["dataset"], "model": unit["model"], "family": unit["family"],
            "cutoff": unit["cutoff"], "cutoff_index": str(unit["cutoff_index"]), "seed": str(unit["seed"]),
            "unit_key": unit["key"], "window": record.get("window", ""), **unit_tags(record),
            MODEL_TAG: PYFUNC_FORMAT if folder is not None else "false", DRIVER_TAG: driver_id(), **dict(extra_tags),
            **dict(record.get("tags") or {})}
    ended = int(record["ended"] * 1000)
    metrics = [_metric("train_loss", loss, ended, step) for step, loss in enumerate(record["losses"])]
    metrics += [_metric("train_rows", record["train_rows"], ended), _metric("train_seconds", record["seconds"], ended)]
    data = record.get("data") or {}
    return RunRows(run_id or uuid.uuid4().hex, run_name(unit["model"], unit["cutoff"], unit["seed"]),
                   int(record["started"] * 1000), ended, tags,
                   params=[Param(k, str(v)[:6000]) for k, v in sorted(record["params"].items())], metrics=metrics,
                   batch_tags=[RunTag("mlflow.source.git.commit", extra_tags.get("git_commit", ""))],
                   inputs=[_dataset_input(data["name"], data["digest"], data["source"], "training")] if data else [],
                   artifacts=[(folder, "model")] if folder is not None else [])


def with_row(rows, unit_key: str, row: RowFor | None):
    """``rows`` with the unit's drift-matrix row, when ``row(unit key, run id)`` gives one: its
    metrics (step: the number of slices), evaluation data and artifacts."""
    scored = row(unit_key, rows.run_id) if row is not None else None
    if scored is None:
        return rows
    row_metrics, row_folder, evaluated, slices = scored
    now = int(time.time() * 1000)
    return replace(rows, metrics=rows.metrics + [_metric(k, v, now, slices) for k, v in row_metrics.items()],
                   inputs=rows.inputs + [_dataset_input(evaluated["name"], evaluated["digest"], evaluated["source"],
                                                        "evaluation")],
                   artifacts=rows.artifacts + [(row_folder, None)])


def create_unit_run(client, exp_id: str, record: Mapping[str, Any], folder: Path | None,
                    extra_tags: Mapping[str, str], row: RowFor | None = None) -> str:
    """One FINISHED run of a unit (:func:`unit_run_rows`, :func:`with_row`) through the client."""
    rows = unit_run_rows(record, folder, extra_tags)
    run = client.create_run(exp_id, start_time=rows.started, tags=rows.tags, run_name=rows.name)
    run_id = run.info.run_id
    try:
        rows = with_row(replace(rows, run_id=run_id), record["unit"]["key"], row)
        client.log_batch(run_id, metrics=rows.metrics, params=rows.params, tags=rows.batch_tags)
        if rows.inputs:
            log_inputs(client, run_id, rows.inputs)
        if rows.artifacts:
            artifacts = run_artifacts(client, run.info.artifact_uri)
            for local, path in rows.artifacts:
                artifacts.log_artifacts(str(local), path)
        finish_run(client, run_id, rows.ended)
    except BaseException:
        client.delete_run(run_id)  # never leave a half-written run behind
        raise
    return run_id


def create_unit_runs(client, exp_id: str, records: Sequence[Mapping[str, Any]], folders: Mapping[str, Any],
                     extra_tags: Mapping[str, str], row: RowFor | None, threads: int = 1) -> list[str]:
    """The runs of ``records`` (new units): a batch at a time into a local sqlite store
    (:mod:`bulk`), else through the client, ``threads`` units at once; their run ids."""
    from driftmatrix.tracking import bulk

    store = bulk.sql_store(client)
    if store is None:
        return each(lambda r: create_unit_run(client, exp_id, r, folders[r["unit"]["key"]], extra_tags, row),
                    records, threads)
    runs = [with_row(unit_run_rows(r, folders[r["unit"]["key"]], extra_tags), r["unit"]["key"], row) for r in records]
    bulk.write_runs(store, exp_id, runs,
                    lambda uri, local, path: run_artifacts(client, uri).log_artifacts(str(local), path))
    return [r.run_id for r in runs]


def sync_units(cfg: TrackingConfig, dataset: str, model: str, current: Sequence[Mapping[str, Any]],
               folders: Mapping[str, Path], extra_tags: Mapping[str, str] = (),
               row: RowFor | None = None, described: DescribedBy | None = None) -> dict[str, str]:
    """Make MLflow agree with the finished units of one model (``current``: their sidecar records;
    ``folders``: unit key -> checkpoint folder, the run's ``model``); returns unit key -> run id.
    ``described(unit key, train rows)``: a new version's score tags and description, or None."""
    from driftmatrix.tracking.server import server_errors

    uri = tracking_uri(cfg)
    with store_lock(uri), server_errors(uri):
        return _sync_units(cfg, dataset, model, current, folders, extra_tags, row, described)


def _sync_units(cfg, dataset, model, current, folders, extra_tags, row, described=None) -> dict[str, str]:
    from mlflow.tracking import MlflowClient

    exp_id = configure(cfg)
    client = MlflowClient()
    wanted = {r["unit"]["key"]: r for r in current}
    tags = {"git_commit": git_commit(), **dict(extra_tags), "dataset": dataset}
    project = tags.setdefault(PROJECT_TAG, project_id())
    keep, drop = plan_runs(model_runs(exp_id, model), dataset, wanted, project)
    restored = _apply(client, keep, drop)
    by_key = {key: r.info.run_id for key, r in keep.items()}
    threads = write_threads(cfg)
    new = [key for key in wanted if key not in by_key]
    models = {key: folders[key] if cfg.log_models else None for key in new}  # made here, not in the threads
    by_key.update(zip(new, create_unit_runs(client, exp_id, [wanted[key] for key in new], models, tags, row, threads)))
    created = len(new)
    if created:  # another writer may have made the same units meanwhile: keep the same survivors
        keep, more = plan_runs(model_runs(exp_id, model), dataset, wanted, project)
        _apply(client, keep, more)
        drop += more
        by_key = {key: r.info.run_id for key, r in keep.items()}
    for key, r in keep.items():
        if r.data.tags.get("dataset") != dataset:  # a renamed dataset
            client.set_tag(r.info.run_id, "dataset", dataset)
        if cfg.log_models and r.data.tags.get(MODEL_TAG) != PYFUNC_FORMAT:  # no model, or an older format
            client.log_artifacts(r.info.run_id, str(folders[key]), artifact_path="model")
            client.set_tag(r.info.run_id, MODEL_TAG, PYFUNC_FORMAT)
    if cfg.register and cfg.log_models:
        sync_registry(client, registered_name(dataset, model), list(wanted.values()), by_key, project, described,
                      threads)
    superseded = sum(1 for _, by in drop if by)
    if created or restored or superseded:
        log.info("mlflow %s: %d runs created, %d restored, %d superseded (%d live)", model, created,
                 restored, superseded, len(by_key))
    return by_key


def store_agrees(cfg: TrackingConfig, dataset: str, model: str, current: Sequence[Mapping[str, Any]],
                 attached: Mapping[str, str]) -> bool:
    """Whether :func:`sync_units` would write nothing, read from a sqlite store without MLflow
    (:mod:`sqlite_view`): every unit of ``current`` has its one live FINISHED run, which holds its
    drift-matrix row (``attached``: unit key -> the run its row was logged to) and, as configured,
    its model, its version and its aliases; nothing is left to delete. False when unsure."""
    from driftmatrix.tracking import sqlite_view

    db = sqlite_file(tracking_uri(cfg))
    view = None if db is None else sqlite_view.read(db, cfg.experiment, model)
    if view is None:
        return False
    wanted = {r["unit"]["key"]: r for r in current}
    project = project_id()
    keep, drop = plan_runs(view.runs, dataset, wanted, project)
    run_ids = {key: r.info.run_id for key, r in keep.items()}
    if drop or run_ids != dict(attached):  # ``attached`` names every unit of ``current``
        return False
    for r in keep.values():
        tags = r.data.tags
        if r.info.lifecycle_stage != "active" or tags.get("dataset") != dataset \
                or cfg.log_models and tags.get(MODEL_TAG) != PYFUNC_FORMAT:
            return False
    if not (cfg.register and cfg.log_models):
        return True
    name = registered_name(dataset, model)
    by_key, stale = registry_plan(view.versions, name, list(wanted.values()), run_ids, project)
    if name not in view.registered or stale or set(by_key) != set(wanted):
        return False
    pointed = cutoff_aliases(list(wanted.values()), {key: str(v.version) for key, v in by_key.items()})
    return all(view.aliases.get(name, {}).get(alias) == version for alias, version in pointed.items())


def write_threads(cfg: TrackingConfig) -> int:
    """Units written at once: ``server_threads`` through an HTTP server, whose calls are round trips
    the server serves concurrently; one into a local store, where a second writer only waits."""
    return cfg.server_threads if urlparse(tracking_uri(cfg)).scheme in ("http", "https") else 1


def each(write: Callable[[Any], Any], items: Sequence[Any], threads: int = 1) -> list[Any]:
    """``[write(item) for item in items]``, ``threads`` at a time. At the first failure no further
    item starts, the writes under way finish, and that failure is raised: each write leaves nothing
    half-done, so the next sync redoes only what is missing (and a lost server is reported once)."""
    items = list(items)
    if threads <= 1 or len(items) <= 1:
        return [write(item) for item in items]
    from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait

    with ThreadPoolExecutor(min(threads, len(items)), thread_name_prefix="mlflow-write") as pool:
        futures = [pool.submit(write, item) for item in items]
        wait(futures, return_when=FIRST_EXCEPTION)
        for f in futures:
            f.cancel()  # those not started yet
    for f in futures:
        if not f.cancelled() and f.exception() is not None:
            raise f.exception()
    return [f.result() for f in futures]


def _apply(client, keep: Mapping[str, Any], drop: Sequence[tuple[Any, str | None]]) -> int:
    """Carry out :func:`plan_runs`: restore deleted survivors, delete the rest; how many restored."""
    for r, superseded_by in drop:
        if superseded_by:
            client.set_tag(r.info.run_id, "superseded_by", superseded_by)
        client.delete_run(r.info.run_id)
    restored = [r for r in keep.values() if r.info.lifecycle_stage != "active"]
    for r in restored:
        client.restore_run(r.info.run_id)
        if "superseded_by" in r.data.tags:
            client.delete_tag(r.info.run_id, "superseded_by")
    return len(restored)


def lock_folder(uri: str) -> Path | None:
    """The folder holding a local store (sqlite or file store); None for servers and remote databases."""
    if uri.startswith("sqlite:///"):
        store = sqlite_file(uri)
    elif uri.startswith("file:"):
        store = Path(urlparse(uri).path)
    elif "://" not in uri and not uri.startswith("databricks"):
        store = Path(uri)  # a plain folder: a file store
    else:
        return None
    return store.absolute().parent if store.name and store.name != ":memory:" else None


@contextlib.contextmanager
def store_lock(uri: str):
    """Hold an ``flock`` of the folder holding a local store (no new file in the user's tree) until
    the block ends, so two syncs take turns; where it cannot be locked the sync goes on without."""
    import fcntl

    folder = lock_folder(uri)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY) if folder is not None else None
    except OSError as exc:  # no folder yet: MLflow says what it thinks of that itself
        log.debug("no sync lock on %s (%s)", folder, exc)
        fd = None
    if fd is None:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("mlflow: waiting for another sync of %s to finish", uri)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            log.debug("no sync lock on %s (%s)", folder, exc)
        yield
    finally:
        os.close(fd)  # releases the lock


def sync_registry(client, name: str, records: Sequence[Mapping[str, Any]], run_ids: Mapping[str, str],
                  project: str | None = None, described: DescribedBy | None = None, threads: int = 1) -> None:
    """One version per current unit (:func:`registry_plan`), aliases ``cutoff-<label>-seed-<s>`` per seed
    and ``cutoff-<label>`` for the lowest seed; only what differs is written: into the sqlite file of
    the tracking store in one transaction each (:mod:`bulk`), else ``threads`` calls at a time."""
    from driftmatrix.tracking import bulk
    from driftmatrix.tracking.pyfunc import quiet_mlflow

    from mlflow.exceptions import MlflowException

    try:
        aliases = {a: str(v) for a, v in client.get_registered_model(name).aliases.items()}
    except MlflowException:
        with contextlib.suppress(MlflowException):  # made by another sync meanwhile
            client.create_registered_model(name, tags={"kind": "driftmatrix"})
        aliases = {}
    set_alias = _alias_setter(client)

    def point(alias: str, version: str) -> None:
        try:
            set_alias(name, alias, version)
        except MlflowException:  # another sync made the alias meanwhile: now it is an update
            set_alias(name, alias, version)

    model = name.rpartition(".")[2]
    versions = client.search_model_versions(f"name LIKE {quote('%.' + model)}", max_results=100_000)
    by_key, stale = registry_plan(versions, name, records, run_ids, project)
    for v in stale:  # MLflow drops the version's aliases with it
        client.delete_model_version(v.name, v.version)
        if v.name == name:
            for alias in [a for a, n in aliases.items() if n == str(v.version)]:
                del aliases[alias]
    def rows(r: Mapping[str, Any]):
        unit = r["unit"]
        scores, text = (described and described(unit["key"], r.get("train_rows"))) or ({}, None)
        tags = {**scores, "cutoff": unit["cutoff"], "cutoff_index": str(unit["cutoff_index"]), "seed": str(unit["seed"]),
                "unit_key": unit["key"], "dataset": name.rpartition(".")[0], "model": model,
                "train_rows": str(r.get("train_rows", "")),
                **{k: str(v) for k, v in ((WEIGHTS_TAG, r.get("weights_digest")), ("hardware", (
                    r.get("environment") or {}).get("hardware"))) if v},
                **({PROJECT_TAG: project} if project else {})}
        return bulk.VersionRows(f"runs:/{run_ids[unit['key']]}/model", run_ids[unit["key"]],
                                {k: str(v) for k, v in tags.items()}, text)

    def create(v) -> str:
        return str(client.create_model_version(name, v.source, run_id=v.run_id, tags=v.tags,
                                               description=v.description).version)

    store = bulk.registry_store(client)
    new = [r for r in records if r["unit"]["key"] not in by_key]
    numbers = {key: str(v.version) for key, v in by_key.items()}
    with quiet_mlflow():
        made = bulk.write_versions(store, name, [rows(r) for r in new]) if store is not None \
            else each(create, [rows(r) for r in new], threads)
        numbers.update(zip([r["unit"]["key"] for r in new], map(str, made)))
        moved = {a: v for a, v in cutoff_aliases(records, numbers).items() if aliases.get(a) != v}
        if store is not None:
            bulk.point_aliases(store, name, moved)
        else:
            each(lambda item: point(*item), list(moved.items()), threads)


def cutoff_aliases(records: Sequence[Mapping[str, Any]], versions: Mapping[str, str]) -> dict[str, str]:
    """alias -> version: ``cutoff-<label>-seed-<s>`` for every unit, ``cutoff-<label>`` for its
    cutoff's lowest seed (``versions``: unit key -> version number)."""
    pointed: dict[str, str] = {}
    lowest: dict[str, tuple[int, str]] = {}
    for r in records:
        unit, version = r["unit"], versions[r["unit"]["key"]]
        pointed[alias_for(unit["cutoff"], unit["seed"])] = version
        if unit["cutoff"] not in lowest or unit["seed"] < lowest[unit["cutoff"]][0]:
            lowest[unit["cutoff"]] = (unit["seed"], version)
    pointed.update({alias_for(cutoff): version for cutoff, (_, version) in lowest.items()})
    return pointed


def registry_plan(versions: Sequence[Any], name: str, records: Sequence[Mapping[str, Any]],
                  run_ids: Mapping[str, str], project: str | None = None) -> tuple[dict[str, Any], list[Any]]:
    """(unit key -> its version to keep: the oldest under ``name`` of its run, [versions to delete:
    its others, from the same hardware, and under ``name`` those of units redone under a new key]);
    other datasets' units, other hardware's and other ``project``s' versions are left alone."""
    slots = {(r["unit"]["cutoff"], str(r["unit"]["seed"])): r["unit"]["key"] for r in records}
    current = {r["unit"]["key"]: r for r in records}
    keep: dict[str, Any] = {}
    stale = []
    for v in sorted(versions, key=lambda v: int(v.version)):
        key, slot = v.tags.get("unit_key"), (v.tags.get("cutoff"), v.tags.get("seed"))
        if project is not None and v.tags.get(PROJECT_TAG, project) != project:
            continue  # another clone's version
        if key in current:
            if v.name == name and v.run_id == run_ids[key] and key not in keep:
                keep[key] = v
            elif v.run_id == run_ids[key] or same_hardware(v.tags, current[key]):
                stale.append(v)
        elif v.name == name and slot in slots:  # superseded by a redone unit
            stale.append(v)
    return keep, stale


def _alias_setter(client):
    """The registry's own ``set_registered_model_alias`` when exposed: the public one first reads the
    whole registered model, a round trip per alias that doubled the registry sync."""
    registry = getattr(client, "_get_registry_client", None)
    target = registry() if registry is not None else client
    return getattr(target, "set_registered_model_alias", client.set_registered_model_alias)


DRIVER_TAG = "driver"  # "<host>:<pid>" of the process that opened a stage run
PROJECT_TAG = "project"  # "<host>:<folder>" of the clone whose sync made a unit run or version
PROJECT_ENV = "DRIFTMATRIX_PROJECT"


def project_id() -> str:
    """This clone's name in a shared store: ``DRIFTMATRIX_PROJECT``, else ``<host>:<working folder>``."""
    return os.environ.get(PROJECT_ENV) or f"{socket.gethostname()}:{Path.cwd().resolve()}"


def driver_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _process_gone(driver: str) -> bool:
    """True when ``driver`` (``host:pid``) ran on this host and that process no longer exists."""
    host, _, pid = driver.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False  # another machine's, or not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def end_orphaned_runs(client, exp_id: str, tags: Mapping[str, str]) -> int:
    """Mark KILLED the RUNNING runs with ``tags`` whose driver process is gone; returns how many."""
    from mlflow.entities import ViewType

    filt = tag_filter(tags) + " and attributes.status = 'RUNNING'"
    ended = 0
    for r in client.search_runs([exp_id], filter_string=filt, run_view_type=ViewType.ACTIVE_ONLY,
                                max_results=1000):
        if _process_gone(r.data.tags.get(DRIVER_TAG, "")):
            finish_run(client, r.info.run_id, int(time.time() * 1000), "KILLED")
            ended += 1
    if ended:
        log.info("mlflow: %d run(s) %s left RUNNING by a killed process marked KILLED", ended, dict(tags))
    return ended


@contextlib.contextmanager
def stage_run(exp_id: str, run_name: str, tags: Mapping[str, str]):
    """``mlflow.start_run`` of a stage's own run, tagged with its driver, after ending killed drivers' runs."""
    import mlflow
    from mlflow.tracking import MlflowClient

    end_orphaned_runs(MlflowClient(), exp_id, tags)
    with mlflow.start_run(experiment_id=exp_id, run_name=run_name,
                          tags={**dict(tags), DRIVER_TAG: driver_id()}) as run:
        yield run


def log_rows(cfg: TrackingConfig, rows: Sequence[tuple[str, Mapping[str, float], Path]],
             data: Mapping[str, Any] | None = None, step: int = 0) -> None:
    """Attach scored drift-matrix rows (metrics, dataset ``data``, artifacts) to their finished runs
    without re-opening them; ``step``: the number of slices, so a growing row keeps its history."""
    from mlflow.tracking import MlflowClient

    configure(cfg)
    client = MlflowClient()
    now = int(time.time() * 1000)

    def attach(item: tuple[str, Mapping[str, float], Path]) -> None:
        run_id, metrics, folder = item
        client.log_batch(run_id, metrics=[_metric(k, v, now, step) for k, v in metrics.items()])
        if data:
            log_inputs(client, run_id, [_dataset_input(data["name"], data["digest"], data["source"], "evaluation")])
        client.log_artifacts(run_id, str(folder))

    each(attach, list(rows), write_threads(cfg))


def registered_version(client, unit, weights_digest: str | None = None):
    """The version of ``<dataset>.<model>`` holding ``unit`` (by key) and, when given, its weights:
    this project's first, then the oldest; else a LookupError saying why the slot's is not used."""
    name, project = registered_name(unit.dataset, unit.model), project_id()
    slot = [v for v in client.search_model_versions(f"name = {quote(name)} and tags.cutoff = {quote(unit.cutoff)}",
                                                    max_results=100_000) if v.tags.get("seed") == str(unit.seed)]
    same = [v for v in slot if v.tags.get("unit_key") == unit.key]
    fits = [v for v in same if not weights_digest or v.tags.get(WEIGHTS_TAG, weights_digest) == weights_digest]
    if fits:
        return min(fits, key=lambda v: (v.tags.get(PROJECT_TAG, project) != project, int(v.version)))
    if same:
        v = same[-1]
        why = (f"{name} version {v.version} holds this unit but weights {v.tags[WEIGHTS_TAG][:12]} (computed on "
               f"{v.tags.get('hardware', 'unknown hardware')}), its scores came from {weights_digest[:12]}: not used")
    elif slot:
        v = max(slot, key=lambda v: int(v.version))
        why = (f"{name} version {v.version} has unit key {v.tags.get('unit_key')}, this plan's is {unit.key} "
               "(trained under other code, data, settings or environment): not used")
    else:
        why = f"{name} has no version of unit {unit.key}"
    raise LookupError(f"{unit.model} seed {unit.seed} cutoff {unit.cutoff}: the MLflow registry did not give a "
                      f"model ({why})")


def load_registered(unit, weights_digest: str | None = None) -> Any:
    """The network of ``unit`` as registered (:func:`registered_version`), loaded without unpickling."""
    from mlflow.tracking import MlflowClient

    from driftmatrix.tracking import pyfunc as serving

    version = registered_version(MlflowClient(), unit, weights_digest)
    return serving.load(f"models:/{version.name}/{version.version}").unwrap_python_model().network
