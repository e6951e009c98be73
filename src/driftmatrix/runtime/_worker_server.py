"""Imported last by the local worker server (``executor.start_worker_server``), after torch and
the stage's modules. Freezes what the server holds, so that forked workers share those pages
instead of copying them as their collector walks them, and makes the server's own exit (when the
stage process ends) immediate: it writes nothing, so tearing down torch's module graph there
(about 1 s of CPU, while the next stage starts) buys nothing.

On Linux the server and each worker also die with their parent: a stage process that is killed
on its own (``kill PID``, the OOM killer) takes them with it, where they would otherwise finish
the units in flight, minutes of work that nobody collects. The kernel signals a child when the
thread that started it ends; the stage starts the server from its main thread (at stage start
and in ``executor._pool_map``), and the server is single-threaded."""

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
atexit.register(os._exit, 0)
