"""A shared MLflow tracking server: how the pipeline talks to one, and a throw-away one on
PostgreSQL for tests and benchmarks.

Talking to a server (``MLFLOW_TRACKING_URI=http://...``):

- **Retries** (:func:`http_retry_defaults`): MLflow retries a failed request itself (connection
  refused or reset, HTTP 429/500/502/503/504) with exponential backoff, logging each retry through
  ``urllib3`` ("Retrying (Retry(total=3, ...)) after connection broken by ..."). Its defaults
  (7 retries, factor 2) wait about four minutes before a request fails; the pipeline sets 4
  retries, factor 1, jitter 1 s (about 15-20 s: waits of 0, 2, 4 and 8 s plus jitter) unless the
  user set ``MLFLOW_HTTP_REQUEST_MAX_RETRIES`` / ``_BACKOFF_FACTOR`` / ``_BACKOFF_JITTER``
  themselves: a server restart of a few seconds is bridged, a server that is down stops the
  stage within half a minute instead of four.
- **A server that stays down** (:func:`explain`, :func:`server_errors`): the stage stops with one
  line naming the server, no traceback (``driftmatrix`` prints it as ``error: ...``, exit status 2). Nothing is lost: the checkpoints are the record,
  and the next run's sync completes MLflow from them (a run left half-written is deleted then).

Throw-away servers (tests, ``bench/cluster.py``): :class:`Postgres` makes a database cluster with
``initdb`` in a temp folder and runs it on 127.0.0.1 and a free port (as the ``postgres`` or
``nobody`` user when this process is root: PostgreSQL refuses to run as root), and
:class:`MlflowServer` runs ``mlflow server --backend-store-uri postgresql://... --serve-artifacts
--artifacts-destination <folder> -h 127.0.0.1 -p <port>`` on it.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Mapping

from driftmatrix.config import ConfigError

log = logging.getLogger(__name__)
LOOPBACK = "127.0.0.1"
RETRY_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "4", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                  "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "1.0"}


def is_server(uri: str) -> bool:
    return uri.startswith(("http://", "https://"))


def http_retry_defaults(uri: str) -> None:
    """The pipeline's retry settings for a tracking server (module doc), where the user set none."""
    if is_server(uri):
        for key, value in RETRY_DEFAULTS.items():
            os.environ.setdefault(key, value)


_REQUEST = re.compile(r"API request to (?:endpoint )?(https?://[^/\s]+)\S* failed with exception (.*)", re.S)
_DOWN = ("Max retries exceeded", "Connection refused", "ConnectionError", "NewConnectionError",
         "RemoteDisconnected", "Connection aborted", "Connection reset", "Read timed out", "ResponseError")
_SECRETS = (re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^/\s:@]*:)[^/\s@]+@"),  # scheme://user:password@
            re.compile(r"([?&](?:password|passwd|pwd|token|secret|access_key)=)[^&\s]+", re.I))


def redact(text: str) -> str:
    """``text`` with the credentials of every URI in it masked (``user:***@``, ``password=***``):
    how any URI is printed (error lines, logs, files)."""
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
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text, name, module = str(cur), type(cur).__name__, type(cur).__module__
        match = _REQUEST.search(text)
        if (match or module.startswith(("requests", "urllib3"))) and any(k in text or k == name for k in _DOWN):
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
    """Turn a tracking server that stays unreachable into :class:`TrackingServerDown` (one line)."""
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


# --- throw-away servers ---------------------------------------------------------------------------
def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``pg_ctl``, ``postgres``), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    return Path(versions[-1]).parent if versions else None


def _run_as() -> str | None:
    """The user PostgreSQL runs as when this process is root (it refuses root), else None."""
    if os.geteuid() != 0:
        return None
    import pwd

    for user in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            pwd.getpwnam(user)
            return user
    raise RuntimeError("running as root and neither a postgres nor a nobody user exists to run PostgreSQL")


