"""Stopping is bounded and leaves nothing running, whatever the members are doing.

Covers: a fleet whose members hang (an apiserver that accepts connections and never
answers) stops within a bound and leaves no task of its own behind; a connection whose
attempt turns the cancellation into an ordinary error (as aiohttp's request timeout may:
TimeoutError instead of CancelledError), which its retry loop then treats as one more failed
attempt, still stops. Not covered: stopping against healthy real apiservers
(tests/integration/test_fleet_health.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.fleet.connection import MemberConnection
from dispatcher.fleet.kubeconfigs import KubeconfigProblem
from dispatcher.fleet.members import MemberSpec
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember

STOP_BOUND_S = 3.0


def _others() -> set[asyncio.Task[Any]]:
    current = asyncio.current_task()
    return {t for t in asyncio.all_tasks() if t is not current and not t.done()}


class SilentServer:
    """A port that accepts TCP connections and never says a word (a hung apiserver: the
    TLS handshake never completes); counts the connections it holds."""

    def __init__(self) -> None:
        self.port = 0
        self.held: list[asyncio.StreamWriter] = []
        self._accepted = asyncio.Condition()

    async def hold(self, _: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with self._accepted:
            self.held.append(writer)
            self._accepted.notify_all()

    async def holding(self, count: int) -> None:
        """Return once ``count`` connections are held (each a client stuck in its request)."""
        async with asyncio.timeout(10), self._accepted:
            await self._accepted.wait_for(lambda: len(self.held) >= count)


@pytest.fixture
async def silent_server() -> AsyncIterator[SilentServer]:
    silent = SilentServer()
    server = await asyncio.start_server(silent.hold, "127.0.0.1", 0)
    silent.port = int(server.sockets[0].getsockname()[1])
    yield silent
    for writer in silent.held:
        writer.close()
    server.close()
    await server.wait_closed()


def _kubeconfig(path: Path, port: int) -> str:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return str(path)


async def test_fleet_of_hanging_members_stops_within_a_bound(
        tmp_path: Path, silent_server: SilentServer) -> None:
    before = _others()
    members = tuple(StaticMember(name=f"m{i}", kubeconfig=_kubeconfig(
        tmp_path / f"m{i}.yaml", silent_server.port)) for i in range(8))
    fleet = Fleet(hub=None, settings=FleetSettings(
        static_members=members, request_timeout_s=60.0, probe_interval_s=60.0))
    await fleet.start()
    await silent_server.holding(len(members))  # every member is inside a request now
    assert all(not fleet.health(m.name).ready for m in members)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with asyncio.timeout(STOP_BOUND_S):
        await fleet.stop()
    assert loop.time() - started < STOP_BOUND_S
    assert _others() - before == set()


async def test_a_swallowed_cancellation_does_not_keep_a_connection_running() -> None:
    swallowed, attempting = asyncio.Event(), asyncio.Event()

    async def load() -> tuple[dict[str, Any], str]:
        attempting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            # What aiohttp's timer does when the cancel lands as it fires.
            swallowed.set()
            raise KubeconfigProblem("timed out", reason="Unreachable") from None
        raise AssertionError("unreachable")

    conn = MemberConnection(spec=MemberSpec(name="m", path="/unused"), load=load,
                            settings=FleetSettings(reconnect_initial_s=0.05,
                                                   reconnect_max_s=0.05),
                            clock=lambda: datetime(2026, 1, 1, tzinfo=UTC), kinds=(),
                            on_change=lambda _: None)
    before = _others()
    conn.start()
    async with asyncio.timeout(STOP_BOUND_S):
        await attempting.wait()  # the stop lands inside the attempt
        await conn.stop()
    assert swallowed.is_set()
    assert _others() - before == set()
