"""Watches that feed the caches and kick workers: hub kinds, Dispatches, member copies.

One watcher task per (cluster, resource): it only updates a cache and maps each event to
hub workload uids (``kick``); the reconnect loop around the tested ``kube.watch.informer``
stays thin. Hub kinds are the catalog's kinds the hub serves; a CRD watch re-runs
discovery so kinds installed later are picked up without a restart, only when the served
kinds of the CRDs actually changed (not on their status updates, nor on a re-list that
finds the same CRDs), and once per burst. Member copies are
watched by our origin label, per served kind, on each connected member.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.aiotasks import Pulse, cancel_all, guarded, wait_any
from dispatcher.control.caches import CopyCache, HubCache, MemberCopy
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core.copies import stamped
from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.control.fleetview import FleetView
from dispatcher.control.readings import member_copy
from dispatcher.fleet import admission
from dispatcher.kube import retry, watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import CRDS, DISPATCHES, GroupKind, GroupVersionKind, ResourceRef

__all__ = ["HubWatchers", "MemberWatchers", "crds_served", "forever"]

log = structlog.get_logger("dispatcher.watch")

Kick = Callable[[str], None]
CRD_DEBOUNCE_S = 0.5
"""Quiet time after a CRD change before hub discovery is read again."""
CRD_DISCOVERY_RETRIES = 10
"""Discovery may lag an Established CRD: read it again (1 s apart) while it does."""
CrdServes = tuple[str, str, tuple[str, ...], bool]
"""(group, kind, served versions, Established) of one CRD."""


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def crds_served(known: Mapping[str, CrdServes], item: watch.Listed | watch.Changed
                ) -> dict[str, CrdServes]:
    """What the hub's CRDs serve after one CRD watch item (``known``: before it). Equal to
    ``known`` when the item changes nothing discovery shows (a status update, a re-list
    of the same CRDs), so hub discovery is read again only on a real change."""
    if isinstance(item, watch.Listed):
        return {_name(o): _crd_serves(o) for o in item.objects}
    fresh = dict(known)
    if item.type == "DELETED":
        fresh.pop(_name(item.object), None)
    else:
        fresh[_name(item.object)] = _crd_serves(item.object)
    return fresh


def _crd_serves(crd: Mapping[str, Any]) -> CrdServes:
    """What of a CRD decides discovery: its group, kind, served versions, Established."""
    spec = crd.get("spec") or {}
    versions = tuple(sorted(str(v.get("name")) for v in spec.get("versions") or ()
                            if isinstance(v, Mapping) and v.get("served")))
    established = any(c.get("type") == "Established" and c.get("status") == "True"
                      for c in (crd.get("status") or {}).get("conditions") or ()
                      if isinstance(c, Mapping))
    return (str(spec.get("group") or ""), str((spec.get("names") or {}).get("kind") or ""),
            versions, established)


async def forever(what: str, body: Callable[[], Any], *, on_error: Callable[[], None]
                   | None = None) -> None:
    """Run ``body`` (a list-then-watch) again after every end, with growing delays
    (``kube.retry``); a KubeError is logged and retried, ``on_error`` told of every end."""

    def failed(exc: BaseException | None, _delay: float) -> None:
        if isinstance(exc, KubeError):
            # 429 while a fresh CRD's watch cache initializes is expected: retried, not news.
            report = log.info if exc.status == 429 else log.warning
            report("watch.failed", watch=what, error=type(exc).__name__,
                   message=str(exc)[:300])
        if on_error is not None:
            on_error()

    await retry.forever(body, wait=retry.WATCH_WAIT, fresh_after=30.0, on_failure=failed,
                        retry_on=lambda exc: isinstance(exc, KubeError))


class HubWatchers:
    """Hub workloads of every served catalog kind, and Dispatch records."""

    def __init__(self, *, hub: KubeClient, live: LiveCatalog, cache: HubCache, kick: Kick,
                 namespaces: tuple[str, ...], label_selector: str,
                 skip_namespaces: frozenset[str] = frozenset()) -> None:
        self._hub = hub
        self._live = live
        self._cache = cache
        self._kick = kick
        self._namespaces = namespaces or ("",)
        self._selector = label_selector or None
        self._skip = frozenset(skip_namespaces)
        self._watched: set[GroupVersionKind] = set()
        self._kinds: set[GroupKind] = set()  # of self._watched
        self._tasks: list[asyncio.Task[None]] = []
        self._records_listed: set[str] = set()
        self._crds_served: dict[str, CrdServes] = {}
        self._crds_changed = Pulse()

    def synced(self) -> bool:
        """Every started watch has listed at least once."""
        want = {(k, ns) for k in self._watched for ns in self._namespaces}
        return set(self._namespaces) <= self._records_listed and want <= self._cache.synced

    async def start(self) -> None:
        for namespace in self._namespaces:
            self._tasks.append(guarded(
                forever("dispatches", functools.partial(self._records, namespace)),
                name=f"hub:dispatches:{namespace or '*'}"))
        await self.discover()
        self._tasks.append(guarded(forever("crds", self._crds), name="hub:crds"))
        self._tasks.append(guarded(self._rediscover(), name="hub:discovery"))

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    async def discover(self) -> set[GroupVersionKind]:
        """Start a watch for every catalog kind the hub serves and is not watched yet.

        Run again when a CRD appears and when the live catalog gains a kind. A kind that
        leaves the catalog stays watched: its workloads stay cached (never mistaken for
        deleted ones), and the reconciler says why they are not dispatched. Returns the
        catalog's kinds the hub does not serve (as far as discovery says).

        One watch per (group, kind), the first version the catalog lists that the hub
        serves, as for the members' copies (``MemberWatchers._start_kinds``): every version
        of a kind is the same objects, and two watches would deliver each object twice, in
        two shapes, to two definitions (LLMInferenceService v1alpha1 and v1alpha2)."""
        self._hub.discovery.forget()
        missing: set[GroupVersionKind] = set()
        for gvk in self._live.current.kinds():
            key = gvk.key
            if gvk in self._watched or gvk.group_kind in self._kinds:
                continue
            try:
                ref = await self._hub.discovery.resource(gvk.api_version, gvk.kind)
            except KubeError:
                ref = None
            if ref is None:
                missing.add(gvk)
                continue
            self._watched.add(gvk)
            self._kinds.add(gvk.group_kind)
            for namespace in self._namespaces:
                self._tasks.append(guarded(
                    forever(f"hub {key}", functools.partial(self._workloads, ref, namespace)),
                    name=f"hub:{key}:{namespace or '*'}"))
            log.info("watch.started", cluster="hub", kind=key)
        return missing

    async def _crds(self) -> None:
        async for item in watch.informer(self._hub, CRDS):
            fresh = crds_served(self._crds_served, item)
            if fresh != self._crds_served:
                self._crds_served = fresh
                self._crds_changed.bump()

    async def _rediscover(self) -> None:
        """Re-read hub discovery after CRD changes, once per burst (installing an operator
        creates many CRDs, and each becomes Established with a second event)."""
        seen = self._crds_changed.version
        while True:
            await self._crds_changed.wait(seen)
            await asyncio.sleep(CRD_DEBOUNCE_S)
            seen = self._crds_changed.version
            for _ in range(CRD_DISCOVERY_RETRIES):
                missing = await self.discover()
                established = {GroupVersionKind(group, version, kind)
                               for group, kind, versions, ready in self._crds_served.values()
                               if ready for version in versions}
                if not missing & established:
                    break
                await asyncio.sleep(1.0)

    async def _workloads(self, ref: ResourceRef, namespace: str) -> None:
        async for item in watch.informer(self._hub, ref, namespace=namespace or None,
                                         label_selector=self._selector):
            if isinstance(item, watch.Listed):
                objects = [o for o in item.objects if self._wanted(o)]
                for uid in self._cache.relist(ref, namespace, objects):
                    self._kick(uid)
                continue
            obj = item.object
            if not self._wanted(obj):
                continue
            uid = str(obj["metadata"]["uid"])
            if item.type == "DELETED":
                self._cache.drop(uid)
            elif not self._cache.observe(ref, obj):
                continue  # the echo of our own write: nothing new to decide on
            self._kick(uid)

    def _wanted(self, obj: Mapping[str, Any]) -> bool:
        """Never dispatch system namespaces (``kube-*``), nor the controller's own."""
        namespace = str((obj.get("metadata") or {}).get("namespace") or "")
        return namespace not in self._skip and not namespace.startswith("kube-")

    async def _records(self, namespace: str) -> None:
        async for item in watch.informer(self._hub, DISPATCHES, namespace=namespace or None):
            if isinstance(item, watch.Listed):
                for uid in self._cache.relist_records(item.objects, namespace=namespace):
                    self._kick(uid)
                self._records_listed.add(namespace)
                continue
            uid = (self._cache.drop_record(item.object) if item.type == "DELETED"
                   else self._cache.observe_record(item.object))  # "" for our own echo
            self._kick(uid)


