"""Stage processes and the local worker server import torch, MLflow and great-expectations with
cyclic garbage collection paused, then freeze what they loaded and collect as usual."""

import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def python(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": SRC, "PATH": ""})
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_a_command_pauses_collection_then_freezes_and_resumes():
    assert python(
        "import gc, os, time\n"
        "from driftmatrix import cli\n"
        "cli.pause_gc_while_importing(0.3)\n"
        "cli.pause_gc_while_importing(0.3)\n"  # a second call starts no second timer
        "print(gc.isenabled(), gc.get_freeze_count() == 0, flush=True)\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print(gc.isenabled(), flush=True); os._exit(0)\n"  # a forked child collects
        "os.waitpid(pid, 0)\n"
        "time.sleep(1.0)\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 0)\n"
    ) == ["False", "True", "True", "True", "True"]


def test_the_worker_server_collects_again_once_its_imports_are_done():
    assert python(
        "import gc\n"
        "import driftmatrix.runtime._worker_start\n"
        "paused = not gc.isenabled()\n"
        "import driftmatrix.runtime._worker_server\n"
        "print(paused, gc.isenabled(), gc.get_freeze_count() > 0, flush=True)\n"
    ) == ["True", "True", "True"]
