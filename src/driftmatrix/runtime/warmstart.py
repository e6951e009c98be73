"""The `driftmatrix` command, started warm under `dvc repro`.

A stage process spends most of its few seconds importing torch, MLflow and pandas, and
`dvc repro` starts one per stage. Under DVC (``DVC_STAGE`` set), the first stage starts a server
in the background that imports those libraries once; the next stages ask it to fork a child
that runs their command line in their place: their arguments, environment, working directory,
stdin/stdout/stderr and process group, and their exit status comes back. Outside DVC (unless
``DRIFTMATRIX_WARM=1``), and whenever no server answers, the command runs as it always did, in
its own process.

What keeps it the same command:
- The server imports third-party libraries only. A child drops every ``driftmatrix`` module it
  inherited and imports this checkout's code afresh, so an edit between two stages is seen.
- A server serves only processes that would have started it alike: the same interpreter,
  ``sys.path``, user and environment (``DVC_STAGE`` aside). Anything else gets a server of its
  own; an idle one exits after ``IDLE_S``.
- The child kills itself when its caller dies (a SIGKILL of the stage process, or of `dvc
  repro`'s process group), and joins the caller's process group where it may (the same
  session), so that a group's signals reach it; SIGTERM, SIGHUP and SIGQUIT sent to the caller
  are passed on, and SIGINT too when the child is not in its group. When the server dies
  mid-stage, the caller kills the child and fails in one line: rerun.
- ``DRIFTMATRIX_WARM=0`` turns it off.
"""

from __future__ import annotations

import hashlib
import json
import os
import selectors
import signal
import socket
import subprocess
import struct
import sys
import tempfile
import time
from pathlib import Path

IDLE_S = 20.0  # an idle server exits: a `dvc repro` starts its next stage within a second or two
# imported by the server before it forks, in the order the stages need them (validate reads with
# great-expectations, train and evaluate run torch and MLflow, report draws): third-party only
PRELOAD = ("numpy", "pandas", "typer", "yaml", "great_expectations", "scipy.stats", "torch", "torch.nn",
           "sklearn.base", "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store",
           "mlflow.store.model_registry.sqlalchemy_store", "matplotlib.pyplot",
           "skops.io")  # skops: 3-5 s, it walks every scikit-learn estimator (tabular models load through it)
UNKEYED_ENV = ("DVC_STAGE", "_", "SHLVL", "OLDPWD")  # differ from one stage's command to the next
CLI = "driftmatrix.cli:main"


def main() -> None:
    """Console entry point: hand the command to a warm server under DVC (or DRIFTMATRIX_WARM=1),
    else run it here."""
    wanted = os.environ.get("DRIFTMATRIX_WARM", "1" if os.environ.get("DVC_STAGE") else "0")
    path = socket_path(server_key()) if wanted == "1" and sys.platform == "linux" else None
    if path is not None:
        code = run_warm(path, CLI)
        if code is None:
            start_server(path)
        else:
            exit_like(code)
    call(CLI)


def call(entry: str):
    """Call ``module:function``."""
    import importlib

    module, _, function = entry.partition(":")
    return getattr(importlib.import_module(module), function)()


def server_key() -> str:
    """What a process must share with the server for a fork of it to be the process it would have
    been: interpreter and its flags, import path, user, environment, and the installed
    packages."""
    env = {k: v for k, v in os.environ.items() if k not in UNKEYED_ENV}
    site = [p for p in sys.path if p.endswith("site-packages")]
    stamp = [os.stat(p).st_mtime_ns for p in site if os.path.isdir(p)]
    blob = json.dumps([sys.executable, interpreter_flags(), sys.path, os.getuid(), sorted(env.items()),
                       stamp])
    return hashlib.sha256(blob.encode()).hexdigest()[:24]


def interpreter_flags() -> list[str]:
    """The command-line flags this interpreter runs with (-O, -X dev...), as the server's must."""
    return subprocess._args_from_interpreter_flags()  # what multiprocessing passes its workers


