"""Every request of a KubeClient is reported once to the process-wide request observer.

Covers: a success and an error status (a real HTTP server on loopback), a watch reported
as WATCH, a connection refused as status 0, nothing reported once the observer is removed,
and the observer's per-request cost staying in microseconds (the controller's metrics
one). Not covered: the metrics of a running controller (tests/unit/control/test_metrics.py,
tests/e2e/test_dashboards.py).
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from dispatcher.control.observe import Metrics
from dispatcher.kube.client import KubeClient, observe_requests
from dispatcher.kube.errors import NotFound, Unreachable


def _kubeconfig(server: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


@pytest.fixture
async def server() -> AsyncIterator[str]:
    async def ok(_: web.Request) -> web.Response:
        return web.json_response({"kind": "NodeList", "items": []})

    async def missing(_: web.Request) -> web.Response:
        return web.json_response({"kind": "Status", "reason": "NotFound",
                                  "message": "nodes \"x\" not found"}, status=404)

    async def watch(_: web.Request) -> web.Response:
        return web.Response(text='{"type":"BOOKMARK","object":{}}\n')

    app = web.Application()
    app.router.add_get("/api/v1/nodes", ok)
    app.router.add_get("/api/v1/nodes/x", missing)
    app.router.add_get("/api/v1/pods", watch)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


async def test_each_request_is_reported_with_its_verb_and_status(server: str) -> None:
    seen: list[tuple[str, str, int]] = []
    previous = observe_requests(lambda client, verb, status, seconds: seen.append(
        (client.name, verb, status)))
    try:
        async with await KubeClient.from_kubeconfig(_kubeconfig(server), name="m1") as client:
            await client.request("GET", "/api/v1/nodes")
            with pytest.raises(NotFound):
                await client.request("GET", "/api/v1/nodes/x")
            lines = [line async for line in client.stream(
                "/api/v1/pods", query=[("watch", "1")], read_timeout=5)]
            assert lines
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            closed = free.getsockname()[1]
        async with await KubeClient.from_kubeconfig(
                _kubeconfig(f"http://127.0.0.1:{closed}"), name="m2") as refused:
            with pytest.raises(Unreachable):
                await refused.request("GET", "/version", request_timeout=2)
    finally:
        observe_requests(previous)
    assert seen == [("m1", "GET", 200), ("m1", "GET", 404), ("m1", "WATCH", 200),
                    ("m2", "GET", 0)]


async def test_nothing_is_reported_without_an_observer(server: str) -> None:
    seen: list[object] = []
    previous = observe_requests(lambda *args: seen.append(args))
    observe_requests(None)
    try:
        async with await KubeClient.from_kubeconfig(_kubeconfig(server), name="m") as client:
            await client.request("GET", "/api/v1/nodes")
    finally:
        observe_requests(previous)
    assert seen == []


def test_the_metrics_observer_costs_microseconds_per_request() -> None:
    """The controller's observer on a warm label set: a request costs ~1 ms of CPU
    (docs/architecture.md), so this must stay far below that (measured ~2-4 us)."""
    class Client:
        name = "member-1"

    metrics = Metrics.create()
    hub, member = Client(), Client()
    observe = metrics.request_observer(hub)
    rounds = 20_000
    started = time.perf_counter()
    for i in range(rounds):
        observe(member if i % 2 else hub, "GET", 200, 0.004)
    per_call = (time.perf_counter() - started) / rounds
    assert per_call < 50e-6, f"{per_call * 1e6:.1f} us per request"
