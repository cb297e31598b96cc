"""The fleet runtime: every member's connection, kept in step with the hub, as one object.

The controller creates one ``Fleet`` and reads it; nothing else opens member clients.

    hub MemberClusters (watch) --+                 +--> members(), snapshots() for placement
    static members (settings) ---+--> Fleet ------ +--> client(member) to submit and mirror
    hub kubeconfig Secrets ------+    one          +--> signals: per member and category
                                      MemberConnection    (capacity / state), the member set,
                                      per member          and any change (event-driven)
                                                   +--> MemberCluster status (bounded rate)

A change of one member costs the others nothing: each connection reports to its own
pulses (``fleet.signals``), and ``snapshot(name)`` reads one member without the rest.

``Fleet`` wires the parts and answers the reads; each part holds one job: which members
there are (``fleet/membership``), reconnecting when credentials rotate
(``fleet/rotation``), the hub watches (``fleet/hubwatch``) and the MemberCluster status
(``fleet/statuswriter``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import structlog

from dispatcher.aiotasks import Pulse, cancel_all, guarded
from dispatcher.fleet import credentials
from dispatcher.fleet import health as healthmod
from dispatcher.fleet import members as membersmod
from dispatcher.fleet.capacity import CapacitySummary
from dispatcher.fleet.connection import Clock, MemberConnection, NotConnected
from dispatcher.fleet.health import Health
from dispatcher.fleet.hubwatch import watch_hub
from dispatcher.fleet.membership import Membership
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.rotation import SecretVersions, watch_files
from dispatcher.fleet.settings import FleetSettings
from dispatcher.fleet.signals import FleetSignals
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.fleet.statuswriter import StatusWriter
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import MEMBER_CLUSTERS, SECRETS, GroupVersionKind

__all__ = ["Fleet", "MemberState", "NotConnected", "UnknownMember", "utc_now"]

log = structlog.get_logger(__name__)


def utc_now() -> datetime:
    """The production clock (inject another one in tests and simulations)."""
    return datetime.now(UTC)


class UnknownMember(KeyError):
    """No member of that name is registered."""


@dataclass(frozen=True, kw_only=True)
class MemberState:
    """One member as the controller sees it right now (a copy; does not change)."""

    name: str
    labels: Mapping[str, str]
    cordoned: bool
    allowed_namespaces: tuple[str, ...]
    static: bool
    client: KubeClient | None
    health: Health
    kubernetes_version: str | None
    capacity: CapacitySummary
    served_kinds: frozenset[GroupVersionKind] | None
    """The catalog's kinds the member serves; None until discovered."""


