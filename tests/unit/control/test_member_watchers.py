"""The copy watchers' cost per fleet event: one member's events wake only that member's loop.

Covers: with many members, a burst of capacity changes (Pod events) on one member wakes no
member loop and builds no snapshot; a state change (client, health, served kinds) of one
member wakes that member's loop only; a catalog change wakes every loop once. Uses a
fake ``FleetView`` whose members serve no catalog kind, so no watch is opened. Not covered:
the copy watches themselves (integration tests).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dispatcher.aiotasks import Pulse
from dispatcher.control.caches import CopyCache
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core.decide import MemberHealth
from dispatcher.control.watchers import MemberWatchers
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.signals import Change, FleetSignals
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef
from dispatcher.placement.model import MemberSnapshot
from dispatcher.workloads.catalog import Catalog


class CountingFleet:
    """A ``FleetView`` over ``FleetSignals`` that counts what its readers ask for."""

    def __init__(self, names: list[str]) -> None:
        self.signals = FleetSignals()
        self.pulse = self.signals.any
        self.members_pulse = self.signals.members
        self._names = tuple(names)
        self._client: Any = object()
        self.calls: Counter[str] = Counter()

    def state_pulse(self, member: str) -> Pulse:
        return self.signals.state(member)

    def names(self) -> tuple[str, ...]:
        return self._names

    def snapshots(self) -> Sequence[MemberSnapshot]:
        self.calls["snapshots"] += len(self._names)
        return []

    def snapshot(self, member: str) -> MemberSnapshot | None:
        self.calls["snapshot"] += 1
        return None

    def resources(self, member: str) -> Mapping[tuple[str, str], ResourceRef] | None:
        self.calls[f"resources:{member}"] += 1
        return {}

    def kueue_workloads(self, member: str) -> ResourceRef | None:
        return None

    def client(self, member: str) -> KubeClient | None:
        return self._client  # type: ignore[no-any-return]

    def reservations(self, member: str) -> MemberReservations | None:
        return None

    def health(self, member: str) -> MemberHealth:
        return MemberHealth(reachable=True)

    def same_cluster(self, a: str, b: str) -> bool:
        return a == b

    def set_kinds(self, kinds: Sequence[tuple[str, str]]) -> None:
        pass


async def _turns(count: int = 20) -> None:
    """Let every ready task run ``count`` event-loop iterations: whatever an event causes has
    happened by then (a pulse wakes a member loop in 3), however loaded the machine is. No
    wall clock: a negative check ("nothing woke") needs the chance to fail, not a delay."""
    for _ in range(count):
        await asyncio.sleep(0)


async def _until(check: Callable[[], bool]) -> None:
    """Yield to the loop until ``check()`` holds (5 s: a functional bound, never reached)."""
    async with asyncio.timeout(5):
        while not check():  # noqa: ASYNC110 - the state is a counter, not an event
            await asyncio.sleep(0)


async def _settle(fleet: CountingFleet, names: list[str]) -> None:
    """Every member loop has looked for kinds once and is waiting (it parks in the same
    step as its look)."""
    await _until(lambda: all(fleet.calls[f"resources:{n}"] for n in names))
    await _turns()


async def test_one_members_events_cost_the_others_nothing() -> None:
    names = [f"m{i:02}" for i in range(40)]
    fleet = CountingFleet(names)
    # No idle wake-up during the test: only pulses may wake a loop.
    watchers = MemberWatchers(fleet=fleet, live=LiveCatalog(Catalog.builtin()),
                              copies=CopyCache(), kick=lambda _: None, hub_id="h",
                              idle_wake_s=3600.0)
    await watchers.start()
    try:
        await _settle(fleet, names)
        woken, calls = Counter(watchers.wakeups), Counter(fleet.calls)

        for _ in range(500):  # a burst of Pod events on m07
            fleet.signals.changed("m07", Change.CAPACITY)
            await asyncio.sleep(0)
        await _turns()
        assert watchers.wakeups == woken, "capacity changes woke a copy-watch loop"
        assert fleet.calls == calls, "capacity changes made the watchers read the fleet"

        fleet.signals.changed("m07", Change.STATE)  # m07 now serves another kind, say
        await _until(lambda: watchers.wakeups["m07"] > woken["m07"])
        await _turns()  # any other loop it wrongly woke has woken too
        delta = watchers.wakeups - woken
        assert dict(delta) == {"m07": 1}
        assert fleet.calls - calls == Counter({"resources:m07": 1})
        assert fleet.calls["snapshots"] == fleet.calls["snapshot"] == 0

        woken = Counter(watchers.wakeups)
        watchers.kinds_changed()
        await _until(lambda: all(watchers.wakeups[n] > woken[n] for n in names))
        await _turns()  # a second wake-up of any loop would show now
        assert watchers.wakeups - woken == Counter({n: 1 for n in names})
    finally:
        await watchers.stop()
    assert not [t for t in asyncio.all_tasks() if t.get_name().startswith("copies:")]