def socket_path(key: str) -> Path | None:
    """The server's socket, in a folder only this user may enter (None if it is not so)."""
    folder = Path(tempfile.gettempdir()) / f"driftmatrix-warm-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        info = folder.lstat()
    except OSError:
        return None
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or not folder.is_dir() or folder.is_symlink():
        return None
    return folder / f"{key}.sock"


# --- the caller -------------------------------------------------------------------------------
def run_warm(path: Path, entry: str) -> int | None:
    """Run this command (``entry``, ``module:function``, with this process's arguments) in a child
    of the server at ``path``: its exit code (negative: killed by that signal), or None when no
    server took it (the caller runs it itself)."""
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(path))
        request = {"argv": sys.argv, "env": dict(os.environ), "cwd": os.getcwd(), "pgid": os.getpgid(0),
                   "path": sys.path, "entry": entry}
        socket.send_fds(conn, [json.dumps(request).encode() + b"\n"], [0, 1, 2])
    except OSError:
        return None
    reader = conn.makefile("rb")
    child, grouped = None, False

    def forward(sig: int, _frame) -> None:
        if child is None:  # not started: the caller goes as it would have; a child forked by now follows it
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        elif sig != signal.SIGINT or not grouped:  # a child in our group has the terminal's SIGINT already
            _kill(child, sig)

    handlers = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT,
                                                             signal.SIGINT)}
    try:
        for line in reader:
            word, *values = line.decode().split()
            if word == "started":
                child, grouped = int(values[0]), int(values[1]) == os.getpgid(0)
            elif word == "exit":
                return None if child is None else int(values[0])  # None: it died before it started
    except OSError:
        pass
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    if child is None:
        return None  # the server went away before the child started: run cold
    _kill(child, signal.SIGKILL)
    print(f"driftmatrix: the warm stage server ({path}) died while running this stage; rerun it "
          "(DRIFTMATRIX_WARM=0 runs stages without it)", file=sys.stderr)
    return 1


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def exit_like(code: int) -> None:
    """Exit with the child's code, or by the signal that killed it."""
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        time.sleep(1)
        os._exit(128 - code)
    os._exit(code)


