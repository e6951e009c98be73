"""A shared MLflow tracking server: how the pipeline talks to one."""

from __future__ import annotations

import contextlib
import logging
import os
import re

from driftmatrix.config import ConfigError

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
RETRY_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1.0"}


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def http_retry_defaults(uri: str) -> None:
    """About 15-20 s of retries for a tracking server where the user set no ``MLFLOW_HTTP_REQUEST_*``:
    MLflow's own defaults wait about four minutes, so a restart is bridged and a server that is down
    stops the stage within half a minute."""
    if is_server(uri):
        for key, value in RETRY_DEFAULTS.items():
            os.environ.setdefault(key, value)


_REQUEST = re.compile(r"API request to (?:endpoint )?(https?://[^/\s]+)\S* failed with exception (.*)", re.S)
_DOWN = ("Max retries exceeded", "Connection refused", "ConnectionError", "NewConnectionError",
         "RemoteDisconnected", "Connection aborted", "Connection reset", "Read timed out", "ResponseError")
_SECRETS = (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"),  # scheme://user:password@
            re.compile(r"([?&](?:password|passwd|pwd|token|secret|access_key)=)[^&\s]+", re.I))


def redact(text: str) -> str:
    """``text`` with every URI's credentials masked: how any URI is printed."""
    for pattern in _SECRETS:
        text = pattern.sub(r"\1***@" if pattern is _SECRETS[0] else r"\1***", text)
    return text


class RedactingFormatter(logging.Formatter):
    """A log formatter that masks credentials in every line it formats (:func:`redact`)."""

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


def explain(exc: BaseException, uri: str | None = None) -> str | None:
    """One line for an error that means the MLflow tracking server (after MLflow's retries) or the
    store's database (``uri``, default ``MLFLOW_TRACKING_URI``) could not be reached, naming it with
    credentials masked; None for any other error (Ray's own ConnectionError included)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    # a store named as local has no server; unnamed (the CLI's catch-all), the error's URL decides
    over_http = uri is None or is_server(str(uri))
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text, name, module = str(cur), type(cur).__name__, type(cur).__module__
        match = _REQUEST.search(text)
        if over_http and (match or module.startswith(("requests", "urllib3"))) \
                and any(k in text or k == name for k in _DOWN):
            reason = "connection refused" if "refused" in text else \
                "too many errors" if "too many" in text.lower() or "ResponseError" in text else "no answer"
            retries = os.environ.get("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "7")
            where = (match.group(1) if match else _url_of(text)) or uri or "the tracking server"
            return redact(f"MLflow tracking server {where} unreachable ({reason}, after {retries} retries): start "
                          "it (or point MLFLOW_TRACKING_URI elsewhere) and rerun; finished units are kept and synced "
                          "then")
        if module.startswith("sqlalchemy") and name == "OperationalError" and not str(uri).startswith("sqlite"):
            reason = str(getattr(cur, "orig", None) or text).strip().splitlines()[0]
            return redact(f"MLflow tracking database {uri}: {reason}: start it or fix the URI (MLFLOW_TRACKING_URI, "
                          "tracking.uri) and rerun; finished units are kept and synced then")
        cur = cur.__cause__ or cur.__context__
    return None


class TrackingServerDown(ConfigError):
    """The tracking server could not be reached: ``driftmatrix`` prints its one line (no traceback)."""


@contextlib.contextmanager
def server_errors(uri: str):
    """Turn a tracking server that stays unreachable into :class:`TrackingServerDown` (one line, no
    traceback): nothing is lost, as the next run's sync completes MLflow from the checkpoints."""
    try:
        yield
    except TrackingServerDown:
        raise
    except Exception as exc:
        line = explain(exc, uri)
        if line is None:
            raise
        log.debug("tracking server error", exc_info=True)
        raise TrackingServerDown(line) from None


def _url_of(text: str) -> str | None:
    m = re.search(r"host='([^']+)', port=(\d+)", text)
    return f"http://{m.group(1)}:{m.group(2)}" if m else None
