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

A MemberCluster whose credentials source changes (Secret reference, context) gets a new
connection; one whose labels, cordon or allowed namespaces change keeps its connection. A
change of the referenced Secret (watched in ``settings.secret_namespace``) reconnects with
the new kubeconfig without touching anything else. Secrets in other namespaces are read at
each (re)connect but not watched. Static members have no object, so no status is written
for them.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import structlog

from dispatcher.aiotasks import Pulse, cancel_all, guarded
from dispatcher.fleet import credentials
from dispatcher.fleet import health as healthmod
from dispatcher.fleet import members as membersmod
from dispatcher.fleet import status as statusmod
from dispatcher.fleet.capacity import CapacitySummary
from dispatcher.fleet.connection import Clock, MemberConnection, NotConnected, backoff
from dispatcher.fleet.health import Health, Reason
from dispatcher.fleet.members import MemberSpec
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.settings import FleetSettings
from dispatcher.fleet.signals import Change, FleetSignals
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.kube import errors, retry, watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import MEMBER_CLUSTERS, SECRETS, GroupVersionKind, ResourceRef

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
        self._connections: dict[str, MemberConnection] = {}
        self._objects: dict[str, Mapping[str, Any]] = {}
        self._written: dict[str, tuple[dict[str, Any], datetime]] = {}
        self._secret_versions: dict[tuple[str, str], str] = {}
        self._invalid: dict[str, str] = {}
        """MemberClusters whose spec is invalid: name -> why (``Ready=False SpecInvalid``)."""
        self.signals = FleetSignals()
        self.pulse: Pulse = self.signals.any
        """Bumped on every capacity, health or membership change (``changes()`` reads it)."""
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
            self._add(membersmod.from_static(member))
        if self._settings.static_members:
            self._tasks.append(guarded(self._watch_static_files(baseline),
                                       name="fleet/static-files"))
        if self._hub is not None and self._settings.watch_member_clusters:
            self._tasks += [
                guarded(self._watch_hub(MEMBER_CLUSTERS, None, self._on_member_clusters),
                        name="fleet/memberclusters"),
                guarded(self._watch_hub(SECRETS, self._settings.secret_namespace,
                                        self._on_secrets), name="fleet/secrets"),
                guarded(self._write_statuses(), name="fleet/status"),
            ]

    async def stop(self) -> None:
        """Stop every task and connection; bounded (see ``MemberConnection.stop``), and
        nothing of the fleet's is left running when it returns."""
        self._stopping = True
        await cancel_all(self._tasks)
        self._tasks.clear()
        connections = list(self._connections.values())
        self._connections.clear()
        await asyncio.gather(*(c.stop() for c in connections))

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
        return MemberSnapshot(
            name=member, capacity=conn.capacity, labels=conn.spec.labels,
            ready=health.ready,
            not_ready_reason="" if health.ready else f"{health.reason}: {health.message}",
            cordoned=conn.spec.cordoned, served_kinds=conn.served,
            allowed_namespaces=conn.spec.allowed_namespaces,
            topology_levels=conn.spec.topology_levels or self._settings.topology_levels,
            gang_mechanism=conn.gang_mechanism)

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

    # -- membership ----------------------------------------------------------------------

    def _add(self, spec: MemberSpec) -> None:
        conn = MemberConnection(spec=spec, load=credentials.loader(spec, self._hub),
                                settings=self._settings, clock=self._clock, kinds=self._kinds,
                                on_change=functools.partial(self.signals.changed, spec.name))
        self._connections[spec.name] = conn
        conn.start()
        log.info("member.added", member=spec.name, static=spec.static)
        self.signals.joined_or_left(spec.name)

    async def _remove(self, name: str) -> None:
        conn = self._connections.pop(name, None)
        self._objects.pop(name, None)
        self._written.pop(name, None)
        self._invalid.pop(name, None)
        if conn is not None:
            await conn.stop()
            log.info("member.removed", member=name)
            self.signals.joined_or_left(name)

    async def _upsert(self, obj: Mapping[str, Any]) -> None:
        try:
            spec = membersmod.from_member_cluster(
                obj, default_namespace=self._settings.secret_namespace)
        except ValueError as exc:
            self._spec_invalid(obj, str(exc))
            return
        if self._invalid.pop(spec.name, None) is not None:
            log.info("member.spec_valid", member=spec.name)
            self.signals.changed(spec.name, Change.STATE)
        self._objects[spec.name] = obj
        current = self._connections.get(spec.name)
        if current is not None and current.spec.static:
            log.warning("member.name_conflict", member=spec.name,
                        hint="a static member of that name exists; the MemberCluster is "
                             "ignored")
            return
        if current is None:
            self._add(spec)
        elif not current.spec.same_source(spec):
            await self._remove(spec.name)
            self._objects[spec.name] = obj
            self._add(spec)
        elif current.spec != spec:
            current.update_spec(spec)

    def _spec_invalid(self, obj: Mapping[str, Any], message: str) -> None:
        """A MemberCluster whose spec cannot be used: ``Ready=False`` with reason
        SpecInvalid and the message on its status (written by ``write_statuses_once``).
        A connection made from its last valid spec is kept but not Ready (``health``):
        nothing new is placed there, and its copies are not failed over for an edit."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        log.warning("member.invalid_spec", member=name, message=message)
        if not name:
            return  # nothing to write a status to
        self._invalid[name] = message
        self._objects[name] = obj
        self.signals.changed(name, Change.STATE)

    async def _on_member_clusters(self, item: watch.Listed | watch.Changed) -> None:
        if isinstance(item, watch.Listed):
            listed = {str(o["metadata"]["name"]) for o in item.objects}
            for name in [n for n, c in self._connections.items()
                         if not c.spec.static and n not in listed]:
                await self._remove(name)
            for name in [n for n in self._invalid if n not in listed]:
                self._forget_invalid(name)
            for obj in item.objects:
                await self._upsert(obj)
        elif item.type == "DELETED":
            name = str(item.object["metadata"]["name"])
            conn = self._connections.get(name)
            if conn is not None and not conn.spec.static:
                await self._remove(name)
            self._forget_invalid(name)
        else:
            await self._upsert(item.object)

    def _forget_invalid(self, name: str) -> None:
        """An invalid MemberCluster without a connection is gone from the hub."""
        if self._invalid.pop(name, None) is not None and name not in self._connections:
            self._objects.pop(name, None)
            self._written.pop(name, None)

    async def _on_secrets(self, item: watch.Listed | watch.Changed) -> None:
        if isinstance(item, watch.Listed):
            changed = [(o, False) for o in item.objects]
            listed = {str(o["metadata"]["name"]) for o in item.objects}
            gone = [name for (_, name) in self._secret_versions if name not in listed]
        else:
            changed = [(item.object, item.type == "DELETED")]
            gone = []
        namespace = self._settings.secret_namespace
        touched = set(gone)
        for obj, deleted in changed:
            name = str(obj["metadata"]["name"])
            key = (namespace, name)
            if deleted:
                self._secret_versions.pop(key, None)
            else:
                self._secret_versions[key] = str(obj["metadata"].get("resourceVersion", ""))
            touched.add(name)
        for name in gone:
            self._secret_versions.pop((namespace, name), None)
        for conn in self._connections.values():
            ref = conn.spec.secret
            if ref is None or ref.namespace != namespace or ref.name not in touched:
                continue
            if conn.credentials_version is None and conn.health.reason != Reason.SECRET_MISSING:
                continue  # its first load is still to come and will read the latest version
            if self._secret_versions.get((ref.namespace, ref.name)) != conn.credentials_version:
                log.info("member.credentials_changed", member=conn.name,
                         secret=f"{ref.namespace}/{ref.name}")
                conn.reload()

    async def _watch_static_files(self, seen: dict[str, int | None]) -> None:
        """Reconnect a static member when its kubeconfig file changes (files have no watch
        event here, so their modification time is checked every probe interval); ``seen``
        holds each file's version when the fleet started."""
        while True:
            for conn in list(self._connections.values()):
                if conn.spec.path is None:
                    continue
                # None when unreadable: the next connect attempt reports it.
                version = await asyncio.to_thread(credentials.file_version,
                                                  conn.spec.path)
                if conn.name in seen and seen[conn.name] != version:
                    log.info("member.credentials_changed", member=conn.name,
                             file=conn.spec.path)
                    conn.reload()
                seen[conn.name] = version
            await asyncio.sleep(self._settings.probe_interval_s)

    async def _watch_hub(self, ref: ResourceRef, namespace: str | None,
                         handle: Callable[[watch.Listed | watch.Changed], Awaitable[None]]
                         ) -> None:
        """List+watch one hub resource forever, reconnecting with backoff."""
        hub = self._hub
        assert hub is not None

        def report(exc: BaseException | None, delay: float) -> None:
            log.warning("hub.watch_failed", resource=ref.plural,
                        error=type(exc).__name__ if exc else "ended",
                        message=str(exc).splitlines()[0][:300] if exc else "",
                        retry_in=round(delay, 1))

        async def body() -> None:
            async for item in watch.informer(hub, ref, namespace=namespace,
                                             timeout_seconds=self._settings.watch_timeout_s):
                await handle(item)

        # Any error but cancellation, and none once stopping (a cancellation a library
        # turned into an error).
        await retry.forever(body, wait=backoff(self._settings), on_failure=report,
                            fresh_after=60.0, retry_on=lambda exc: True,
                            stopping=lambda: self._stopping)

    # -- status --------------------------------------------------------------------------

    async def _write_statuses(self) -> None:
        """Write changed MemberCluster statuses, at most once per ``status_min_interval``."""
        seen = -1
        while not self._stopping:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._settings.status_heartbeat_s):
                    seen = await self.pulse.wait(seen)
            await self.write_statuses_once()
            await asyncio.sleep(self._settings.status_min_interval_s)
        raise asyncio.CancelledError  # stopped (the cancellation itself was lost)

    async def write_statuses_once(self) -> int:
        """One pass over all MemberCluster members; returns the number of writes."""
        hub = self._hub
        if hub is None:
            return 0
        settings = self._settings
        writes = 0
        names = sorted({*self._connections, *self._invalid})
        for name in names:
            conn = self._connections.get(name)
            if (conn is not None and conn.spec.static) or name not in self._objects:
                continue
            now = self._clock()
            written = self._written.get(name)
            previous = written[0] if written else (self._objects[name].get("status") or {})
            if conn is None:  # an invalid spec, never connected
                desired = statusmod.member_status(
                    health=healthmod.spec_invalid(healthmod.initial(),
                                                  message=self._invalid[name], running=False),
                    capacity=None, version=None, kinds=None, previous=previous, now=now)
            else:
                conn.expire()
                desired = statusmod.member_status(
                    health=self.health(name), capacity=conn.capacity if conn.synced else None,
                    version=conn.kubernetes_version, kinds=conn.served, previous=previous,
                    now=now, insecure=conn.insecure_transport,
                    gang=(conn.gang_mechanism, conn.gang_discovered))
            if not statusmod.needs_write(
                    desired, written=written[0] if written else None,
                    written_at=written[1] if written else None, now=now,
                    min_interval=timedelta(seconds=settings.status_min_interval_s),
                    heartbeat=timedelta(seconds=settings.status_heartbeat_s)):
                continue
            try:
                await hub.request("PATCH", MEMBER_CLUSTERS.item(name, subresource="status"),
                                  body={"status": desired}, content_type=JSON_MERGE_PATCH)
            except errors.NotFound:
                continue
            except errors.KubeError as exc:
                log.warning("member.status_write_failed", member=name,
                            error=type(exc).__name__, message=str(exc)[:300])
                continue
            self._written[name] = (desired, now)
            writes += 1
        return writes
