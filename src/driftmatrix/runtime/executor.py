"""Run a stage's work items on this machine (``local``) or as Ray tasks (``ray``), one interface.

A stage hands :meth:`Executor.map` a top-level ``fn(context, item)``, a picklable *recipe* whose
``build()`` makes the heavy context, and its items; workers compute and return, the driver alone
writes. ``runtime:`` in ``params.yaml`` picks the executor (docs/scaling.md). Every executor runs a
unit with :func:`unit_threads` torch threads, since a CPU result depends on the thread count.

Fault-test hook: when ``DRIFTMATRIX_KILL_ONCE`` names a file that does not exist yet, the first Ray
worker to create it kills its own process part-way through its item, so Ray's retry is exercised."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import math
import multiprocessing as mp
import os
import pickle
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

from driftmatrix.config import ConfigError, Resources, RuntimeConfig, unit_threads

log = logging.getLogger(__name__)

KILL_ENV = "DRIFTMATRIX_KILL_ONCE"
KILL_AFTER_S = 0.05  # the hook's worker dies this long into its item (or at its end, if sooner)


@contextlib.contextmanager
def torch_threads(n: int):
    """Run the block with ``n`` torch threads, then restore the process's setting."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# glibc mallopt parameters: https://man7.org/linux/man-pages/man3/mallopt.3.html
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory() -> bool:
    """Let glibc keep the memory torch frees (once per process; False where not Linux/glibc): otherwise
    every training step page-faults its activations anew. Numbers are unchanged."""
    if getattr(keep_freed_memory, "done", None) is not None:
        return keep_freed_memory.done
    ok = False
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):  # not glibc (musl, ...): leave the allocator as it is
            libc = ctypes.CDLL("libc.so.6")
            ok = bool(libc.mallopt(_M_MMAP_THRESHOLD, 32 << 20)) and bool(libc.mallopt(_M_TRIM_THRESHOLD, 256 << 20)) \
                and bool(libc.mallopt(_M_TOP_PAD, 64 << 20))
    keep_freed_memory.done = ok
    return ok


