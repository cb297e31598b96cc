"""The controller: caches, watches, per-workload workers, queue rounds, sweep and expiry.

Wiring only; every decision is made in ``decide`` (per workload) or ``queue`` (order),
every step executed by ``reconcile``/``actions``. Start order matters for crash safety:
workers process nothing until the hub watches (workloads and Dispatch records) and the
copy watches of every connected member have listed once, so a restarted controller sees
every earlier decision and every existing copy before it decides anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.aiotasks import cancel_all, guarded
from dispatcher.control.caches import CopyCache, HubCache
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import orphans
from dispatcher.control.core import record as records
from dispatcher.control.core.queue import PendingQueue
from dispatcher.control.definitions import DefinitionWatcher
from dispatcher.control.events import EventRecorder
from dispatcher.control.fleetview import FleetView
from dispatcher.control.meters import ControllerProbe
from dispatcher.control.nominator import Nominator
from dispatcher.control.observe import Metrics
from dispatcher.control.readings import member_copy
from dispatcher.control.reconcile import Reconciler
from dispatcher.control.settings import MULTIKUEUE_DISPATCHER, ControlSettings
from dispatcher.control.submit import delete_if_owned
from dispatcher.control.watchers import HubWatchers, MemberWatchers
from dispatcher.control.workers import Workers
from dispatcher.fleet import reservations
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError, NotFound
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.bounded import DEFAULT_BOUNDS, Bounds
from dispatcher.workloads.catalog import Catalog

__all__ = ["Controller"]

SWEEP_MAX_DELETES = 50

log = structlog.get_logger("dispatcher")

SYNC_TIMEOUT_S = 15.0
_ROUND_MIN_INTERVAL_S = 0.2
_EXPIRE_EVERY_S = 2.0


class Controller:
    """One leader's control loop over a hub and a fleet. ``await run(stop)``."""

    def __init__(self, *, settings: ControlSettings, catalog: Catalog, hub: KubeClient,
                 fleet: FleetView, metrics: Metrics | None = None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 bounds: Bounds = DEFAULT_BOUNDS) -> None:
        self.settings = settings
        self.live = LiveCatalog(catalog, bounds=bounds)
        """``catalog`` (built-in + config files) with the hub's definition objects merged
        over it while running (``control.definitions``)."""
        self.fleet = fleet
        self.hub = hub
        self.clock = clock
        self.metrics = metrics or Metrics.create()
        self.cache = HubCache()
        self.copies = CopyCache()
        self.queue = PendingQueue(backfill_limit=settings.backfill_limit)
        self.events = EventRecorder(client=hub, clock=clock) if settings.record_events \
            else None
        self.reconciler = Reconciler(settings=settings, live=self.live, hub=hub, fleet=fleet,
                                     hub_cache=self.cache, copies=self.copies,
                                     queue=self.queue, metrics=self.metrics,
                                     events=self.events, clock=clock, monotonic=monotonic)
        self.workers = Workers(handler=self.metrics.reconciling(self.reconciler.reconcile),
                               concurrency=settings.workers,
                               describe=self.reconciler.workload_fields,
                               key=lambda uid: self.reconciler.workload_fields(uid)["namespace"])
        self.metrics.attach(ControllerProbe(metrics=self.metrics, queue=self.queue, fleet=fleet,
                                            running=lambda: len(self.workers),
                                            workers=settings.workers))
        self._backlog: set[str] | None = set()
        self.definitions = DefinitionWatcher(hub=hub, live=self.live, clock=clock)
        self.hub_watchers = HubWatchers(hub=hub, live=self.live, cache=self.cache,
                                        kick=self.kick, namespaces=settings.namespaces,
                                        label_selector=settings.label_selector,
                                        skip_namespaces=frozenset({settings.leader.namespace}))
        self.member_watchers = MemberWatchers(fleet=fleet, live=self.live, copies=self.copies,
                                              kick=self.kick, hub_id=settings.hub_id,
                                              monotonic=monotonic)
        self._tasks: list[asyncio.Task[None]] = []
        self.started = False
        self.live.subscribe(self._catalog_changed)

    def kick(self, uid: str) -> None:
        """Reconcile ``uid`` (held back until the caches have synced)."""
        if self._backlog is not None:
            self._backlog.add(uid)
        else:
            self.workers.kick(uid)

    def ready(self) -> bool:
        """Caches synced and workers running (``/readyz``)."""
        return self.started

    def _catalog_changed(self, old: Catalog, new: Catalog) -> None:
        """The live catalog was swapped: watch and discover new kinds, and read every
        workload whose definition changed again (a copy's status with the new definition,
        a waiting workload's demand for the next decision)."""
        before = {d.gvk: id(d) for d in old.definitions}
        after = {d.gvk: id(d) for d in new.definitions}
        changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
        log.info("catalog.changed", definitions=len(new),
                 kinds=sorted(f"{k.api_version} {k.kind}" for k in changed))
        self.reconciler.forget_readings()
        self.fleet.set_kinds(list(after))
        removed = set(before) - set(after)
        added = set(after) - set(before)
        self._tasks.append(guarded(self._follow_catalog(changed, removed, added),
                                   name="catalog-follow", finite=True))

    async def _follow_catalog(self, changed: set[GroupVersionKind],
                              removed: set[GroupVersionKind], added: set[GroupVersionKind]
                              ) -> None:
        await self.hub_watchers.discover()
        self.member_watchers.kinds_changed()  # copy watches for the new kinds
        for member in self.fleet.names():
            for uid, found in self.copies.items(member):
                obj = found.obj
                if GroupVersionKind.of_object(obj) not in changed:
                    continue
                self.copies.put(member, uid, await member_copy(
                    obj, live=self.live, seen_at=found.seen_at, previous=found))
                self.kick(uid)
        for uid in list(self.cache.uids()):
            item = self.cache.workload(uid)
            if item is None:
                continue
            kind = GroupVersionKind.of_object(item.obj)
            if kind not in changed:
                continue
            if kind in removed or kind in added:
                await self.reconciler.note_definition(uid, present=kind in added,
                                                      kind=f"{kind.api_version} {kind.kind}")
            self.kick(uid)
        self._tasks[:] = [t for t in self._tasks if not t.done()]

    async def follow_definitions(self, stop: asyncio.Event, *, report: bool = True) -> None:
        """Follow the hub's definitions into the live catalog (once; ``report``: write their
        status too). A standby replica on a shared hub follows them without reporting, so
        its webhook answers with the catalog the leader decides with."""
        if not self.definitions.started:
            self.definitions.reporting = report
            await self.definitions.start()
            await self._wait_definitions(stop)
        elif report and not self.definitions.reporting:
            self.definitions.report()

    async def run(self, stop: asyncio.Event) -> None:
        """Run until ``stop`` is set; then drain workers and stop every task. With
        ``mode: multikueue-dispatcher``, nominate workers for the hub's Kueue Workloads
        instead (``control.nominator``): no Dispatch and no copy of our own."""
        if self.settings.mode == MULTIKUEUE_DISPATCHER:
            await self._nominate(stop)
            return
        await self.follow_definitions(stop)
        await self.member_watchers.start()
        await self.hub_watchers.start()
        if self.events is not None:
            self._tasks.append(guarded(self.events.run(), name="events"))
        try:
            await self._wait_synced(stop)
            self._rebuild_reservations()
            backlog, self._backlog = self._backlog or set(), None
            for uid in backlog:
                self.workers.kick(uid)
            self.started = True
            log.info("controller.started", workloads=len(backlog),
                     members=list(self.fleet.names()))
            self._tasks += [guarded(self._rounds(), name="queue-rounds"),
                            guarded(self._expire(), name="reservation-expiry"),
                            guarded(self._sweeps(), name="orphan-sweep")]
            await stop.wait()
        finally:
            self.started = False
            log.info("controller.stopping")
            await self.workers.stop()
            await cancel_all(self._tasks)
            await self.hub_watchers.stop()
            await self.member_watchers.stop()
            await self.definitions.stop()
            await asyncio.to_thread(self.live.close)
            log.debug("controller.drained")

    async def _nominate(self, stop: asyncio.Event) -> None:
        await self.follow_definitions(stop)
        nominator = Nominator(hub=self.hub, fleet=self.fleet, live=self.live,
                              settings=self.settings, clock=self.clock)
        started = asyncio.ensure_future(nominator.listed.wait())
        started.add_done_callback(lambda _: setattr(self, "started", True))
        try:
            await nominator.run(stop)
        finally:
            started.cancel()
            self.started = False
            await self.definitions.stop()
            await asyncio.to_thread(self.live.close)

    async def _wait_definitions(self, stop: asyncio.Event) -> None:
        """The hub's definitions merged once before anything is watched or decided, so a
        restarted controller never decides with a catalog the operator has overridden."""
        merged = asyncio.ensure_future(self.definitions.merged.wait())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({merged, stopped}, timeout=SYNC_TIMEOUT_S,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:
            merged.cancel()
            stopped.cancel()

    async def _wait_synced(self, stop: asyncio.Event) -> None:
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        while not stop.is_set():
            hub_ok = self.hub_watchers.synced()
            members = [m for m in self.fleet.names() if self.fleet.client(m) is not None]
            copies_ok = all(any(s[0] == m for s in self.copies.synced) for m in members)
            if hub_ok and (copies_ok or time.monotonic() > deadline):
                return
            await asyncio.sleep(0.05)

    def _rebuild_reservations(self) -> None:
        """Reservations of decisions not yet visible as pods, from the Dispatch records."""
        held = []
        for raw in self.cache.records():
            record = records.read(raw)
            if record.reservation is None:
                continue
            if self.cache.workload(record.workload_uid) is None:
                continue  # the workload is gone; its record only awaits garbage collection
            held.append((record.reservation, record.cluster or ""))
        reservations.restore(held, self.fleet.reservations, now=self.clock())

    async def _rounds(self) -> None:
        """Event-driven: when capacity or health changes, retry waiting workloads in order."""
        seen = self.fleet.pulse.version
        reachable: dict[str, bool] = {}
        while True:
            seen = await self.fleet.pulse.wait(seen, timeout=30.0)
            for name in self.fleet.names():  # lost or back: its workloads decide again
                now_reachable = self.fleet.health(name).reachable
                if reachable.get(name, True) != now_reachable:
                    for uid in self.cache.uids_on(name):
                        self.workers.kick(uid)
                reachable[name] = now_reachable
            self.queue.keep_claims(self.fleet.names())
            for entry in self.queue.ordered():
                self.workers.kick(entry.uid)
            for entry, _ in self.queue.parked():  # a member added may make it placeable
                self.workers.kick(entry.uid)
            self.metrics.pending.set(len(self.queue))
            await asyncio.sleep(_ROUND_MIN_INTERVAL_S)

    async def _expire(self) -> None:
        while True:
            await asyncio.sleep(_EXPIRE_EVERY_S)
            now = self.clock()
            expired = False
            for name in self.fleet.names():
                held = self.fleet.reservations(name)
                if held is not None and held.expire(now):
                    expired = True
            if expired:
                self.fleet.pulse.bump()

    async def _sweeps(self) -> None:
        seen = self.fleet.pulse.version
        while True:
            await self.sweep()
            seen = await self.fleet.pulse.wait(seen, timeout=self.settings.sweep_interval_s)
            await asyncio.sleep(2.0)  # coalesce reconnect bursts

    async def sweep(self) -> int:
        """Delete our copies whose hub object is gone or that a failover left behind, at
        most ``SWEEP_MAX_DELETES`` per pass (a misconfiguration that makes everything look
        stale costs a bounded number of deletes per interval, and says so in the log)."""
        deleted = 0
        for member in self.fleet.names():
            client = self.fleet.client(member)
            if client is None:
                continue
            for uid, found in self.copies.items(member):
                if deleted >= SWEEP_MAX_DELETES:
                    log.warning("sweep.limited", deleted=deleted,
                                hint="more stale copies wait for the next pass")
                    return deleted
                obj = found.obj
                if (member, GroupVersionKind.of_object(obj)) not in self.copies.synced:
                    continue
                reason = await self._stale(uid, member=member, obj=obj)
                if reason is None:
                    continue
                try:
                    ref = await client.discovery.resource(str(obj["apiVersion"]),
                                                          str(obj["kind"]))
                    if ref is None:
                        continue
                    meta = obj["metadata"]
                    if await delete_if_owned(client, ref, namespace=str(meta["namespace"]),
                                             name=str(meta["name"]),
                                             hub_id=self.settings.hub_id, hub_uid=uid):
                        deleted += 1
                        self.copies.drop(member, uid)
                        log.info("copy.swept", uid=uid, namespace=meta["namespace"],
                                 name=meta["name"], kind=obj.get("kind"), member=member,
                                 reason=reason)
                except KubeError as exc:
                    log.warning("sweep.failed", uid=uid, member=member,
                                namespace=obj["metadata"].get("namespace"),
                                name=obj["metadata"].get("name"), kind=obj.get("kind"),
                                error=type(exc).__name__)
        return deleted

    async def _stale(self, uid: str, *, member: str, obj: Mapping[str, Any]) -> str | None:
        """Why our copy of ``uid`` on ``member`` should go, or None to keep it
        (``control.core.orphans``; the hub is read only when the judgement asks)."""
        api_version, kind = str(obj.get("apiVersion")), str(obj.get("kind"))
        judgement = orphans.judge(
            member=member, cached=self.cache.workload(uid) is not None,
            record=self.cache.record_value(uid),
            same_cluster=lambda a, b: self.fleet.same_cluster(a, b),  # noqa: PLW0108 (late)
            kind=GroupVersionKind.of(api_version, kind),
            listed_kinds={k for k, _ in self.cache.synced})
        if not judgement.ask_hub:
            return judgement.stale
        meta = obj.get("metadata") or {}
        with contextlib.suppress(KubeError):
            ref = await self.hub.discovery.resource(api_version, kind)
            if ref is None:
                return None
            try:
                hub_obj = await self.hub.request("GET", ref.item(str(meta["name"]),
                                                                 str(meta["namespace"])))
            except NotFound:
                hub_obj = None
            return orphans.after_lookup(hub_obj, uid)
        return None