def start_server(path: Path) -> subprocess.Popen | None:
    """Start the server in the background, detached from this command's output (DVC and the
    tests read it to its end) and in a process group of its own (a kill of the caller's group
    leaves it to idle out), with this process's import path and environment."""
    code = ("import sys; sys.path[:] = __import__('json').loads(sys.argv[1]); "
            "from driftmatrix.runtime.warmstart import serve_then_run; serve_then_run(sys.argv[2])")
    try:
        return subprocess.Popen([sys.executable, *interpreter_flags(), "-c", code, json.dumps(sys.path), str(path)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                close_fds=True, process_group=0, cwd="/")  # holds no caller's folder
    except OSError:
        return None


# --- the server -------------------------------------------------------------------------------
def serve_then_run(path: str) -> None:
    """The server's main: serve until idle; in a child it forked, become the caller and run the
    command line as `driftmatrix` would, exiting through the interpreter's normal shutdown."""
    request = serve(Path(path))
    if request is not None:
        call(request["entry"])


def serve(path: Path) -> dict | None:
    """Accept callers until idle for IDLE_S; returns None in the server, the request in a child."""
    import fcntl

    lock_path = path.with_suffix(".lock")
    lock = os.open(lock_path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return None  # another server holds this key
    server = os.getpid()
    path.unlink(missing_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(16)
    try:
        return accept_loop(listener, lock)
    finally:
        if os.getpid() == server:
            path.unlink(missing_ok=True)
            lock_path.unlink(missing_ok=True)


def preload_next(pending: list[str]) -> None:
    """Import the next library of ``pending``; after the last, collect once."""
    import gc
    import importlib

    try:
        importlib.import_module(pending.pop(0))
    except Exception:  # noqa: BLE001 - a library missing here is imported (or not) by the stage
        pass
    if not pending:
        gc.collect()


def forget_own_modules() -> None:
    """Drop every driftmatrix module (this one included, as the server imported it): a child
    imports the code as it is when it starts."""
    for name in [m for m in sys.modules if m == "driftmatrix" or m.startswith("driftmatrix.")]:
        del sys.modules[name]


def accept_loop(listener: socket.socket, lock: int) -> dict | None:
    """Serve callers, importing PRELOAD one library at a time while none waits (a caller that
    comes early is forked with what is loaded by then); None in the server once idle for IDLE_S
    or sent SIGTERM (its children finish first), the caller's request in a child."""
    import gc

    children: dict[int, socket.socket] = {}
    pending = list(PRELOAD)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _frame: stopped.append(sig))
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    idle_since = time.monotonic()
    while children or not stopped and (pending or time.monotonic() - idle_since < IDLE_S):
        events = selector.select(timeout=0 if pending and not stopped else 1.0)
        if not events and pending and not stopped:
            preload_next(pending)
        for key, _ in events:
            if key.data == "child":
                os.read(wake_r, 512)
                continue
            conn, _ = listener.accept()
            request = None if stopped else receive(conn)
            if request is None:
                conn.close()  # the caller runs the command itself
                continue
            forget_own_modules()
            gc.freeze()  # out of the collector's reach: a child would otherwise walk, and so copy, it all
            pid = os.fork()
            if pid == 0:
                selector.close()
                listener.close()
                for fd in (wake_r, wake_w, lock):
                    os.close(fd)
                for other in children.values():
                    other.close()
                become_caller(conn, request)
                return request
            for fd in request["fds"]:  # the caller's stdio stays open only in the child: a reader waits for its EOF
                os.close(fd)
            children[pid] = conn
        if reap(children):
            idle_since = time.monotonic()
    return None


def receive(conn: socket.socket) -> dict | None:
    """The caller's request and stdio, from a process of this user only."""
    fds: list[int] = []
    try:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.getuid():
            raise OSError("another user")
        conn.settimeout(5)
        data, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        conn.settimeout(None)
        while not data.endswith(b"\n"):
            more = conn.recv(1 << 20)
            if not more:
                raise OSError("caller went away")
            data += more
        request = json.loads(data)
        if len(fds) != 3:
            raise OSError("no stdio")
        request["fds"] = fds
        return request
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return None


def reap(children: dict[int, socket.socket]) -> bool:
    """Send each finished child's exit code to its caller; whether any finished."""
    finished = False
    for pid in list(children):
        try:
            done, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done, status = pid, 1 << 8
        if done:
            finished = True
            conn = children.pop(pid)
            try:
                conn.sendall(f"exit {os.waitstatus_to_exitcode(status)}\n".encode())
            except OSError:
                pass
            conn.close()
    return finished


# --- the child --------------------------------------------------------------------------------
def become_caller(conn: socket.socket, request: dict) -> None:
    """Take the caller's place: its process group, stdio, environment, working directory and
    arguments; die with it; leave the server's signal handling and driftmatrix modules behind."""
    import threading

    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        os.setpgid(0, request["pgid"])
    except OSError:
        pass  # another session's group: the caller passes SIGINT on, and the child dies with it all the same
    for target, fd in enumerate(request["fds"]):
        os.dup2(fd, target)
        os.close(fd)
    reopen_stdio()
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])
    sys.path[:] = request["path"]
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS
        sys.modules["numpy"].random.seed()
    conn.sendall(f"started {os.getpid()} {os.getpgid(0)}\n".encode())

    def die_with_caller() -> None:
        while True:
            try:
                if not conn.recv(4096):
                    break
            except OSError:
                break
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=die_with_caller, name="warmstart-caller", daemon=True).start()


def reopen_stdio() -> None:
    """sys.stdin/stdout/stderr over the caller's descriptors, buffered as Python would buffer them
    at start-up (line by line on a terminal)."""
    import io

    for name, fd, mode in (("stdin", 0, "r"), ("stdout", 1, "w"), ("stderr", 2, "w")):
        old = getattr(sys, name)  # as the server's were made: same flags and environment
        unbuffered = mode == "w" and old.write_through  # python -u, PYTHONUNBUFFERED
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = raw if unbuffered else io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        stream = io.TextIOWrapper(buffered, encoding=old.encoding, errors=old.errors,
                                  line_buffering=mode == "w" and (os.isatty(fd) or name == "stderr"),
                                  write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)
