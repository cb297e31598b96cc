"""MemberConnection supervision without a cluster: failures become health, reload is
event-driven, stop never hangs.

Covers: a loader that cannot produce a kubeconfig gives Ready=False with its reason and a
kept first-loss time while retries continue; ``reload()`` ends a long backoff at once; a
kubeconfig the client library rejects is KubeconfigInvalid; ``stop()`` returns promptly
from any state (tenacity must not swallow the cancellation); ``client`` raises NotConnected;
pod events reach the capacity, then the reservations.
Not covered: sessions against a real apiserver (tests/integration/test_fleet_*.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from dispatcher.aiotasks import Pulse
from dispatcher.fleet.connection import MemberConnection, NotConnected
from dispatcher.fleet.kubeconfigs import KubeconfigProblem
from dispatcher.fleet.members import MemberSpec
from dispatcher.fleet.reservations import HUB_UID_LABEL, Reservation
from dispatcher.fleet.settings import FleetSettings
from dispatcher.kube import watch

from .objects import node, pod

SLOW_RETRY = FleetSettings(reconnect_initial_s=30.0, reconnect_max_s=60.0)


class Loader:
    """Counts calls; raises the given problem, or returns the given kubeconfig."""

    def __init__(self, *, problem: KubeconfigProblem | None = None,
                 kubeconfig: dict[str, Any] | None = None, block: bool = False) -> None:
        self.block = block
        self.calls = 0
        self.problem = problem
        self.kubeconfig = kubeconfig or {}
        self.called = asyncio.Event()

    async def __call__(self) -> tuple[dict[str, Any], str]:
        self.calls += 1
        self.called.set()
        if self.block:
            await asyncio.Event().wait()  # like a request that never answers
        if self.problem is not None:
            raise self.problem
        return self.kubeconfig, str(self.calls)


def connection(loader: Loader, settings: FleetSettings = SLOW_RETRY, *,
               pulse: Pulse | None = None) -> MemberConnection:
    return MemberConnection(spec=MemberSpec(name="m", path="/unused"), load=loader,
                            settings=settings, clock=lambda: datetime(2026, 1, 1, tzinfo=UTC),
                            kinds=(), on_change=lambda _: (pulse or Pulse()).bump())


async def wait_calls(loader: Loader, count: int) -> None:
    async with asyncio.timeout(5):
        while loader.calls < count:
            loader.called.clear()
            await loader.called.wait()


async def test_secret_missing_becomes_health_and_reload_retries_at_once() -> None:
    loader = Loader(problem=KubeconfigProblem("Secret x/y not found", reason="SecretMissing"))
    conn = connection(loader)
    conn.start()
    try:
        await wait_calls(loader, 1)
        await asyncio.sleep(0)
        assert conn.health.reason == "SecretMissing"
        assert conn.health.ready is False
        assert conn.health.reachable is None
        first_loss = conn.health.first_loss
        assert first_loss is not None
        with pytest.raises(NotConnected, match="SecretMissing"):
            _ = conn.client
        conn.reload()  # the backoff is 30 s: only the reload can cause a second call now
        await wait_calls(loader, 2)
        assert conn.health.first_loss == first_loss
    finally:
        async with asyncio.timeout(5):
            await conn.stop()


async def test_unusable_kubeconfig_is_kubeconfig_invalid() -> None:
    loader = Loader(kubeconfig={"apiVersion": "v1", "kind": "Config",
                                "current-context": "missing", "contexts": []})
    pulse = Pulse()
    conn = connection(loader, pulse=pulse)
    conn.start()
    try:
        async with asyncio.timeout(5):
            seen = 0
            while conn.health.reason != "KubeconfigInvalid":
                seen = await pulse.wait(seen)
        assert conn.credentials_version == "1"
    finally:
        async with asyncio.timeout(5):
            await conn.stop()


async def test_stop_is_prompt_while_retrying_fast() -> None:
    loader = Loader(problem=KubeconfigProblem("bad", reason="KubeconfigInvalid"))
    conn = connection(loader, FleetSettings(reconnect_initial_s=0.001, reconnect_max_s=0.01))
    before = set(asyncio.all_tasks())
    conn.start()
    await wait_calls(loader, 3)
    async with asyncio.timeout(5):
        await conn.stop()
    calls = loader.calls
    # Nothing runs after stop: no task of the connection is left to call the loader.
    assert {t for t in asyncio.all_tasks() if not t.done()} - before == set()
    await asyncio.sleep(0)
    assert loader.calls == calls


async def test_stop_is_prompt_inside_an_attempt() -> None:
    """Cancellation inside an attempt must end the supervisor, not count as a failure."""
    loader = Loader(block=True)
    conn = connection(loader, FleetSettings(reconnect_initial_s=0.001, reconnect_max_s=0.01))
    conn.start()
    await wait_calls(loader, 1)
    async with asyncio.timeout(5):
        await conn.stop()
    assert loader.calls == 1


async def test_insecure_kubeconfig_warns_and_closed_port_is_connection_refused() -> None:
    """TLS follows the kubeconfig; skipping verification is allowed but logged."""
    from structlog.testing import capture_logs

    from dispatcher.devfleet.controlplane import free_port

    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {
                      "server": f"https://127.0.0.1:{free_port()}",
                      "insecure-skip-tls-verify": True}}],
                  "users": [{"name": "u", "user": {"token": "sekret-unit-token"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    pulse = Pulse()
    conn = connection(Loader(kubeconfig=kubeconfig), pulse=pulse,
                      settings=dataclasses.replace(SLOW_RETRY, allow_insecure_tls=True))
    with capture_logs() as logs:
        conn.start()
        try:
            async with asyncio.timeout(10):
                seen = 0
                while conn.health.reason != "ConnectionRefused":
                    seen = await pulse.wait(seen)
        finally:
            await conn.stop()
    assert conn.health.reachable is False
    assert [e["event"] for e in logs][:2] == ["member.tls_unverified", "member.unreachable"]
    assert "sekret-unit-token" not in repr(logs)


def test_pod_events_move_gpus_from_reserved_to_used_in_one_step() -> None:
    """The session's pod handlers feed the capacity, then the reservations: a bound pod of
    a reserved workload is counted once (used), a relisted one is not taken twice."""
    conn = connection(Loader())
    conn.capacity.upsert_node(node("n1", 8))
    conn.reservations.add(Reservation(workload_uid="w1", member="m", nodes=(("n1", 8),),
                                      expires_at=1e12))
    bound = pod("p1", 4, node_name="n1")
    bound["metadata"]["labels"] = {HUB_UID_LABEL: "w1"}
    conn._apply("pods", watch.Changed(type="ADDED", object=bound))
    summary = conn.capacity.summary()
    assert (summary.used, summary.reserved, summary.free) == (4, 4, 0)
    conn._relist("pods", [bound])
    summary = conn.capacity.summary()
    assert (summary.used, summary.reserved, summary.free) == (4, 4, 0)
    conn._apply("pods", watch.Changed(type="DELETED", object=bound))
    assert (conn.capacity.summary().used, conn.capacity.free) == (0, 4)


def test_a_member_missing_catalog_kinds_is_discovered_again_within_seconds() -> None:
    """An apiserver that just restarted answers before it serves its CRDs: the kinds found
    missing then are looked for again after 2, 4, 8 ... s (reset when the set changes),
    never later than the discovery interval; a member serving them all waits the interval."""
    from dispatcher.fleet.connection import FIRST_REDISCOVERY_S, rediscovery_wait

    waits, soon = [], FIRST_REDISCOVERY_S
    for _ in range(10):
        waits.append(rediscovery_wait(soon, interval=300.0, missing=True))
        soon *= 2  # nothing changed
    assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0, 300.0]
    assert rediscovery_wait(FIRST_REDISCOVERY_S, interval=300.0, missing=False) == 300.0
    assert rediscovery_wait(FIRST_REDISCOVERY_S, interval=1.0, missing=True) == 1.0
