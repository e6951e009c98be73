"""A real multi-node Ray cluster on 127.0.0.1 (tests, benchmarks, trying a cluster recipe out).

:class:`LocalRayCluster` gives each node its own CPUs and custom resource, and the cluster its own temp
folder and auth token; it stops exactly its own processes (``ray stop`` would stop every Ray of the user)
and can kill one node mid-stage. Ray's "this machine only" switch makes ``ray start --address`` refuse a
second node, so nodes start through ``python -m driftmatrix.runtime.cluster start ...``: ``ray start``
with that refusal lifted. Real machines use plain ``ray start`` (docs/scaling.md)."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping, Sequence

LOOPBACK = "127.0.0.1"
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def ray_bin() -> str:
    """The ``ray`` command of this Python's environment."""
    here = Path(sys.executable).parent / "ray"
    return str(here) if here.exists() else "ray"


@dataclass
class Node:
    """One Ray node of a :class:`LocalRayCluster`: its resource name and the processes it started."""

    name: str
    pids: set[int] = field(default_factory=set)
    raylet: int | None = None


class LocalRayCluster:
    """A Ray head and ``nodes`` more nodes on 127.0.0.1, ``cpus`` CPUs each (see module doc)."""

    def __init__(self, cpus: int = 1, *, token: bool = True, health_check_ms: int = 1000,
                 extra_env: Mapping[str, str] | None = None) -> None:
        # a short folder: Ray's unix sockets live below it and a socket path has at most 107 bytes
        self.temp = Path(tempfile.mkdtemp(prefix="dmray", dir="/tmp"))
        self.cpus, self.port = cpus, free_port()
        self.address = f"{LOOPBACK}:{self.port}"
        self.nodes: dict[str, Node] = {}
        self.token_path = self.temp / "auth_token"
        self._env = {LOCAL_ONLY_ENV: "0", "RAY_USAGE_STATS_ENABLED": "0", **dict(extra_env or {}),
                     # a lost node is declared dead after ~3 missed checks instead of ~15 s
                     "RAY_health_check_period_ms": str(health_check_ms),
                     "RAY_health_check_timeout_ms": str(health_check_ms),
                     "RAY_health_check_failure_threshold": "3"}
        if token:
            self.token_path.write_text(secrets.token_hex(32))
            self.token_path.chmod(0o600)
            self._env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(self.token_path))
        else:
            self._env["RAY_AUTH_MODE"] = "disabled"
        self._env.pop("RAY_AUTH_TOKEN", None)

    # --- what a driver needs ---------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """Variables a driver (a stage process) needs to join: address, token, loopback switch."""
        return {**self._env, "RAY_ADDRESS": self.address}

    @contextlib.contextmanager
    def joined(self) -> Iterator[None]:
        """This process's environment set to join the cluster for the block (restored after)."""
        saved = {k: os.environ.get(k) for k in (*self.env(), "RAY_AUTH_TOKEN")}
        os.environ.pop("RAY_AUTH_TOKEN", None)
        os.environ.update(self.env())
        try:
            yield
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    # --- nodes -------------------------------------------------------------------------------
    def _ours(self) -> set[int]:
        import psutil

        mark = str(self.temp)
        found = set()
        for p in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if any(mark in a for a in p.info["cmdline"] or ()):
                    found.add(p.pid)
        return found

    def _start(self, name: str, command: Sequence[str], timeout: float) -> Node:
        """Run ``command`` (a ``ray start``) with the options every node of ours shares; resource ``name``."""
        import psutil

        args = [*command, f"--node-ip-address={LOOPBACK}", f"--num-cpus={self.cpus}", "--num-gpus=0",
                "--object-store-memory=300000000", f"--resources={json.dumps({name: 1})}",
                f"--dashboard-agent-listen-port={free_port()}", "--disable-usage-stats"]
        before = self._ours()
        env = {**os.environ, **self._env}
        env.pop("RAY_AUTH_TOKEN", None)
        env.pop("RAY_ADDRESS", None)
        out = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"ray node {name} did not start (exit {out.returncode}): "
                               f"{(out.stderr or out.stdout).strip()[-2000:]}")
        node = Node(name, self._ours() - before)
        for pid in node.pids:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).name() == "raylet":
                    node.raylet = pid
        self.nodes[name] = node
        return node

    def start_head(self, timeout: float = 120) -> Node:
        return self._start("head", [ray_bin(), "start", "--head", f"--port={self.port}", f"--temp-dir={self.temp}",
                                    "--include-dashboard=false", f"--dashboard-port={free_port()}"], timeout)

    def add_node(self, name: str | None = None, timeout: float = 120) -> Node:
        """Another node (resource ``name``: default ``node<n>``) joined to the head."""
        name = name or f"node{len(self.nodes)}"
        node = self._start(name, [sys.executable, "-m", "driftmatrix.runtime.cluster", "start",
                                  f"--address={self.address}"], timeout)
        self.wait_for(lambda r: r.get(name, 0) >= 1, f"node {name} to join")
        return node

    def wait_for(self, ok, what: str, timeout: float = 60) -> None:
        """Wait until ``ok(alive resources)``, asking the GCS from a subprocess (we may not be a driver)."""
        deadline = time.monotonic() + timeout
        while True:
            if ok(self.alive_resources()):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout:.0f} s for {what}; resources {self.alive_resources()}")
            time.sleep(0.5)

    def alive_resources(self) -> dict[str, float]:
        code = ("import json, ray\n"
                "from ray.util.state import list_nodes\n"
                "ray.init(address=%r, logging_level='ERROR', log_to_driver=False, _node_ip_address='127.0.0.1')\n"
                "tot = {}\n"
                "for n in ray.nodes():\n"
                "    if n['Alive']:\n"
                "        for k, v in n['Resources'].items(): tot[k] = tot.get(k, 0) + v\n"
                "print(json.dumps(tot))\n") % self.address
        env = {**os.environ, **self.env()}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
        try:
            return json.loads(out.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {}

    def running_task(self, name: str, prefix: str = "ray::train") -> int | None:
        """A worker of node ``name`` running a task whose name starts with ``prefix`` (Ray sets a
        worker's process title to ``ray::<task name>`` while it runs one), or None."""
        import psutil

        for pid in self._descendants(self.nodes[name].raylet):  # its raylet's workers
            with contextlib.suppress(psutil.Error):
                title = " ".join(psutil.Process(pid).cmdline())
                if title.startswith(prefix):
                    return pid
        return None

    def kill_node(self, name: str) -> list[int]:
        """SIGKILL node ``name``'s raylet, its workers and agents, and its other processes at once."""
        node = self.nodes.pop(name)
        victims = set(node.pids) | set(self._descendants(node.raylet))
        self._signal(victims, signal.SIGKILL, timeout=10)
        return sorted(victims)

    @staticmethod
    def _signal(pids, sig: int, timeout: float) -> list:
        """Send ``sig`` to the live ``pids``, wait up to ``timeout`` s, return the processes still alive."""
        import psutil

        procs = []
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
        for p in procs:
            with contextlib.suppress(psutil.Error):
                p.send_signal(sig)
        return psutil.wait_procs(procs, timeout=timeout)[1]

    @staticmethod
    def _descendants(pid: int | None) -> list[int]:
        import psutil

        if pid is None:
            return []
        with contextlib.suppress(psutil.Error):
            return [c.pid for c in psutil.Process(pid).children(recursive=True)]
        return []

    def stop(self) -> None:
        """Stop this cluster's processes only (SIGTERM, then SIGKILL after 5 s) and remove its folder."""
        import shutil

        import psutil

        pids = self._ours()
        for node in self.nodes.values():
            pids |= node.pids
        for pid in list(pids):
            pids |= set(self._descendants(pid))
        alive = self._signal(pids, signal.SIGTERM, timeout=5)
        for p in alive:
            with contextlib.suppress(psutil.Error):
                p.kill()
        psutil.wait_procs(alive, timeout=5)
        self.nodes.clear()
        shutil.rmtree(self.temp, ignore_errors=True)

    def __enter__(self) -> "LocalRayCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _start_node(argv: Sequence[str]) -> None:
    """``ray start <argv>`` for a node on 127.0.0.1 beside others on this machine (module doc)."""
    os.environ[LOCAL_ONLY_ENV] = "0"  # every process the node starts keeps to loopback
    from ray._private import ray_constants, services
    from ray.scripts import scripts

    ray_constants.ENABLE_RAY_CLUSTER = True  # lifts `ray start`'s refusal to add a node ...
    keep = services.resolve_ip_for_localhost
    # ... which would also turn 127.0.0.1 into the interface address: keep loopback as given
    services.resolve_ip_for_localhost = lambda host: host if services.is_localhost(host) else keep(host)
    scripts.cli.main(args=["start", *argv], prog_name="ray")


if __name__ == "__main__":  # python -m driftmatrix.runtime.cluster start --address=127.0.0.1:<port> ...
    if len(sys.argv) < 2 or sys.argv[1] != "start":
        sys.exit("usage: python -m driftmatrix.runtime.cluster start <ray start options>")
    _start_node(sys.argv[2:])
