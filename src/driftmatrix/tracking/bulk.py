"""Unit runs and registry versions written into a local sqlite store a batch at a time, with
MLflow's own table definitions.

Through :class:`MlflowClient` a unit's run is five calls (create, log_batch, log_inputs, the
artifacts, set_terminated) and its version and aliases two or three more, each its own session
with its own lookups: about 30 ms a unit. Here a batch of runs is one insert a table of the rows
those calls write (RUNNING, with the stage's driver tag), then the artifacts, then one update to
FINISHED; a kill in between leaves RUNNING runs of a dead driver, which the next sync deletes and
redoes, as after a kill between client calls. New versions with their tags, and the aliases that
move, are one transaction each. ``tests/tracking/test_bulk.py`` compares what the two ways write,
table by table, at the pinned MLflow; a store this module cannot write (a server, a database named
directly, another MLflow) goes through the client. Only sqlite: there :func:`runs.store_lock`
makes each sync the only writer.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

log = logging.getLogger(__name__)

#: Runs a transaction inserts (and a kill can cost) at most.
BATCH = 200


@dataclass(frozen=True)
class RunRows:
    """One unit's run as MLflow's calls would log it: ``tags`` at creation, then one ``log_batch``
    of ``metrics``, ``params`` and ``batch_tags``, the dataset ``inputs`` and the artifact folders
    (``(local folder, artifact path or None)``)."""

    run_id: str
    name: str
    started: int
    ended: int
    tags: dict[str, str]
    params: list = field(default_factory=list)
    metrics: list = field(default_factory=list)
    batch_tags: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    artifacts: list[tuple[Path, str | None]] = field(default_factory=list)


def _sqlite_uri(client) -> bool:
    return str(getattr(client, "tracking_uri", "")).startswith("sqlite:")


def sql_store(client):
    """The SQLAlchemy store behind ``client`` when it is a sqlite file this MLflow's table models
    can write; else None (the client writes, one call at a time)."""
    if not _sqlite_uri(client):
        return None  # MLflow's SQLAlchemy modules cost 0.6 s to import: not for a server
    try:
        from mlflow.store.tracking.dbmodels import models  # noqa: F401 - what write_runs needs
        from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
        from mlflow.utils import validation

        needed = ("_validate_batch_log_data", "_validate_batch_log_limits", "_validate_param_keys_unique",
                  "_validate_dataset_inputs")
        store = client._tracking_client.store
    except (ImportError, AttributeError):
        return None
    if not isinstance(store, SqlAlchemyStore) or getattr(store, "db_type", None) != "sqlite" \
            or not all(hasattr(validation, name) for name in needed):
        return None
    return store


def validate(rows: RunRows) -> None:
    """MLflow's own checks of the values its calls would be given (an MlflowException names the field)."""
    from mlflow.utils import validation

    validation._validate_batch_log_data(rows.metrics, rows.params, rows.batch_tags)
    validation._validate_batch_log_limits(rows.metrics, rows.params, rows.batch_tags)
    validation._validate_param_keys_unique(rows.params)
    validation._validate_dataset_inputs(rows.inputs)


def write_runs(store, exp_id: str, runs: Sequence[RunRows], copy: Callable[[str, Path, str | None], None]) -> None:
    """Insert ``runs`` (:data:`BATCH` a transaction, one multi-row insert a table), copy each one's
    artifacts with ``copy(artifact uri, folder, artifact path)``, then mark the batch FINISHED."""
    from mlflow.entities import LifecycleStage, RunStatus
    from mlflow.store.tracking.dbmodels.models import SqlRun
    from mlflow.utils.uri import append_to_uri_path
    from sqlalchemy import bindparam, update

    experiment = store.get_experiment(exp_id)
    store._check_experiment_is_active(experiment)
    for run in runs:
        validate(run)
    table = SqlRun.__table__
    for start in range(0, len(runs), BATCH):
        batch = runs[start:start + BATCH]
        uris = {r.run_id: append_to_uri_path(experiment.artifact_location, r.run_id, "artifacts") for r in batch}
        with store.ManagedSessionMaker(read_only=False) as session:
            rows = _table_rows(store, exp_id, batch, uris, _datasets(session, exp_id, batch))
            for model, values in rows.items():
                if values:
                    session.execute(model.__table__.insert(), values)
        try:
            for r in batch:
                for folder, path in r.artifacts:
                    copy(uris[r.run_id], folder, path)
            with store.ManagedSessionMaker(read_only=False) as session:
                session.execute(update(table).where(table.c.run_uuid == bindparam("id")).values(
                    status=RunStatus.to_string(RunStatus.FINISHED), end_time=bindparam("end")).execution_options(
                    synchronize_session=False), [{"id": r.run_id, "end": r.ended} for r in batch])
        except BaseException:  # never leave half-written runs behind (as the client path deletes its own)
            with contextlib.suppress(Exception), store.ManagedSessionMaker(read_only=False) as session:
                session.execute(update(table).where(table.c.run_uuid.in_(list(uris))).values(
                    lifecycle_stage=LifecycleStage.DELETED, deleted_time=int(time.time() * 1000)))
            raise
        if len(runs) > BATCH:
            log.info("mlflow: %d/%d runs written", start + len(batch), len(runs))


