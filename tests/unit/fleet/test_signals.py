"""Change notification by member and category: one member's events cost the others nothing.

Covers: a connection reports to its own member's pulses only (capacity vs state), the
fleet-wide pulse still moves, membership changes move the member-set pulse, and one
member's snapshot is read without building the others. Not covered: the informers that
call the connection (integration tests).
"""

from __future__ import annotations

from pathlib import Path

from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.fleet.signals import Change, FleetSignals


def _versions(signals: FleetSignals, names: list[str]) -> dict[str, tuple[int, int]]:
    return {n: (signals.state(n).version, signals.capacity(n).version) for n in names}


def test_a_capacity_change_moves_only_that_members_capacity_pulse() -> None:
    signals = FleetSignals()
    names = [f"m{i}" for i in range(50)]
    before = _versions(signals, names)
    any_before = signals.any.version
    for _ in range(100):
        signals.changed("m7", Change.CAPACITY)
    after = _versions(signals, names)
    assert after["m7"] == (before["m7"][0], before["m7"][1] + 100)
    assert {n: v for n, v in after.items() if n != "m7"} == \
        {n: v for n, v in before.items() if n != "m7"}
    assert signals.any.version == any_before + 100
    assert signals.members.version == 0


def test_a_name_that_comes_back_keeps_its_pulse_versions() -> None:
    signals = FleetSignals()
    signals.joined_or_left("a")
    seen = signals.state("a").version
    signals.joined_or_left("a")  # removed
    signals.joined_or_left("a")  # added again: a waiter's ``seen`` is still meaningful
    assert signals.state("a").version == seen + 2
    assert signals.members.version == 3


async def test_fleet_connections_report_to_their_own_member(tmp_path: Path) -> None:
    names = [f"m{i}" for i in range(20)]
    settings = FleetSettings(static_members=tuple(
        StaticMember(name=n, kubeconfig=str(tmp_path / f"{n}.yaml")) for n in names),
        reconnect_initial_s=30.0, reconnect_max_s=30.0, probe_interval_s=30.0)
    async with Fleet(hub=None, settings=settings) as fleet:
        signals = fleet.signals
        before = _versions(signals, names)
        # What a Pod event on m3's informer does (connection.py ``_informer``).
        fleet.connection("m3")._notify(Change.CAPACITY)
        after = _versions(signals, names)
        assert after["m3"] == (before["m3"][0], before["m3"][1] + 1)
        assert all(after[n] == before[n] for n in names if n != "m3")
        assert fleet.snapshot("m3") == fleet.snapshots()[sorted(names).index("m3")]
