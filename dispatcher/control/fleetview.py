"""What the control loop needs from the fleet: the ``FleetView`` seam and its adapter.

``FleetView`` is all the control loop reads: placement snapshots, a client per connected
member, its discovered workload resources, its reservations, its health as ``decide`` sees
it, and change pulses: one for any change, one for the member set, and one per member for
its state (client, health, served kinds), so a loop that follows one member is not woken by
the others, nor by its capacity.
``LiveFleet`` adapts the fleet runtime (``dispatcher.fleet.runtime.Fleet``: MemberCluster
objects, static members, connections, capacity informers) to it; tests and benchmarks may
supply any other implementation.

Health mapping: a member is *unreachable* for ``decide`` only when the fleet says
``reachable is False`` (no answer for ``fleet.unreachableAfter``, measured from the first
loss); a blip or a member still connecting has no client, so its copies read as "not
known yet" and nothing is decided about them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from dispatcher.aiotasks import Pulse
from dispatcher.control.core.decide import MemberHealth
from dispatcher.fleet.queueing import KUEUE
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.runtime import Fleet, UnknownMember
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import GroupVersionKind, ResourceRef
from dispatcher.placement.model import MemberSnapshot

__all__ = ["FleetView", "LiveFleet"]


class FleetView(Protocol):
    """The fleet as the control loop sees it. All reads are synchronous and cheap."""

    pulse: Pulse
    """Bumped whenever capacity, health or the member set changed (and by the shell when a
    waiting workload reaches its backfill limit or claims a member: a queue round)."""

    members_pulse: Pulse
    """Bumped when a member is added or removed."""

    def state_pulse(self, member: str) -> Pulse:
        """Bumped when ``member``'s client, health or served kinds change (not capacity)."""
        ...

    def names(self) -> tuple[str, ...]:
        """Every known member."""
        ...

    def snapshots(self) -> Sequence[MemberSnapshot]:
        """One snapshot per member for placement (live capacity, net of reservations)."""
        ...

    def snapshot(self, member: str) -> MemberSnapshot | None:
        """One member's snapshot (None if unknown), without building the others."""
        ...

    def resources(self, member: str) -> Mapping[GroupVersionKind, ResourceRef] | None:
        """The member's served workload resources by kind, as its connection discovered
        them; None until discovered (or for an unknown member)."""
        ...

    def kueue_workloads(self, member: str) -> ResourceRef | None:
        """Kueue's Workload resource when the member queues with Kueue, else None."""
        ...

    def client(self, member: str) -> KubeClient | None:
        """The member's client when it is connected, else None."""
        ...

    def reservations(self, member: str) -> MemberReservations | None:
        """The member's live reservations (None for an unknown member)."""
        ...

    def health(self, member: str) -> MemberHealth:
        """Reachability, with the first-loss time kept across failed reconnects."""
        ...

    def same_cluster(self, a: str, b: str) -> bool:
        """Whether two members are one cluster (registered twice)."""
        ...

    def set_kinds(self, kinds: Sequence[GroupVersionKind]) -> None:
        """Discover these kinds on every member (the catalog changed)."""
        ...


class LiveFleet:
    """``FleetView`` over the fleet runtime (its pulses are the fleet's own)."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self.pulse = fleet.signals.any
        self.members_pulse = fleet.signals.members

    async def start(self) -> None:
        await self.fleet.start()

    async def stop(self) -> None:
        """Stop the fleet: every member connection cancels and awaits its own tasks."""
        await self.fleet.stop()

    def state_pulse(self, member: str) -> Pulse:
        return self.fleet.signals.state(member)

    def names(self) -> tuple[str, ...]:
        return self.fleet.names()

    def snapshot(self, member: str) -> MemberSnapshot | None:
        try:
            return self.fleet.snapshot(member)
        except UnknownMember:
            return None

    def resources(self, member: str) -> Mapping[GroupVersionKind, ResourceRef] | None:
        try:
            conn = self.fleet.connection(member)
        except UnknownMember:
            return None
        return conn.resources if conn.served is not None else None

    def kueue_workloads(self, member: str) -> ResourceRef | None:
        try:
            conn = self.fleet.connection(member)
        except UnknownMember:
            return None
        return conn.kueue_workloads if conn.queueing.system == KUEUE else None

    def set_kinds(self, kinds: Sequence[GroupVersionKind]) -> None:
        self.fleet.set_kinds(kinds)

    def snapshots(self) -> Sequence[MemberSnapshot]:
        return self.fleet.snapshots()

    def client(self, member: str) -> KubeClient | None:
        return self.fleet.client_or_none(member)

    def reservations(self, member: str) -> MemberReservations | None:
        try:
            return self.fleet.reservations(member)
        except UnknownMember:
            return None

    def health(self, member: str) -> MemberHealth:
        try:
            health = self.fleet.health(member)
        except UnknownMember:
            return MemberHealth(reachable=False, lost_since=0.0)
        if health.reachable is False:
            lost = health.first_loss.timestamp() if health.first_loss else None
            return MemberHealth(reachable=False, lost_since=lost)
        return MemberHealth(reachable=True)

    def same_cluster(self, a: str, b: str) -> bool:
        return self.fleet.same_cluster(a, b)
