"""A private Ray (``runtime.address: null``) listens on 127.0.0.1 only, never on the machine's
own interface address."""

from __future__ import annotations

import ipaddress
import os

import psutil


def _listening(pids: set[int]) -> list[tuple[str, str, int]]:
    out = []
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.pid in pids:
            try:
                name = psutil.Process(conn.pid).name()
            except psutil.Error:
                name = "?"
            out.append((name, conn.laddr.ip, conn.laddr.port))
    return out


def _loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


def test_private_ray_listens_on_loopback_only(ray_cluster):
    @ray_cluster.remote
    def where() -> int:
        return os.getpid()

    worker = ray_cluster.get(where.remote())
    me = psutil.Process()
    pids = {me.pid, *(p.pid for p in me.children(recursive=True))}
    assert worker in pids  # the processes below are this Ray's own
    sockets = _listening(pids)
    names = {name for name, _, _ in sockets}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), sockets
    assert [s for s in sockets if not _loopback(s[1])] == []
    assert {n["NodeManagerAddress"] for n in ray_cluster.nodes()} == {"127.0.0.1"}