class Postgres:
    """A PostgreSQL cluster made with ``initdb`` in a temp folder, serving 127.0.0.1:``port`` only
    (no unix socket, trust authentication for the one local user ``driftmatrix``)."""

    def __init__(self, root: str | Path | None = None) -> None:
        from driftmatrix.cluster import free_port

        self.bin = postgres_bin()
        if self.bin is None:
            raise FileNotFoundError("PostgreSQL's initdb not found (Debian: apt-get install postgresql)")
        self.root = Path(root or tempfile.mkdtemp(prefix="dmpg"))
        self.data = self.root / "data"
        self.port = free_port()
        self.user = "driftmatrix"
        self.run_as = _run_as()
        self.log = self.root / "postgres.log"

    def _cmd(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        kwargs = {"user": self.run_as} if self.run_as else {}
        out = subprocess.run([str(a) for a in args], capture_output=True, text=True, cwd=self.root, timeout=120,
                             **kwargs)
        if check and out.returncode != 0:
            raise RuntimeError(f"{Path(str(args[0])).name} failed ({out.returncode}): "
                               f"{(out.stderr or out.stdout).strip()[-1500:]}")
        return out

    def start(self) -> "Postgres":
        self.root.mkdir(parents=True, exist_ok=True)
        if self.run_as:
            shutil.chown(self.root, self.run_as)
        if not (self.data / "PG_VERSION").exists():
            self._cmd(self.bin / "initdb", "-D", self.data, "-U", self.user, "--auth=trust", "--no-sync",
                      "-E", "UTF8", "--locale=C")
        opts = (f"-c listen_addresses={LOOPBACK} -c port={self.port} -c unix_socket_directories='' "
                f"-c fsync=off -c full_page_writes=off -c max_connections=200")
        self._cmd(self.bin / "pg_ctl", "-D", self.data, "-l", self.log, "-o", opts, "-w", "-t", "60", "start")
        return self

    def create_database(self, name: str) -> str:
        """A new database; its SQLAlchemy URI."""
        self._cmd(self.bin / "createdb", "-h", LOOPBACK, "-p", str(self.port), "-U", self.user, name)
        return self.uri(name)

    def uri(self, name: str = "postgres") -> str:
        return f"postgresql+psycopg2://{self.user}@{LOOPBACK}:{self.port}/{name}"  # SQLAlchemy 2.1 defaults to psycopg 3

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._cmd(self.bin / "pg_ctl", "-D", self.data, "-m", "immediate", "-w", "stop", check=False)
        shutil.rmtree(self.root, ignore_errors=True)


class MlflowServer:
    """``mlflow server`` on 127.0.0.1:``port`` over ``backend`` with served artifacts under
    ``artifacts``; :meth:`stop` and :meth:`start` again keep the port (a restarted server)."""

    def __init__(self, backend: str, artifacts: str | Path, *, port: int | None = None, workers: int = 1,
                 log: str | Path | None = None, env: Mapping[str, str] | None = None) -> None:
        from driftmatrix.cluster import free_port

        self.backend, self.artifacts = backend, Path(artifacts)
        self.port = port or free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.workers = workers
        self.log = Path(log) if log else self.artifacts.parent / f"mlflow-server-{self.port}.log"
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> "MlflowServer":
        self.artifacts.mkdir(parents=True, exist_ok=True)
        mlflow = Path(sys.executable).parent / "mlflow"
        cmd = [str(mlflow) if mlflow.exists() else "mlflow", "server", "--backend-store-uri", self.backend,
               "--artifacts-destination", str(self.artifacts), "--serve-artifacts", "-h", LOOPBACK,
               "-p", str(self.port), "--workers", str(self.workers)]
        env = {**os.environ, **self.env}
        env.pop("MLFLOW_TRACKING_URI", None)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited ({self.proc.returncode}): {self.tail()}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as answer:
                    if answer.status == 200:
                        return self
            time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"mlflow server on {self.url} not up after {timeout:.0f} s: {self.tail()}")

    def tail(self, n: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-n:]
        return ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the server's whole process group (its workers too)."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)
        # workers in the group may outlive the parent for a moment
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc = None

    def __enter__(self) -> "MlflowServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