class MemberWatchers:
    """Our copies on every member, by origin label, for each served catalog kind.

    One loop per member, woken only by that member's state pulse (client, health, served
    kinds) or a catalog change: a Pod event on one member costs the other members' loops
    nothing. The kinds a member serves are read from its fleet connection, which discovered
    them; they are not discovered a second time here.
    """

    def __init__(self, *, fleet: FleetView, live: LiveCatalog, copies: CopyCache, kick: Kick,
                 hub_id: str, monotonic: Callable[[], float] = time.monotonic,
                 idle_wake_s: float = 5.0) -> None:
        self._fleet = fleet
        # A member loop looks again after this long without a pulse (a safety net; a test
        # that counts wake-ups sets it beyond its own run).
        self._idle_wake_s = idle_wake_s
        self._live = live
        self._copies = copies
        self._kick = kick
        self._hub_id = hub_id
        self._monotonic = monotonic
        self._catalog = Pulse()
        self._tasks: list[asyncio.Task[None]] = []
        self.wakeups: Counter[str] = Counter()
        """Per member, how often its loop woke (a test counts the work of one event)."""

    async def start(self) -> None:
        self._tasks.append(guarded(self._members(), name="copies:members"))

    def kinds_changed(self) -> None:
        """The live catalog changed: every member loop looks for kinds to watch."""
        self._catalog.bump()

    async def _members(self) -> None:
        """One copy watcher per fleet member, following the member set: members registered
        (MemberCluster objects) after the controller started get theirs too, and removed
        members' watchers stop."""
        running: dict[str, asyncio.Task[None]] = {}
        seen = -1
        try:
            while True:
                names = set(self._fleet.names())
                for name in sorted(names - running.keys()):
                    running[name] = guarded(self._member(name), name=f"copies:{name}")
                for name in sorted(running.keys() - names):
                    await cancel_all([running.pop(name)])
                seen = await self._fleet.members_pulse.wait(seen, timeout=5.0)
        finally:
            await cancel_all(list(running.values()))

    async def stop(self) -> None:
        await cancel_all(self._tasks)

    async def _member(self, name: str) -> None:
        """Wait for a client, watch every served kind (kinds the member starts serving later
        are added as the fleet discovers them); start over when the member is lost."""
        seen = (-1, -1)
        while True:
            client = self._fleet.client(name)
            if client is None:
                seen = await self._wake(name, seen)
                continue
            tasks: list[asyncio.Task[None]] = []
            watched: set[GroupKind] = set()
            try:
                while self._fleet.client(name) is client:
                    self._start_kinds(name, client, watched, tasks)
                    seen = await self._wake(name, seen)
            finally:
                await cancel_all(tasks)
                self._copies.unsync(name)

    async def _wake(self, name: str, seen: tuple[int, int]) -> tuple[int, int]:
        """Wait for this member's state pulse or a catalog change (at most
        ``idle_wake_s``)."""
        state = self._fleet.state_pulse(name)
        await wait_any(((state, seen[0]), (self._catalog, seen[1])), timeout=self._idle_wake_s)
        self.wakeups[name] += 1
        return state.version, self._catalog.version

    def _start_kinds(self, name: str, client: KubeClient, watched: set[GroupKind],
                     tasks: list[asyncio.Task[None]]) -> None:
        """Start a copy watch for each catalog kind the member serves and is not watched.

        ``watched`` holds ``GroupKind``s: one watch per kind whatever the version, as the
        apiserver serves every version of a kind from the same objects."""
        resources = self._fleet.resources(name)
        if resources is None:
            return  # not discovered yet: its state pulse moves when it is
        workloads = self._fleet.kueue_workloads(name)
        if workloads is not None and workloads.gvk.group_kind not in watched:
            watched.add(workloads.gvk.group_kind)
            tasks.append(guarded(self._admissions(name, client, workloads),
                                 name=f"copies:{name}:admissions"))
        for gvk in self._live.current.kinds():
            ref = resources.get(gvk)
            if ref is None or gvk.group_kind in watched:
                continue
            watched.add(gvk.group_kind)
            tasks.append(guarded(self._kind(name, client, ref),
                                 name=f"copies:{name}:{ref.kind}"))

    async def _admissions(self, member: str, client: KubeClient, ref: ResourceRef) -> None:
        """The member's Kueue Workloads: each copy's admission (``fleet.admission``) into
        the copy cache; the hub workload of a copy whose admission changed is kicked."""
        copies = self._copies

        def kick(copy_uid: str) -> None:
            uid = copies.hub_uid(member, copy_uid)
            if uid is not None:
                self._kick(uid)

        async def body() -> None:
            async for item in watch.informer(client, ref):
                if isinstance(item, watch.Listed):
                    fresh = {u: admission.of(o) for o in item.objects
                             if (u := admission.copy_uid(o)) is not None}
                    for changed in copies.relist_admissions(member, fresh):
                        kick(changed)
                    continue
                owner = admission.copy_uid(item.object)
                if owner is None:
                    continue
                after = None if item.type == "DELETED" else admission.of(item.object)
                if copies.admission(member, owner) != after:
                    copies.set_admission(member, owner, after)
                    kick(owner)

        def lost() -> None:
            copies.relist_admissions(member, {})

        await forever(f"{member} admissions", body, on_error=lost)

    async def _kind(self, member: str, client: KubeClient, ref: ResourceRef) -> None:
        kind = ref.gvk

        def lost() -> None:
            self._copies.unsync(member, kind)

        async def body() -> None:
            async for item in watch.informer(client, ref,
                                             label_selector=f"{ORIGIN_LABEL}={self._hub_id}"):
                now = self._monotonic()
                if isinstance(item, watch.Listed):
                    fresh: dict[str, MemberCopy] = {}
                    for obj in item.objects:
                        uid = stamped(obj, hub_id=self._hub_id)
                        if uid:
                            fresh[uid] = await member_copy(
                                obj, live=self._live, seen_at=now,
                                previous=self._copies.get(member, uid))
                    for uid in self._copies.relist(member, kind, fresh):
                        self._kick(uid)
                    continue
                uid = stamped(item.object, hub_id=self._hub_id)
                if not uid:
                    continue
                if item.type == "DELETED":
                    self._copies.drop(member, uid)
                elif self._copies.holds(member, uid, item.object):
                    continue  # the echo of our own create or update
                else:
                    self._copies.put(member, uid, await member_copy(
                        item.object, live=self._live, seen_at=now,
                        previous=self._copies.get(member, uid)))
                self._kick(uid)

        await forever(f"{member} {kind.key}", body, on_error=lost)