def _datasets(session, exp_id: str, batch: Sequence[RunRows]) -> dict[tuple[str, str], Any]:
    """(name, digest) -> dataset uuid of every dataset the batch's inputs name, new ones added."""
    import uuid

    from mlflow.store.tracking.dbmodels.models import SqlDataset

    named = {(i.dataset.name, i.dataset.digest): i.dataset for r in batch for i in r.inputs}
    if not named:
        return {}
    found = {(d.name, d.digest): d.dataset_uuid for d in session.query(SqlDataset).filter(
        SqlDataset.experiment_id == int(exp_id), SqlDataset.name.in_({n for n, _ in named}),
        SqlDataset.digest.in_({d for _, d in named})).all()}
    for (name, digest), d in named.items():
        if (name, digest) not in found:
            found[name, digest] = uuid.uuid4().hex
            session.add(SqlDataset(dataset_uuid=found[name, digest], experiment_id=int(exp_id), name=name,
                                   digest=digest, dataset_source_type=d.source_type, dataset_source=d.source,
                                   dataset_schema=d.schema, dataset_profile=d.profile))
    session.flush()
    return found


def _table_rows(store, exp_id: str, batch: Sequence[RunRows], uris: dict[str, str],
                datasets: dict[tuple[str, str], str]) -> dict[Any, list[dict]]:
    """Table model -> the rows of ``batch`` (RUNNING runs), as MLflow's calls would write them."""
    import uuid

    from mlflow.entities import LifecycleStage, RunStatus, SourceType
    from mlflow.store.tracking.dbmodels.models import (SqlInput, SqlInputTag, SqlLatestMetric, SqlMetric,
                                                         SqlParam, SqlRun, SqlTag)
    from mlflow.utils.mlflow_tags import MLFLOW_RUN_NAME

    out: dict[Any, list[dict]] = {t: [] for t in (SqlRun, SqlTag, SqlParam, SqlMetric, SqlLatestMetric, SqlInput,
                                                   SqlInputTag)}
    for r in batch:
        out[SqlRun].append(dict(
            run_uuid=r.run_id, name=r.name, source_type=SourceType.to_string(SourceType.UNKNOWN), source_name="",
            entry_point_name="", user_id=r.tags.get("mlflow.user", "unknown"),
            status=RunStatus.to_string(RunStatus.RUNNING), start_time=r.started, end_time=None, deleted_time=None,
            source_version="", lifecycle_stage=LifecycleStage.ACTIVE, artifact_uri=uris[r.run_id],
            experiment_id=int(exp_id)))
        tags = {**r.tags, MLFLOW_RUN_NAME: r.tags.get(MLFLOW_RUN_NAME, r.name),
                **{t.key: t.value for t in r.batch_tags}}
        out[SqlTag] += [dict(run_uuid=r.run_id, key=k, value=v) for k, v in tags.items()]
        out[SqlParam] += [dict(run_uuid=r.run_id, key=p.key, value=p.value) for p in r.params]
        latest: dict[str, tuple] = {}
        for m in dict.fromkeys(r.metrics):  # duplicates once, as log_batch does
            is_nan, value = store.sanitize_metric_value(m.value)
            out[SqlMetric].append(dict(run_uuid=r.run_id, key=m.key, value=value, timestamp=m.timestamp,
                                       step=m.step, is_nan=is_nan))
            if m.key not in latest or (m.step, m.timestamp, value) > latest[m.key][:3]:
                latest[m.key] = (m.step, m.timestamp, value, is_nan)
        out[SqlLatestMetric] += [dict(run_uuid=r.run_id, key=k, step=s, timestamp=t, value=v, is_nan=n)
                                 for k, (s, t, v, n) in latest.items()]
        linked = set()
        for i in r.inputs:
            source = datasets[i.dataset.name, i.dataset.digest]
            if source in linked:
                continue
            linked.add(source)
            input_id = uuid.uuid4().hex
            out[SqlInput].append(dict(input_uuid=input_id, source_type="DATASET", source_id=source,
                                      destination_type="RUN", destination_id=r.run_id, step=0))
            out[SqlInputTag] += [dict(input_uuid=input_id, name=t.key, value=t.value) for t in i.tags]
    return out