# --- progress ----------------------------------------------------------------------------------
class Progress:
    """One display per stage: a tqdm bar on a terminal, periodic log lines with counts and ETA."""

    def __init__(self, label: str, total: int, *, enabled: bool = True, every: int | None = None,
                 seconds: float = 10.0) -> None:
        self.label, self.total, self.enabled = label, total, enabled
        self.every, self.seconds = every or max(1, total // 10), seconds
        self.start = self.last_log = time.monotonic()
        self.logged_at = self.done = 0
        self.bar = None
        if enabled:
            from tqdm import tqdm

            # disable=None: drawn on a terminal only; a log file gets the log lines instead
            self.bar = tqdm(total=total, desc=label, unit="unit", file=sys.stderr, disable=None,
                            dynamic_ncols=True)

    def eta(self) -> float | None:
        return (time.monotonic() - self.start) / self.done * (self.total - self.done) if self.done else None

    def update(self, done: int, running: int) -> None:
        step, self.done = done - self.done, done
        queued = max(self.total - done - running, 0)
        if self.bar is not None:
            self.bar.set_postfix_str(f"running {running}, queued {queued}", refresh=False)
            self.bar.update(step)
        now = time.monotonic()
        due = done == self.total or done - self.logged_at >= self.every or now - self.last_log >= self.seconds
        if self.enabled and due and (step or now - self.last_log >= self.seconds):
            eta = self.eta()
            log.info("%s: %d/%d done, %d running, %d queued, %.1f s elapsed%s", self.label, done, self.total,
                     running, queued, now - self.start, "" if eta is None else f", ETA {_duration(eta)}")
            self.last_log, self.logged_at = now, done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _duration(seconds: float) -> str:
    h, rest = divmod(int(round(seconds)), 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s" if m else f"{s}s"


# --- the interface ---------------------------------------------------------------------------
class Executor(Protocol):
    name: str

    def map(self, fn: Callable[[Any, Any], Any], recipe: Any, items: Iterable[Any], *,
            model: str | None = None, label: str = "train", context: Any = None) -> Iterator[tuple[Any, Any]]:
        """Yield ``(item, fn(recipe.build(), item))`` as each finishes (``context``: the driver's own)."""
        ...


def make_executor(cfg: RuntimeConfig | None = None, *, progress: bool = True) -> Executor:
    cfg = cfg or RuntimeConfig()
    return (RayExecutor if cfg.executor == "ray" else LocalExecutor)(cfg, progress=progress)


def _label(label: str, model: str | None) -> str:
    return f"{label} {model}" if model else label


class LocalExecutor:
    """Runs items in this process on the driver's context, or in workers that build it once each."""

    name = "local"

    def __init__(self, cfg: RuntimeConfig | None = None, *, progress: bool = True) -> None:
        self.cfg, self.progress = cfg or RuntimeConfig(), progress

    def workers(self, model: str | None, n_items: int, context: Any = None) -> int:
        """Worker processes for ``n_items`` units of ``model`` (0: run them in this process)."""
        on_gpu = getattr(getattr(context, "device", None), "type", "cpu") != "cpu"
        n = local_workers(self.cfg, model)
        return 0 if n <= 1 or n_items <= 1 or on_gpu else min(n, n_items)

    def map(self, fn, recipe, items, *, model=None, label="train", context=None):
        items = list(items)
        if not items:
            return
        workers = self.workers(model, len(items), context)
        bar = Progress(_label(label, model), len(items), enabled=self.progress)
        try:
            if workers:
                yield from _pool_map(fn, recipe, items, workers, unit_threads(self.cfg.resources_for(model)), bar)
                return
            keep_freed_memory()
            with torch_threads(unit_threads(self.cfg.resources_for(model))):
                context = recipe.build() if context is None else context
                for n, item in enumerate(items):
                    bar.update(n, 1)
                    result = fn(context, item)
                    bar.update(n + 1, 0)
                    yield item, result
        finally:
            bar.close()


def machine_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def local_slots(cfg: RuntimeConfig, res: Resources) -> int:
    """Units the local executor runs at once: ``workers``, or for ``auto`` CPUs over ``num_cpus``."""
    if cfg.workers != "auto":
        return int(cfg.workers)
    return max(1, math.floor(machine_cpus() / res.num_cpus + 1e-9)) if res.num_cpus > 0 else machine_cpus()


def local_workers(cfg: RuntimeConfig, model: str | None) -> int:
    """Worker processes for ``model``'s units: its slots, 1 for GPU units."""
    res = cfg.resources_for(model)
    return 1 if res.num_gpus > 0 else local_slots(cfg, res)


def start_worker_server(cfg: RuntimeConfig, model: str | None = None, preload: Iterable[str] = ()) -> bool:
    """Start the forkserver local workers fork from, if ``model``'s units run in workers (whether it
    did): it imports torch and ``preload`` at start-up, and, computing nothing, is safe to fork
    (forking a process whose OpenMP pool has run can hang the child)."""
    from multiprocessing import forkserver

    if cfg.executor != "local" or local_workers(cfg, model) <= 1 \
            or _pool_context().get_start_method() != "forkserver":
        return False
    mp.set_forkserver_preload(server_preload(preload))
    forkserver.ensure_running()
    return True


def server_preload(preload: Iterable[str] = ()) -> list[str]:
    """What the worker server imports before it forks a worker: torch, this module and ``preload``,
    with collection paused around them (``_worker_start``, ``_worker_server``)."""
    return ["driftmatrix.runtime._worker_start", "torch", __name__, *preload, "driftmatrix.runtime._worker_server"]


def _pool_context():
    """Forkserver where the OS has it (Linux), else spawn."""
    return mp.get_context("forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn")


def _pool_map(fn, recipe, items: list, workers: int, threads: int, bar: Progress) -> Iterator[tuple[Any, Any]]:
    """``items`` through ``workers`` processes, yielding ``(item, result)`` as each finishes; a dead
    worker fails the map naming the units in flight. The pool is always shut down waiting for its
    manager thread, which would otherwise race the interpreter's exit hook (OSError: Bad file descriptor)."""
    pool = ProcessPoolExecutor(workers, mp_context=_pool_context())
    key = recipe_key(recipe)
    pending = {pool.submit(run_item, fn, recipe, key, item, None, threads): item for item in items}
    done = 0
    try:
        bar.update(0, min(workers, len(items)))
        while pending:
            finished, _ = wait(pending, timeout=bar.seconds, return_when=FIRST_COMPLETED)
            for future in finished:
                item = pending[future]
                try:
                    result = future.result()
                except BrokenProcessPool as exc:  # the pool is gone: the dead worker's unit is among the
                    left = list(pending.values())  # first unfinished ones (units start in item order)
                    raise RuntimeError(f"{bar.label}: a worker process died (killed, or out of memory?); "
                                       f"{len(left)} units unfinished, its unit among the first "
                                       f"{min(len(left), workers + 1)} in flight: {left[:workers + 1]!r}") from exc
                del pending[future]
                done += 1
                bar.update(done, min(workers, len(pending)))
                yield item, result
            if not finished:  # a heartbeat line while long units run
                bar.update(done, min(workers, len(pending)))
    finally:
        if pending:  # stopped early: the units still running are dropped with their workers
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.terminate()
        pool.shutdown(wait=True, cancel_futures=True)


# --- Ray ---------------------------------------------------------------------------------------
LOOPBACK = "127.0.0.1"
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def start_ray(cfg: RuntimeConfig, *, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """``ray.init`` once per process: join ``cfg.address``, or for ``null`` start a private loopback Ray."""
    if cfg.address is None:
        # with Ray's "this machine only" switch off, every Ray process listens on 127.0.0.1 (read at import)
        os.environ[LOCAL_ONLY_ENV] = "0"
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                                  address=cfg.address)
    if cfg.address is None:  # "local", not None: None would join any Ray already running on this machine
        kwargs.update(address="local", num_cpus=num_cpus, num_gpus=num_gpus)
    if cfg.address is None or joins_loopback(cfg.address):
        # the switch also set here in case Ray was imported before; a loopback cluster's driver keeps to
        # 127.0.0.1 too, the address its nodes use
        from ray._private import ray_constants

        os.environ[LOCAL_ONLY_ENV] = "0"
        ray_constants.ENABLE_RAY_CLUSTER = False
        kwargs.update(_node_ip_address=LOOPBACK)
    started = time.perf_counter()
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError) as exc:
        if cfg.address is None:
            raise
        raise RayUnreachable(join_error(cfg.address, exc)) from exc
    log.info("ray: %s in %.1f s, resources %s", "started" if cfg.address is None else f"joined {cfg.address}",
             time.perf_counter() - started, _brief(ray.cluster_resources()))


class RayUnreachable(ConfigError):
    """The Ray at ``runtime.address`` (``auto``: ``RAY_ADDRESS``) could not be joined: one line."""


def join_error(address: str, exc: BaseException) -> str:
    """Why the Ray at ``address`` could not be joined, read from Ray's error chain, and what to change."""
    causes, cur = [], exc
    while cur is not None and len(causes) < 10:
        causes.append(" ".join(str(cur).split()))
        cur = cur.__cause__ or cur.__context__
    text = " ".join(causes)
    where = f"Ray at {os.environ.get('RAY_ADDRESS') or 'auto'} (runtime.address auto, RAY_ADDRESS)" \
        if address == "auto" else f"Ray at {address} (runtime.address)"
    if joins_loopback(address) and "No node info found matching" in text:
        return (f"{where} cannot be joined: no node of it announces 127.0.0.1 (`ray start --head "
                f"--node-ip-address=127.0.0.1` announces the machine's interface address unless "
                f"{LOCAL_ONLY_ENV}=0): start the nodes as docs/scaling.md \"Several nodes on one machine\" shows "
                "(python -m driftmatrix.runtime.cluster), or join the address `ray status` prints")
    return (f"{where} cannot be joined ({causes[-1][:300]}): start the head and nodes as docs/scaling.md \"A Ray "
            "cluster\" shows, or point runtime.address / RAY_ADDRESS at its head (null: a private Ray here)")


def joins_loopback(address: str | None) -> bool:
    """Whether ``address`` (``auto``: ``RAY_ADDRESS``) names a Ray on 127.0.0.1 / localhost."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS") or ""
    if not address or address.startswith("ray://"):
        return False
    host = address.rpartition(":")[0].strip("[]") if ":" in address else address
    return host in ("127.0.0.1", "localhost", "::1")


def _brief(resources: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in resources.items() if k in ("CPU", "GPU")}


def recipe_key(recipe: Any) -> Any:
    """The worker-side cache key: the recipe itself when hashable, else a digest of its pickle."""
    try:
        hash(recipe)
        return recipe
    except TypeError:
        return hashlib.sha256(pickle.dumps(recipe)).hexdigest()


_CONTEXTS: "OrderedDict[Any, Any]" = OrderedDict()
_CONTEXT_CACHE = 2  # contexts kept per worker process; the least recently used goes first


def _context(recipe: Any, key: Any) -> Any:
    """This worker process's context for ``recipe``: built on first use, then reused."""
    if key in _CONTEXTS:
        _CONTEXTS.move_to_end(key)
        return _CONTEXTS[key]
    _CONTEXTS[key] = context = recipe.build()
    while len(_CONTEXTS) > _CONTEXT_CACHE:
        _CONTEXTS.popitem(last=False)
    return context


def _claim(path: str | None) -> bool:
    """True for exactly one caller per path: the one whose atomic create of ``path`` succeeded."""
    if not path:
        return False
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, f"{os.getpid()}\n".encode())
    os.close(fd)
    return True


