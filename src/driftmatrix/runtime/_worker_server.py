"""Imported last by the local worker server (``executor.start_worker_server``).

Freezes what the server holds, so forked workers share those pages instead of copying them (and
collections never walk them), resumes the collection ``_worker_start`` paused, and makes its exit
immediate (it writes nothing). On Linux the server and each worker die with their parent, so a
killed stage does not leave them computing units nobody collects; the kernel signals a child when
the thread that started it ends, so the server is started from the main thread."""

import atexit
import gc
import os
import signal
import sys


def _die_with_parent(parent: int) -> None:
    """SIGKILL this process when ``parent`` (its parent now) ends; at once if it already has."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent ended before the request was made
        os._exit(1)


if sys.platform == "linux":
    _die_with_parent(os.getppid())
    os.register_at_fork(after_in_child=lambda server=os.getpid(): _die_with_parent(server))
gc.freeze()
gc.enable()
atexit.register(os._exit, 0)
