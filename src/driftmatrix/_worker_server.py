"""Imported last by the local worker server (``executor.start_worker_server``), after torch and
the stage's modules. Freezes what the server holds, so that forked workers share those pages
instead of copying them as their collector walks them, and makes the server's own exit (when the
stage process ends) immediate: it writes nothing, so tearing down torch's module graph there
(about 1 s of CPU, while the next stage starts) buys nothing."""

import atexit
import gc
import os

gc.freeze()
atexit.register(os._exit, 0)
