"""The warm start of stage commands (driftmatrix.runtime.warmstart): a fork of the server takes the
caller's place (process group, working directory, environment, arguments, stdout, exit code),
imports no driftmatrix module the server had, and dies with its caller."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="warm starts fork")

# the entry points a child runs (``warmprobe:<function>``), importable through PYTHONPATH
PROBE = '''import json, os, sys, time
def report():
    print(json.dumps({"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "cwd": os.getcwd(),
                      "argv": sys.argv, "marker": os.environ.get("WARM_MARKER"), "stage": os.environ.get("DVC_STAGE"),
                      "ours": sorted(m for m in sys.modules if m.split(".")[0] == "driftmatrix"),
                      "torch": "torch" in sys.modules}), flush=True)
    sys.exit(3)
def sleep():
    open(sys.argv[-1], "w").write(str(os.getpid()))
    time.sleep(60)
'''
# a caller: `start` starts the server of its key and prints its pid; `<function> args...` runs
# warmprobe:<function> through the server (exit 99 when none took it)
CALLER = '''import os, sys, time
from driftmatrix.runtime import warmstart as w
path = w.socket_path(w.server_key())
if sys.argv[1] == "start":
    server = w.start_server(path)
    while not path.exists():
        time.sleep(0.05)
    print(server.pid, flush=True)
    sys.exit(0)
print(f"caller {os.getpid()} {os.getpgid(0)}", flush=True)
code = w.run_warm(path, "warmprobe:" + sys.argv[1])
sys.exit(99) if code is None else w.exit_like(code)
'''


@pytest.fixture
def warm(tmp_path):
    (tmp_path / "warmprobe.py").write_text(PROBE)
    (tmp_path / "caller.py").write_text(CALLER)
    env = {**os.environ, "DVC_STAGE": "train@X", "WARM_MARKER": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}

    def caller(*args, **kw):
        return subprocess.run([sys.executable, str(tmp_path / "caller.py"), *args], env={**env, **kw.pop("env", {})},
                              cwd=tmp_path, capture_output=True, text=True, timeout=120, **kw)

    server = int(caller("start").stdout)
    yield caller, server, env
    os.kill(server, signal.SIGTERM)


def test_a_command_runs_in_a_fork_of_the_server_in_the_callers_place(warm, tmp_path):
    caller, server, _ = warm
    deadline = time.monotonic() + 120
    while True:  # a caller that comes while the server still imports is forked with what it has
        done = caller("report", "--flag", env={"DVC_STAGE": "evaluate@Y"})  # the stage's name is not in the key
        assert done.returncode == 3, done.stderr  # the child's exit code is the caller's
        lines = done.stdout.splitlines()
        me, group = map(int, lines[0].split()[1:])  # "caller <pid> <pgid>"
        child = json.loads(lines[1])  # the child wrote to the caller's stdout
        if child["torch"] or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert child["ppid"] == server and child["pid"] != me
    assert child["pgid"] == group != os.getpgid(server)  # a kill of the caller's group reaches it
    assert child["cwd"] == str(tmp_path) and child["argv"][1:] == ["report", "--flag"]
    assert child["marker"] == str(tmp_path) and child["stage"] == "evaluate@Y"
    assert child["ours"] == []  # this checkout's code is imported afresh in every child
    assert child["torch"]  # what the server preloaded, inherited


def test_another_environment_is_not_served(warm):
    caller, _, _ = warm
    assert caller("report", env={"WARM_MARKER": "other"}).returncode == 99


@pytest.mark.parametrize("sig, session", [(signal.SIGKILL, False), (signal.SIGTERM, False),
                                          (signal.SIGKILL, True), (signal.SIGINT, True)])
def test_a_child_dies_with_its_caller_and_gets_its_signals(warm, tmp_path, sig, session):
    """SIGKILL: the child kills itself; SIGTERM, and SIGINT when the caller is in another session
    (the child cannot join its group), are passed on and the caller exits as the child did."""
    caller, _, env = warm
    marker = tmp_path / f"child-{sig}"
    proc = subprocess.Popen([sys.executable, str(tmp_path / "caller.py"), "sleep", str(marker)], env=env,
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=session)
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    child = int(marker.read_text())
    assert (os.getpgid(child) == os.getpgid(proc.pid)) is not session  # in its group unless in another session
    (os.killpg if session and sig == signal.SIGKILL else os.kill)(proc.pid, sig)  # the whole group, as kill_suite does
    assert proc.wait(30) == -sig
    deadline = time.monotonic() + 10
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]
