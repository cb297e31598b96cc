"""The shell around ``decide``: read a snapshot, decide, execute, repeat.

Fed by ``Workers`` (one call per hub workload uid at a time), reads ``HubCache``,
``CopyCache`` and the ``FleetView``, writes the hub (finalizer, Dispatch, status mirror),
the members (create, delete-if-owned) and the log. Every write's response goes back into
the caches, so the next ``decide`` sees it. Placement and its reservation happen without an
``await`` in between, so two decisions can never take the same GPUs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import structlog

from dispatcher.control import actions, admission, parking
from dispatcher.control import record as records
from dispatcher.control.caches import CopyCache, HubCache, HubItem, MemberCopy, kind_key
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.copies import Rejection, build_copy, delete_if_owned, owner_state
from dispatcher.control.decide import Action, ActionKind, Copy, CopyState, Snapshot, decide
from dispatcher.control.events import EventRecorder
from dispatcher.control.fleetview import FleetView
from dispatcher.control.names import FINALIZER, Phase
from dispatcher.control.observe import Metrics
from dispatcher.control.priority import InvalidPriority
from dispatcher.control.queue import Entry, PendingQueue
from dispatcher.control.settings import ControlSettings
from dispatcher.control.workers import Workers
from dispatcher.fleet.reservations import Reservation
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import (
    Conflict,
    Forbidden,
    Invalid,
    KubeError,
    NotFound,
    ServerError,
)
from dispatcher.kube.patches import strip_nulls
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, PODS, ResourceRef
from dispatcher.placement import engine
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    PlacementError,
    PlacementRequest,
    Verdict,
)
from dispatcher.workloads.bounded import DefinitionQuarantined
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import TemplateError, WorkloadError
from dispatcher.workloads.model import Definition
from dispatcher.workloads.mutate import PodTemplate, pod_templates
from dispatcher.workloads.paths import in_process
from dispatcher.workloads.resolve import Resolution
from dispatcher.workloads.trace import resolved_event

_T = TypeVar("_T")

__all__ = ["Reconciler", "member_copy", "restrict"]

log = structlog.get_logger("dispatcher")

MAX_STEPS = 12
_FOREIGN_RECHECK_S = 30.0
_WAIT_FALLBACK_S = 5.0


_STATUS_MEMO: dict[tuple[int, str], tuple[str, tuple[str, ...]]] = {}
_STATUS_MEMO_SIZE = 4096


async def member_copy(obj: Mapping[str, Any], *, live: LiveCatalog, seen_at: float,
                      previous: MemberCopy | None = None) -> MemberCopy:
    """A copy as cached: its generic status read through the current catalog.

    Unknown when the definition cannot read it; when the kind has no definition any more
    (its hub definition deleted, no built-in one), the last reading is kept: the workload
    keeps running and its Dispatch is left alone. The reading depends only on the
    definition and the object's spec and status, so it is memoised on those (copies are
    re-read on every event, most of which change neither). Untrusted definitions are read
    in the bounded worker pool, never on the event loop.
    """
    definition = live.current.find(str(obj.get("apiVersion")), str(obj.get("kind")))
    if definition is None:
        generic, statuses = ((previous.generic, previous.statuses) if previous is not None
                             else ("unknown", ("unknown",)))
        return MemberCopy(obj=obj, generic=generic, statuses=statuses, seen_at=seen_at)
    try:
        key = (id(definition), json.dumps([obj.get("apiVersion"), obj.get("kind"),
                                           obj.get("spec"), obj.get("status")],
                                          sort_keys=True, default=str))
    except (TypeError, ValueError):
        key = None
    cached = _STATUS_MEMO.get(key) if key is not None else None
    if cached is None:
        try:
            reading = (live.evaluator.status(obj) if live.trusted(definition)
                       else await live.evaluator.status_async(obj))
            cached = (reading.status, reading.statuses)
        except WorkloadError as exc:
            if isinstance(exc, DefinitionQuarantined):
                live.notify_quarantine()
            cached = ("unknown", ("unknown",))
        if key is not None:
            if len(_STATUS_MEMO) >= _STATUS_MEMO_SIZE:
                _STATUS_MEMO.clear()
            _STATUS_MEMO[key] = cached
    return MemberCopy(obj=obj, generic=cached[0], statuses=cached[1], seen_at=seen_at)


def restrict(members: Sequence[MemberSnapshot], *, excluded: Sequence[str], namespace: str,
             allowed: Callable[[str], tuple[str, ...]]) -> list[MemberSnapshot]:
    """Members as this workload may use them: the ones an earlier attempt gave up on, and
    the ones that do not take its namespace, turn not-ready with that reason (so the
    decision's summary says why, and a pin to them is explained rather than rejected)."""
    out = []
    for member in members:
        namespaces = allowed(member.name)
        reason = ("excluded: an earlier attempt there failed" if member.name in excluded
                  else f"namespace {namespace} not allowed there"
                  if namespaces and namespace not in namespaces else "")
        out.append(replace(member, ready=False, not_ready_reason=reason) if reason else member)
    return out


def _no_choice(summary: str, *, policy: str) -> Decision:
    return Decision(policy=policy, pods=0, gpus=0, gangs=0, verdicts=(), chosen=None,
                    assignment=(), summary=summary)


class Reconciler:
    """Executes ``decide``'s actions for one workload at a time (see the module docstring)."""

    def __init__(self, *, settings: ControlSettings, live: LiveCatalog, hub: KubeClient,
                 fleet: FleetView, hub_cache: HubCache, copies: CopyCache,
                 queue: PendingQueue, metrics: Metrics, events: EventRecorder | None,
                 workers: Workers | None = None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.settings = settings
        self.live = live
        self.hub = hub
        self.fleet = fleet
        self.cache = hub_cache
        self.copies = copies
        self.queue = queue
        self.metrics = metrics
        self.events = events
        self.workers = workers
        self.clock = clock
        self.monotonic = monotonic
        self._resolved: dict[str, tuple[int, int, Resolution | WorkloadError]] = {}
        self._foreign: dict[tuple[str, str], float] = {}
        self._mirrored: dict[str, str] = {}  # uid -> copy resourceVersion last mirrored
        self._bare = parking.BareFleet()  # what the fleet could ever run (``_place``)

    @property
    def catalog(self) -> Catalog:
        """The catalog in effect now (it changes as hub definitions do)."""
        return self.live.current

    # -- snapshot ------------------------------------------------------------------------

    def snapshot(self, uid: str, decision: Decision | None = None) -> Snapshot:
        """The frozen input of ``decide`` for ``uid``, from the caches."""
        now = self.clock()
        item = self.cache.workload(uid)
        raw = self.cache.record(uid)
        record = records.read(raw) if raw is not None else None
        workload = item.obj if item is not None else None
        snap = Snapshot(now=now, workload=workload, record=record, decision=decision,
                        rules=self.settings.rules)
        cluster = record.cluster if record is not None else None
        if cluster is None or workload is None:
            return snap
        health = self.fleet.health(cluster)
        return replace(snap, health=health,
                       copy=self._copy(cluster, uid, workload) if health.reachable
                       else Copy(state=CopyState.UNKNOWN))

    def _copy(self, cluster: str, uid: str, workload: Mapping[str, Any]) -> Copy:
        found = self.copies.get(cluster, uid)
        if found is not None:
            rv = str(found.obj["metadata"].get("resourceVersion", ""))
            if self._mirrored.get(uid) == rv:  # pruned fields would never compare equal
                status = workload.get("status") or {}
            else:
                status = strip_nulls(found.obj.get("status") or {})
            return Copy(state=CopyState.OURS, uid=str(found.obj["metadata"].get("uid", "")),
                        status=status, generic=found.generic)
        seen = self._foreign.get((cluster, uid))
        if seen is not None and self.clock() - seen < _FOREIGN_RECHECK_S:
            return Copy(state=CopyState.FOREIGN)
        key = kind_key(str(workload.get("apiVersion")), str(workload.get("kind")))
        synced = (cluster, key) in self.copies.synced
        return Copy(state=CopyState.ABSENT if synced else CopyState.UNKNOWN)

    # -- loop ------------------------------------------------------------------------------

    def workload_fields(self, uid: str) -> dict[str, str]:
        """What names the workload in every log line about it: namespace, name, kind, uid."""
        item = self.cache.workload(uid)
        if item is not None:
            meta = item.obj.get("metadata") or {}
            return {"namespace": str(meta.get("namespace") or ""),
                    "name": str(meta.get("name") or ""),
                    "kind": str(item.obj.get("kind") or ""), "uid": uid}
        raw = self.cache.record(uid) or {}
        ref = (raw.get("spec") or {}).get("workload") or {}
        return {"namespace": str((raw.get("metadata") or {}).get("namespace") or ""),
                "name": str(ref.get("name") or ""), "kind": str(ref.get("kind") or ""),
                "uid": uid}

    async def reconcile(self, uid: str) -> None:
        """Decide and act until nothing is left to do now (at most ``MAX_STEPS`` steps).

        Every log line written meanwhile names the workload (``workload_fields``)."""
        with structlog.contextvars.bound_contextvars(**self.workload_fields(uid)):
            await self._reconcile(uid)

    async def _reconcile(self, uid: str) -> None:
        decision: Decision | None = None
        for _ in range(MAX_STEPS):
            snap = self.snapshot(uid, decision)
            action = decide(snap)
            if action.kind in (ActionKind.NOTHING, ActionKind.WAIT):
                self._idle(uid, snap, action)
                return
            if action.kind is ActionKind.PLACE:
                assert snap.workload is not None
                await self.prepare(uid, snap.workload)
                decision = self._place(uid, snap)
                continue
            if not await self._execute(uid, snap, action, decision):
                return
            decision = None  # used by the step right after PLACE only; a retreat needs anew

    def _idle(self, uid: str, snap: Snapshot, action: Action) -> None:
        if snap.workload is None:
            self.release(uid)
            self.queue.remove(uid)
            self._resolved.pop(uid, None)
            self._mirrored.pop(uid, None)
            self.metrics.pending.set(len(self.queue))
            return
        delay = action.recheck_after
        if delay is None and action.kind is ActionKind.WAIT:
            delay = _WAIT_FALLBACK_S
        if delay is not None and self.workers is not None:
            self.workers.later(uid, max(delay, 0.05))

    # -- placement (synchronous: decision and reservation in one step) ---------------------

    async def prepare(self, uid: str, workload: Mapping[str, Any]) -> None:
        """Resolve the workload through its current definition, once per generation and
        definition (logged once): untrusted definitions in the bounded worker pool, so
        ``_place`` (synchronous: decision and reservation in one step) only reads the
        result. A definition quarantined meanwhile is reported to the live catalog."""
        generation = int(workload["metadata"].get("generation") or 0)
        definition = self.catalog.find(str(workload.get("apiVersion")),
                                       str(workload.get("kind")))
        cached = self._resolved.get(uid)
        if cached is not None and cached[:2] == (generation, id(definition)):
            return
        try:
            resolution: Resolution | WorkloadError = \
                await self.live.evaluator.resolve_async(workload)
        except WorkloadError as exc:
            resolution = exc
            if isinstance(exc, DefinitionQuarantined):
                self.live.notify_quarantine()
        self._resolved[uid] = (generation, id(definition), resolution)
        if isinstance(resolution, Resolution):
            self._log_resolved(uid, workload, resolution)

    def resolution(self, uid: str, workload: Mapping[str, Any]) -> Resolution:
        """The workload resolved by ``prepare`` (WorkloadError when it could not be, or
        was not prepared for the current generation and definition)."""
        generation = int(workload["metadata"].get("generation") or 0)
        definition = self.catalog.find(str(workload.get("apiVersion")),
                                       str(workload.get("kind")))
        cached = self._resolved.get(uid)
        if cached is None or cached[:2] != (generation, id(definition)):
            if definition is None:
                self.catalog.require(workload)  # NoDefinitionError naming what is loaded
            raise WorkloadError("not resolved yet (the definition changed meanwhile)")
        if isinstance(cached[2], WorkloadError):
            raise cached[2]
        return cached[2]

    def _log_resolved(self, uid: str, workload: Mapping[str, Any],
                      resolution: Resolution) -> None:
        meta = workload["metadata"]
        namespace = str(meta.get("namespace") or "")
        try:  # the effective priority (``_place`` parks a junk one before resolving)
            priority = self.settings.priority.of(meta.get("annotations"), namespace)
        except InvalidPriority:
            priority = self.settings.priority.of(None, namespace)
        event = resolved_event(ts=records.format_time(self.clock()), uid=uid,
                               namespace=namespace,
                               name=str(meta["name"]), api_version=resolution.api_version,
                               kind=resolution.kind, definition=resolution.definition_name,
                               demand=resolution.demand,
                               priority=priority)
        event.pop("ts")
        log.info(event.pop("event"), **event)

    def _place(self, uid: str, snap: Snapshot) -> Decision:
        """Place ``uid`` now, or say why not: parked when it can never wait usefully
        (invalid annotations, unresolvable, no member could ever run it: see
        ``control.parking``), queued when it only needs capacity or its namespace's gate
        holds it."""
        workload, record = snap.workload, snap.record
        assert workload is not None and record is not None
        meta = workload["metadata"]
        policy = self.settings.default_policy
        namespace = str(meta.get("namespace") or "")
        entry = Entry(uid=uid, priority=0, namespace=namespace,
                      created=records.parse_time(meta.get("creationTimestamp")) or snap.now,
                      name=f"{namespace}/{meta['name']}")
        try:
            entry = replace(entry, priority=self.settings.priority.of(
                meta.get("annotations"), namespace))
        except InvalidPriority as exc:
            return self._park(entry, str(exc), policy=policy)
        try:
            resolution = self.resolution(uid, workload)
        except TemplateError as exc:
            return self._park(entry, f"{parking.INVALID_TEMPLATE}{exc.path}: {exc.reason}; "
                                     f"never submitted until it is fixed", policy=policy)
        except WorkloadError as exc:
            return self._park(entry, f"cannot resolve: {str(exc).splitlines()[0][:500]}",
                              policy=policy)
        held = [m for m in self.copies.where(uid) if self.fleet.health(m).reachable]
        if held:  # a copy already exists (record lost or requeued): adopt, never duplicate
            self.queue.remove(uid)
            return Decision(policy=policy, pods=resolution.demand.pods,
                            gpus=resolution.demand.gpus, gangs=len(resolution.demand.gangs),
                            verdicts=(Verdict(member=held[0], feasible=True, free=0,
                                              reason="a copy of this workload is there"),),
                            chosen=held[0], assignment=(),
                            summary=f"adopting the copy already on {held[0]}")
        request = self._request(workload, resolution)
        invalid = parking.annotation_error(request)
        if invalid is not None:
            return self._park(entry, invalid, policy=policy)
        blocker = self.queue.gate(entry)
        if blocker is not None:
            self.queue.add(entry)
            return _no_choice(f"waiting behind {blocker.name} (bypassed "
                              f"{self.queue.bypasses(blocker.uid)} times; backfill limit "
                              f"{self.queue.backfill_limit} in namespace {namespace})",
                              policy=policy)
        members = self._members(workload, excluded=record.excluded)
        try:
            decision = engine.decide(members, request)
        except PlacementError as exc:  # the pinned member does not exist
            return self._park(entry, f"{parking.UNPLACEABLE}{exc}", policy=policy)
        log.info("placement.decided", uid=uid, **decision.to_dict())
        if decision.chosen is None:
            bare, unknown = self._bare.view(self.fleet.snapshots())
            never = parking.unplaceable(
                self._restrict(bare, workload, excluded=record.excluded), request,
                unknown=unknown)
            if never is not None:
                return self._park(entry, never, policy=policy)
            self.queue.add(entry)
            return decision
        reservations = self.fleet.reservations(decision.chosen)
        if reservations is not None and decision.assignment:
            reservations.add(Reservation(
                workload_uid=uid, member=decision.chosen,
                nodes=tuple((g.node, g.gpus) for g in decision.assignment),
                expires_at=snap.now + self.settings.reservation_ttl_s))
        self.queue.placed(entry)
        self.metrics.pending.set(len(self.queue))
        return decision

    def _park(self, entry: Entry, reason: str, *, policy: str) -> Decision:
        """``entry`` waits outside the gate (``PendingQueue.park``); ``reason`` is its
        Pending message."""
        self.queue.park(entry, reason)
        return _no_choice(reason, policy=policy)

    def _request(self, workload: Mapping[str, Any], resolution: Resolution
                 ) -> PlacementRequest:
        meta = workload["metadata"]
        request = PlacementRequest.from_annotations(
            demand=resolution.demand, api_version=resolution.api_version,
            kind=resolution.kind, annotations=meta.get("annotations") or {},
            default_policy=self.settings.default_policy,
            namespace=str(meta.get("namespace") or ""))
        return replace(request, exhaustive=True)  # every member's verdict in the log

    def _members(self, workload: Mapping[str, Any], *, excluded: Sequence[str]
                 ) -> list[MemberSnapshot]:
        return self._restrict(self.fleet.snapshots(), workload, excluded=excluded)

    def _restrict(self, members: Sequence[MemberSnapshot], workload: Mapping[str, Any], *,
                  excluded: Sequence[str]) -> list[MemberSnapshot]:
        return restrict(members, excluded=excluded,
                        namespace=str(workload["metadata"].get("namespace") or "default"),
                        allowed=self.fleet.allowed_namespaces)

    async def alternatives(self, uid: str, snap: Snapshot, *, without: str
                           ) -> tuple[str, ...]:
        """Members that could still take the workload once ``without`` is excluded too."""
        workload, record = snap.workload, snap.record
        assert workload is not None and record is not None
        await self.prepare(uid, workload)
        try:
            resolution = self.resolution(uid, workload)
            return engine.eligible(
                self._members(workload, excluded=(*record.excluded, without)),
                self._request(workload, resolution))
        except (WorkloadError, PlacementError):
            return ()

    def forget_readings(self) -> None:
        """The catalog changed: drop every reading keyed by a definition's identity (a
        replaced definition's id may be reused by a new one)."""
        self._resolved.clear()
        _STATUS_MEMO.clear()

    async def note_definition(self, uid: str, *, present: bool, kind: str) -> None:
        """Say on a dispatched workload's Dispatch that its kind lost (or regained) its
        definition. Nothing else changes: the copy keeps running, its status keeps the
        last reading, nothing is deleted."""
        raw = self.cache.record(uid)
        if raw is None or records.read(raw).cluster is None:
            return  # not dispatched: the next decision says "cannot resolve"
        message = (f"a definition serves {kind} again" if present else
                   f"no definition serves {kind} any more (its hub definition was deleted "
                   f"and there is no built-in or config one): the copy is left running, "
                   f"its last status reading kept, and no new workload of this kind is "
                   f"dispatched")
        with contextlib.suppress(KubeError):
            await self.patch_record(uid, {"conditions": [records.condition(
                type_="Definition", status=present,
                reason="DefinitionRestored" if present else "DefinitionRemoved",
                message=message, now=self.clock())]})

    def demand_patch(self, uid: str) -> dict[str, Any]:
        """``status.demand`` and ``status.definition`` when ``uid`` was resolved, else {}."""
        cached = self._resolved.get(uid)
        if cached is None or not isinstance(cached[2], Resolution):
            return {}
        return records.demand_status(demand=cached[2].demand,
                                     definition=cached[2].definition_name)

    def release(self, uid: str) -> None:
        """Drop ``uid``'s reservation wherever it is held."""
        for name in self.fleet.names():
            reservations = self.fleet.reservations(name)
            if reservations is not None:
                reservations.release(uid)

    # -- actions ---------------------------------------------------------------------------

    async def _execute(self, uid: str, snap: Snapshot, action: Action,
                       decision: Decision | None) -> bool:
        """Run one action; True when the loop should decide again right away."""
        return await actions.execute(self, uid=uid, snap=snap, action=action,
                                     decision=decision)

    # -- write helpers used by ``actions`` -------------------------------------------------

    async def patch_record(self, uid: str, status: dict[str, Any]) -> Mapping[str, Any]:
        """Merge-patch the Dispatch status (conditions merged by type); updates the cache."""
        raw = self.cache.record(uid)
        assert raw is not None
        if "conditions" in status:
            status = {**status, "conditions": records.merge_conditions(
                (raw.get("status") or {}).get("conditions") or (), status["conditions"])}
        meta = raw["metadata"]
        updated = await self.hub.request(
            "PATCH", DISPATCHES.item(meta["name"], meta["namespace"], "status"),
            body={"status": status}, content_type=JSON_MERGE_PATCH)
        self.cache.put_record(updated, force=True)
        return updated  # type: ignore[no-any-return]

    async def patch_workload(self, item: HubItem, body: Mapping[str, Any], *,
                             subresource: str = "") -> None:
        """Merge-patch the hub workload (or its status); updates the cache."""
        meta = item.obj["metadata"]
        updated = await self.hub.request(
            "PATCH", item.ref.item(meta["name"], meta.get("namespace"), subresource),
            body=body, content_type=JSON_MERGE_PATCH)
        self.cache.put(item.ref, updated, force=True)

    async def ensure_namespace(self, client: KubeClient, namespace: str) -> None:
        """Create ``namespace`` on a member with the hub namespace's Pod Security labels,
        never below ``submit.podSecurityFloor`` (``admission.namespace_labels``)."""
        try:
            hub_ns = await self.hub.request("GET", NAMESPACES.item(namespace))
            hub_labels = (hub_ns.get("metadata") or {}).get("labels") or {}
        except KubeError:
            hub_labels = {}  # unreadable: the floor alone applies
        labels = admission.namespace_labels(hub_labels,
                                            floor=self.settings.pod_security_floor)
        with contextlib.suppress(Conflict):
            await client.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": namespace, "labels": labels}})

    async def create_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any]
                          ) -> bool | Rejection:
        """Create the copy on ``cluster``: True when it exists now (created or ours), False
        to look again later (not connected, or a foreign object holds the name), a
        ``Rejection`` when the member refused it for good (or it cannot be built).
        Transient failures (no answer, 429, 5xx) raise, for the worker's back-off."""
        client = self.fleet.client(cluster)
        if client is None:
            return False
        namespace = str(workload["metadata"].get("namespace") or "default")
        try:
            body, templates = await self._off_loop(workload, self._copy_and_templates)
            pods = admission.dry_run_pods(templates, namespace=namespace)
        except WorkloadError as exc:
            if isinstance(exc, DefinitionQuarantined):
                self.live.notify_quarantine()
            return Rejection.of(cluster, status=0, reason="CopyInvalid", message=str(exc))
        ref = await client.discovery.resource(str(workload["apiVersion"]),
                                              str(workload["kind"]))
        if ref is None:
            return Rejection.of(cluster, status=404, reason="NotServed",
                                message=f"{cluster} does not serve {workload['kind']} "
                                        f"({workload['apiVersion']})")
        try:
            created = await self._submit(client, ref, cluster=cluster, namespace=namespace,
                                         body=body, pods=pods)
        except Conflict:
            existing = await client.request("GET", ref.item(body["metadata"]["name"],
                                                            namespace))
            if owner_state(existing, hub_id=self.settings.hub_id,
                           hub_uid=uid) is CopyState.OURS:
                self.copies.put(cluster, uid, await self.cached_copy(existing))
                return True
            self._foreign[(cluster, uid)] = self.clock()
            return False
        except KubeError as exc:
            if not exc.permanent:
                raise
            return Rejection.of(cluster, status=exc.status, reason=exc.reason or
                                type(exc).__name__, message=exc.detail)
        if isinstance(created, Rejection):
            return created
        self.copies.put(cluster, uid, await self.cached_copy(created))
        return True

    async def _submit(self, client: KubeClient, ref: ResourceRef, *, cluster: str,
                      namespace: str, body: Mapping[str, Any],
                      pods: Sequence[Mapping[str, Any]]) -> Any:
        """Admission dry-run of the pods, then the create; the namespace is created first
        when it is missing and ``submit.createNamespaces`` allows it."""
        for last in (False, True):
            try:
                refused = await self._admit(client, cluster=cluster, namespace=namespace,
                                            pods=pods)
                if refused is not None:
                    return refused
                return await client.request("POST", ref.collection(namespace), body=body)
            except NotFound as exc:
                if last or f'namespaces "{namespace}" not found' not in exc.detail:
                    raise
                if not self.settings.create_namespaces:
                    return Rejection.of(
                        cluster, status=404, reason="NamespaceMissing",
                        message=f"namespace {namespace} does not exist on {cluster}; the "
                                f"member's operator prepares the namespaces it takes "
                                f"(submit.createNamespaces is off)")
                await self.ensure_namespace(client, namespace)
        raise AssertionError("unreachable")

    async def _admit(self, client: KubeClient, *, cluster: str, namespace: str,
                     pods: Sequence[Mapping[str, Any]]) -> Rejection | None:
        """The member's admission verdict on each pod template (``dryRun=All``): a
        Rejection on a refusal (403); a pod invalid as such (422: an operator completes
        it) is not the admission's word and passes."""
        for pod in pods:
            try:
                await client.request("POST", PODS.collection(namespace), body=pod,
                                     query=[("dryRun", "All")])
            except (Forbidden, Invalid) as exc:
                if isinstance(exc, Invalid):
                    continue
                if 'cannot create resource "pods"' in exc.detail:
                    # RBAC, not admission: this identity cannot ask (deploy/member grants
                    # it); the copy is still created, and the log says what was skipped
                    log.warning("admission.unchecked", member=cluster, namespace=namespace,
                                message=exc.detail[:300])
                    return None
                if 'serviceaccount "default" not found' in exc.detail:
                    # a namespace seconds old: the member's controller-manager creates its
                    # default ServiceAccount shortly; try again (worker back-off)
                    raise ServerError(f"{cluster}: {exc.detail}", status=503,
                                      reason="ServiceAccountPending") from None
                return Rejection.of(cluster, status=exc.status, reason="PodNotAdmitted",
                                    message=f"a pod of this workload would not be admitted "
                                            f"in namespace {namespace}: {exc.detail}")
        return None

    async def delete_copy(self, uid: str, *, cluster: str, workload: Mapping[str, Any]
                          ) -> bool:
        """Delete our copy of ``uid`` on ``cluster`` (only if owned)."""
        client = self.fleet.client(cluster)
        found = self.copies.get(cluster, uid)
        if client is None:
            return False
        obj = found.obj if found is not None else workload
        ref = await client.discovery.resource(str(obj["apiVersion"]), str(obj["kind"]))
        if ref is None:
            return False
        deleted = await delete_if_owned(
            client, ref, namespace=str(obj["metadata"].get("namespace") or "default"),
            name=str(obj["metadata"]["name"]), hub_id=self.settings.hub_id, hub_uid=uid)
        self.copies.drop(cluster, uid)
        return deleted

    async def copy_body(self, workload: Mapping[str, Any]) -> dict[str, Any]:
        """The member copy of ``workload`` (stamped, mutated)."""
        return await self._off_loop(workload, self._copy_of)

    def _copy_of(self, workload: Mapping[str, Any], definition: Definition | None
                 ) -> dict[str, Any]:
        locate = self.live.evaluator.locator(definition) if definition is not None \
            else in_process
        return build_copy(workload, hub_id=self.settings.hub_id, definition=definition,
                          mutations=self.settings.pod_mutations, locate=locate)

    def _copy_and_templates(self, workload: Mapping[str, Any], definition: Definition | None
                            ) -> tuple[dict[str, Any], list[PodTemplate]]:
        body = self._copy_of(workload, definition)
        if definition is None or not self.settings.admission_check:
            return body, []
        return body, pod_templates(body, definition,
                                   locate=self.live.evaluator.locator(definition))

    async def _off_loop(self, workload: Mapping[str, Any],
                        build: Callable[[Mapping[str, Any], Definition | None], _T]) -> _T:
        """``build(workload, definition)``: on a thread when the definition is untrusted,
        whose path expressions run in the bounded workers (a wait of up to the deadline
        must not hold the event loop)."""
        definition = self.catalog.find(str(workload["apiVersion"]), str(workload["kind"]))
        if definition is None or self.live.trusted(definition):
            return build(workload, definition)
        return await asyncio.to_thread(build, workload, definition)

    async def cached_copy(self, obj: Mapping[str, Any]) -> MemberCopy:
        """``obj`` as the copy cache holds it (generic status read now)."""
        return await member_copy(obj, live=self.live, seen_at=self.monotonic())

    def remember_mirrored(self, uid: str, copy_rv: str) -> None:
        self._mirrored[uid] = copy_rv

    def event(self, workload: Mapping[str, Any], *, reason: str, message: str,
              warning: bool = False) -> None:
        if self.events is not None:
            self.events.record(workload=workload, reason=reason, message=message,
                               warning=warning)

    def finalizers_without_ours(self, workload: Mapping[str, Any]) -> list[str]:
        return [f for f in workload["metadata"].get("finalizers") or () if f != FINALIZER]

    def phase_for(self, generic: str) -> str:
        return Phase.of_generic(generic).value
