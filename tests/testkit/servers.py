"""Throw-away PostgreSQL and MLflow tracking servers on 127.0.0.1 (tests, bench/cluster.py)."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Mapping

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


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


#: How docs/scaling.md runs a shared server: MLflow's Flask app under gunicorn rather than its
#: default FastAPI app under uvicorn, which hands every request to the same Flask app through a
#: WSGI bridge; a unit's sync took about 40% less time (docs/benchmarks.md). A worker may take
#: minutes over a large upload, and each request is logged, as uvicorn does (tests read the log).
GUNICORN_OPTS = "--timeout 300 --access-logfile -"


class MlflowServer:
    """``mlflow server`` on 127.0.0.1:``port`` over ``backend`` with served artifacts under
    ``artifacts``, under gunicorn (:data:`GUNICORN_OPTS`); :meth:`stop` and :meth:`start` again
    keep the port (a restarted server)."""

    def __init__(self, backend: str, artifacts: str | Path, *, port: int | None = None, workers: int = 1,
                 log: str | Path | None = None, env: Mapping[str, str] | None = None) -> None:
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
               "-p", str(self.port), "--workers", str(self.workers), "--gunicorn-opts", GUNICORN_OPTS]
        # no job consumers: MLflow 3 starts seven huey processes (about 240 MB each) for server-side
        # jobs that the runs, metrics and registry calls here never use
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **self.env}
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