class Fleet:
    """All member connections. ``async with Fleet(...) as fleet:`` or start()/stop().

    ``hub`` may be None for a fleet of static members only. ``kinds`` lists the catalog's
    workload kinds, discovered on every member. ``clock`` returns an
    aware datetime; it stamps lastSeen, conditions and loss times.
    """

    def __init__(self, *, hub: KubeClient | None, settings: FleetSettings,
                 kinds: Sequence[GroupVersionKind] = (), clock: Clock = utc_now) -> None:
        self._hub = hub
        self._settings = settings
        self._kinds = tuple(kinds)
        self._clock = clock
        self.signals = FleetSignals()
        self.pulse: Pulse = self.signals.any
        """Bumped on every capacity, health or membership change (``changes()`` reads it)."""
        self._membership = Membership(hub=hub, settings=settings, clock=clock,
                                      signals=self.signals, kinds=lambda: self._kinds,
                                      forget=self._forget_status)
        self._connections = self._membership.connections
        self._invalid = self._membership.invalid
        self._statuses = (StatusWriter(hub=hub, settings=settings, clock=clock,
                                       membership=self._membership, health=self.health)
                          if hub is not None else None)
        self._secrets = SecretVersions(settings.secret_namespace,
                                       self._connections.values)
        self._tasks: list[asyncio.Task[None]] = []
        self._stopping = False

    # -- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Connect static members and start watching the hub."""
        # Kubeconfig file versions as of now, before any connection reads them: a change
        # after this point always triggers a reconnect (a baseline taken later could
        # swallow an edit made between the first read and the first check).
        baseline = {m.name: credentials.file_version(m.kubeconfig)
                    for m in self._settings.static_members}
        for member in self._settings.static_members:
            self._membership.add(membersmod.from_static(member))
        if self._settings.static_members:
            self._tasks.append(guarded(
                watch_files(self._connections.values, baseline,
                            interval_s=self._settings.probe_interval_s),
                name="fleet/static-files"))
        hub, settings = self._hub, self._settings
        if hub is not None and self._statuses is not None and settings.watch_member_clusters:

            def stopping() -> bool:
                return self._stopping

            self._tasks += [
                guarded(watch_hub(hub, MEMBER_CLUSTERS, None,
                                  self._membership.on_member_clusters, settings=settings,
                                  stopping=stopping), name="fleet/memberclusters"),
                guarded(watch_hub(hub, SECRETS, settings.secret_namespace,
                                  self._secrets.on_secrets, settings=settings,
                                  stopping=stopping), name="fleet/secrets"),
                guarded(self._statuses.run(self.pulse, stopping), name="fleet/status"),
            ]

    async def stop(self) -> None:
        """Stop every task and connection; bounded (see ``MemberConnection.stop``), and
        nothing of the fleet's is left running when it returns."""
        self._stopping = True
        await cancel_all(self._tasks)
        self._tasks.clear()
        await self._membership.stop()

    async def __aenter__(self) -> Fleet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def set_kinds(self, kinds: Sequence[GroupVersionKind]) -> None:
        """The catalog's workload kinds changed (hub definitions): every member discovers
        the new set now, and members added later use it."""
        self._kinds = tuple(kinds)
        for conn in self._connections.values():
            conn.set_kinds(self._kinds)

    # -- reads ---------------------------------------------------------------------------

    def names(self) -> tuple[str, ...]:
        """Member names, sorted."""
        return tuple(sorted(self._connections))

    def connection(self, member: str) -> MemberConnection:
        """The live connection object of ``member`` (UnknownMember if none)."""
        try:
            return self._connections[member]
        except KeyError:
            raise UnknownMember(member) from None

    def members(self) -> dict[str, MemberState]:
        """Name -> state, for every registered member."""
        out = {}
        for name in sorted(self._connections):
            conn = self._connections[name]
            spec = conn.spec
            out[name] = MemberState(
                name=name, labels=spec.labels, cordoned=spec.cordoned,
                allowed_namespaces=spec.allowed_namespaces, static=spec.static,
                client=conn.client if conn.connected else None, health=self.health(name),
                kubernetes_version=conn.kubernetes_version,
                capacity=conn.capacity.summary(), served_kinds=conn.served)
        return out

    def snapshots(self) -> list[MemberSnapshot]:
        """What placement reads: live capacity (net of reservations), health, metadata."""
        return [self.snapshot(name) for name in sorted(self._connections)]

    def snapshot(self, member: str) -> MemberSnapshot:
        """One member's snapshot (UnknownMember if none), without building the others."""
        conn = self.connection(member)
        health = self.health(member)
        quota = conn.quota
        return MemberSnapshot(
            name=member, capacity=conn.capacity, labels=conn.spec.labels,
            ready=health.ready,
            not_ready_reason="" if health.ready else f"{health.reason}: {health.message}",
            cordoned=conn.spec.cordoned, served_kinds=conn.served,
            allowed_namespaces=conn.spec.allowed_namespaces,
            topology_levels=conn.spec.topology_levels or self._settings.topology_levels,
            gang_mechanism=conn.gang_mechanism, queueing=conn.queueing,
            kubernetes_version=conn.kubernetes_version,
            quota=quota, quota_in_flight=None if quota is None
            else conn.reservations.in_flight(quota.holders))

    def reservations(self, member: str) -> MemberReservations:
        """The reservations of ``member`` (applied to its capacity)."""
        return self.connection(member).reservations

    def client(self, member: str) -> KubeClient:
        """The member's client; NotConnected when it is down, UnknownMember if unknown."""
        return self.connection(member).client

    def client_or_none(self, member: str) -> KubeClient | None:
        """The member's client, or None when it is unknown or not connected."""
        conn = self._connections.get(member)
        return conn.client if conn is not None and conn.connected else None

    def health(self, member: str) -> Health:
        """The member's health (``first_loss`` is kept across failed reconnects); not Ready
        with reason SpecInvalid while its MemberCluster's spec is invalid, or
        DuplicateCluster when it is the same cluster as a member named before it (the
        first name keeps the cluster)."""
        conn = self.connection(member)
        invalid = self._invalid.get(member)
        if invalid is not None and not conn.spec.static:
            return healthmod.spec_invalid(conn.health, message=invalid, running=True)
        first = self.same_cluster_as(member)
        if first is not None and conn.cluster_id is not None:
            return healthmod.duplicate(conn.health, of=first, cluster_id=conn.cluster_id)
        return conn.health

    def same_cluster_as(self, member: str) -> str | None:
        """The first member (by name) that is the same cluster as ``member``, if another."""
        cluster_id = self.connection(member).cluster_id
        if cluster_id is None:
            return None
        for name in sorted(self._connections):
            if name == member:
                return None
            if self._connections[name].cluster_id == cluster_id:
                return name
        return None

    def same_cluster(self, a: str, b: str) -> bool:
        """Whether members ``a`` and ``b`` are one cluster (registered twice)."""
        ids = [self._connections[m].cluster_id if m in self._connections else None
               for m in (a, b)]
        return a == b or (ids[0] is not None and ids[0] == ids[1])

    @property
    def version(self) -> int:
        """A counter that grows with every capacity, health or membership change."""
        return self.pulse.version

    async def wait_changed(self, seen: int) -> int:
        """Wait until ``version`` is past ``seen``; returns the new version."""
        return await self.pulse.wait(seen)

    def changes(self) -> AsyncIterator[int]:
        """Yield after each change (bursts coalesce): re-evaluate pending workloads then."""
        return self.pulse.changes()

    # -- status --------------------------------------------------------------------------

    async def write_statuses_once(self) -> int:
        """One pass over all MemberCluster members; returns the number of writes."""
        return 0 if self._statuses is None else await self._statuses.write_once()

    def _forget_status(self, name: str) -> None:
        if self._statuses is not None:
            self._statuses.forget(name)