# --- the registry ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class VersionRows:
    """A new registry version as ``create_model_version`` would be given it."""

    source: str
    run_id: str
    tags: dict[str, str]
    description: str | None = None


def registry_store(client):
    """The registry's SQLAlchemy store when it is the sqlite file of ``client``'s tracking store
    (the sync's lock covers both), else None (the client writes, one call at a time)."""
    if not _sqlite_uri(client):
        return None
    try:
        from mlflow.store.model_registry.sqlalchemy_store import SqlAlchemyStore
        from mlflow.utils import validation

        store, tracking = client._get_registry_client().store, client._tracking_client.store
        needed = ("_validate_model_name", "_validate_model_version_tag", "_validate_model_alias_name",
                  "_validate_model_alias_name_reserved")
    except (ImportError, AttributeError):
        return None
    if not isinstance(store, SqlAlchemyStore) or not all(hasattr(validation, n) for n in needed) \
            or not hasattr(store, "_with_workspace_field") or getattr(store, "db_type", None) != "sqlite" \
            or getattr(store, "db_uri", None) != getattr(tracking, "db_uri", ""):
        return None
    return store


def write_versions(store, name: str, versions: Sequence[VersionRows]) -> list[int]:
    """New versions of the registered model ``name`` (which exists), numbered on from its highest,
    with their tags, in one transaction; their numbers."""
    from mlflow.entities.model_registry.model_version_stages import STAGE_NONE
    from mlflow.store.model_registry.dbmodels.models import SqlModelVersion, SqlModelVersionTag
    from mlflow.utils import validation
    from sqlalchemy import func

    validation._validate_model_name(name)
    for v in versions:
        for key, value in v.tags.items():
            validation._validate_model_version_tag(key, value)
    if not versions:
        return []
    workspace = store._with_workspace_field(SqlModelVersion()).workspace
    with store.ManagedSessionMaker(read_only=False) as session:
        now = int(time.time() * 1000)
        store._get_registered_model(session, name).last_updated_time = now
        top = session.query(func.max(SqlModelVersion.version)).filter(
            SqlModelVersion.name == name, *store._get_workspace_clauses(SqlModelVersion)).scalar() or 0
        numbers = list(range(top + 1, top + 1 + len(versions)))
        session.execute(SqlModelVersion.__table__.insert(), [dict(
            workspace=workspace, name=name, version=n, creation_time=now, last_updated_time=now,
            description=v.description, user_id=None, current_stage=STAGE_NONE, source=v.source,
            storage_location=v.source, run_id=v.run_id, run_link=None, status="READY", status_message=None)
            for n, v in zip(numbers, versions)])
        tags = [dict(workspace=workspace, name=name, version=n, key=k, value=val)
                for n, v in zip(numbers, versions) for k, val in v.tags.items()]
        if tags:
            session.execute(SqlModelVersionTag.__table__.insert(), tags)
    return numbers


def point_aliases(store, name: str, aliases: dict[str, str]) -> None:
    """Point each alias of ``name`` at its version (made or moved), in one transaction."""
    from mlflow.store.model_registry.dbmodels.models import SqlRegisteredModelAlias
    from mlflow.utils import validation

    for alias in aliases:
        validation._validate_model_alias_name(alias)
        validation._validate_model_alias_name_reserved(alias)
    workspace = store._with_workspace_field(SqlRegisteredModelAlias()).workspace
    with store.ManagedSessionMaker(read_only=False) as session:
        for alias, version in aliases.items():
            session.merge(SqlRegisteredModelAlias(workspace=workspace, name=name, alias=alias, version=int(version)))
