"""Imported first by the local worker server (``executor.start_worker_server``): no cyclic garbage
collection while it imports torch and the stage's modules, objects that live as long as the server
(collecting as they load costs 0.3-0.5 s); ``_worker_server``, imported last, freezes them and
resumes collection."""

import gc

gc.disable()