def run_item(fn: Callable[[Any, Any], Any], recipe: Any, key: Any, item: Any, kill_path: str | None = None,
             threads: int = 1) -> Any:
    """The body of a Ray task or local worker item: thread count, cached context, then ``fn``."""
    import torch

    torch.set_num_threads(threads)  # per item: a reused worker may have run another model's units
    keep_freed_memory()
    context = _context(recipe, key)
    if _claim(kill_path):  # fault-test hook (module docstring): die part-way through this item
        threading.Timer(KILL_AFTER_S, os._exit, (1,)).start()
        fn(context, item)
        os._exit(1)
    return fn(context, item)


def reuse_workers(num_gpus: float, gpus_per_node: float) -> bool:
    """Whether units may share worker processes: GPU units only where no node has more than one GPU,
    since CUDA binds a process to the first device Ray showed it."""
    return num_gpus <= 0 or gpus_per_node <= 1


class RayExecutor:
    """One Ray task per item with that model's resources and ``max_retries``; yields as they finish."""

    name = "ray"

    def __init__(self, cfg: RuntimeConfig, *, progress: bool = True) -> None:
        self.cfg, self.progress = cfg, progress

    def slots(self, res: Resources) -> int:
        """Units of this shape the cluster can run at once (for the running/queued display)."""
        import ray

        total = ray.cluster_resources()
        need = {"CPU": res.num_cpus, "GPU": res.num_gpus}
        fits = [math.floor(total.get(key, 0) / n + 1e-9) for key, n in need.items() if n > 0]
        return max(min(fits), 0) if fits else sys.maxsize

    def map(self, fn, recipe, items, *, model=None, label="train", context=None):
        import ray

        items = list(items)
        if not items:
            return
        start_ray(self.cfg)
        res = self.cfg.resources_for(model)
        slots = self.slots(res)
        if slots == 0:
            msg = (f"params.yaml: runtime: a {model or label} unit asks for {res} but the Ray cluster has "
                   f"{_brief(ray.cluster_resources())}; lower runtime.num_cpus/num_gpus (or its override)")
            if self.cfg.address is None:
                raise ConfigError(msg)
            log.warning("%s (waiting for the cluster to grow)", msg)
            slots = 1
        most_gpus = max((n["Resources"].get("GPU", 0) for n in ray.nodes() if n.get("Alive")), default=0)
        if reuse_workers(res.num_gpus, most_gpus):
            remote = ray.remote(run_item)
        else:
            log.warning("%s: a node has %g GPUs, so every GPU unit runs in a fresh worker process "
                        "(exact device, no context cache)", _label(label, model), most_gpus)
            remote = ray.remote(max_calls=1)(run_item)
        task = remote.options(num_cpus=res.num_cpus, num_gpus=res.num_gpus, max_retries=self.cfg.max_retries,
                              name=_label(label, model))
        recipe_ref = ray.put(recipe)  # serialised once, fetched once per node
        key, kill, threads = recipe_key(recipe), os.environ.get(KILL_ENV) or None, unit_threads(res)
        # at most `window` in flight: every slot stays busy while the driver's wait stays cheap
        window = len(items) if slots >= sys.maxsize // 4 else max(4 * slots, 64)
        todo, pending = iter(items), {}

        def submit(k: int) -> None:
            for item in itertools.islice(todo, max(k, 0)):
                pending[task.remote(fn, recipe_ref, key, item, kill, threads)] = item

        bar = Progress(_label(label, model), len(items), enabled=self.progress)
        done = 0
        try:
            submit(window)
            bar.update(0, min(len(pending), slots))
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=bar.seconds)
                if ready:  # and every other unit that finished meanwhile
                    ready, _ = ray.wait(list(pending), num_returns=len(pending), timeout=0)
                for ref in ready:
                    result = ray.get(ref)  # a unit's own error is raised here (not retried)
                    item = pending.pop(ref)
                    done += 1
                    bar.update(done, min(len(items) - done, slots))
                    yield item, result
                if not ready:  # a heartbeat line while long units run
                    bar.update(done, min(len(items) - done, slots))
                submit(window - len(pending))
        finally:
            # Units still in flight are dropped, not cancelled: ray.cancel racing a completing task
            # aborts the driver (ray-project/ray PR 54798); workers write nothing, so nothing is lost.
            pending.clear()
            bar.close()
