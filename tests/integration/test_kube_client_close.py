"""KubeClient.close() against a real apiserver: no connection outlives it.

A watch released in the middle of its body closes its connection with a TLS shutdown that
aiohttp's session close does not wait for; when the event loop ended right after (a CLI
command's ``asyncio.run``, a test), the socket was collected later as ``ResourceWarning:
unclosed transport`` (it failed the fleet-health tests once the per-request ``trust_env``
thread hops, which had hidden it, were gone). See dispatcher/kube/connections.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NODES

pytestmark = pytest.mark.integration


def _sockets_to(port: int) -> int:
    """How many of this process's open sockets are TCP connections to ``port``."""
    ours = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                ours.add(target[len("socket:["):-1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as lines:
            next(lines)
            for line in lines:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                if remote_port == port and fields[9] in ours:
                    count += 1
    return count


async def _watch_one_event_then_close(kubeconfig: dict[str, Any], port: int) -> int:
    """Open a watch, read its first event, drop it mid-stream, close the client; return the
    sockets still connected to the apiserver at the moment close() returned."""
    client = await KubeClient.from_kubeconfig(kubeconfig, name="member-1")
    try:
        # Two connections: one idle in the pool (a finished GET), one cut mid-body (the watch).
        await client.request("GET", "/version")
        stream = client.stream(NODES.collection(), query=[("watch", "true")], read_timeout=30)
        async with contextlib.aclosing(stream):
            async for _ in stream:  # without a resourceVersion: ADDED for every node
                break
    finally:
        await client.close()
    return _sockets_to(port)


def test_close_returns_once_every_connection_is_closed(dev_fleet: FleetState) -> None:
    """Each round runs in its own event loop, closed right after the client (as a CLI
    command does): no socket to the apiserver is left when close() returns, and none is
    collected unclosed afterwards. Before the fix about half the rounds left one."""
    cluster = dev_fleet.cluster("member-1")
    kubeconfig = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    port = int(cluster.server.rsplit(":", 1)[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        left = []
        for _ in range(8):
            left.append(asyncio.run(_watch_one_event_then_close(kubeconfig, port)))
            gc.collect()
    assert left == [0] * 8
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []
