"""MultiKueue's external dispatcher: nominate the worker whose nodes fit each hub Workload.

The shell around ``control.core.nomination``: with ``mode: multikueue-dispatcher`` the hub
runs Kueue as a MultiKueue manager whose ``multiKueue.dispatcherName`` is ours
(``DISPATCHER_NAME``); Kueue keeps the tenancy and creates the copies, we choose where.
Watched on the hub: Workloads (the watched namespaces), AdmissionChecks and
MultiKueueConfigs (which checks are MultiKueue's, and their workers). A Workload waiting
for a worker is resolved through its job's definition (the job read from the hub; its pod
sets when no definition knows the job), placed over the workers by ``place_ask`` and
nominated by a server-side apply of its status as ``kueue-admission`` (Kueue v0.17.0's
contract for external dispatchers), carrying that manager's own fields unchanged
(``kube.ssa``). The chosen GPUs stay reserved until the copy's pods bind (recognised by
the job-name label its framework puts on them), it finishes, or the reservation expires.

Restarts lose nothing: the nominations are on the hub; a Workload nominated before the
restart has its nominee's GPUs held again and is given ``admitWithin`` from when it is
seen again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from typing import Any, cast

import structlog

from dispatcher.aiotasks import cancel_all, guarded
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import nomination
from dispatcher.control.core.nomination import NominationKind
from dispatcher.control.core.parking import BareFleet
from dispatcher.control.core.pending import meaning_key
from dispatcher.control.core.placing import Placement
from dispatcher.control.core.record import parse_time
from dispatcher.control.events import EventRecorder
from dispatcher.control.fleetview import FleetView
from dispatcher.control.settings import ControlSettings
from dispatcher.control.workers import Workers
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.resources import ResourceRef
from dispatcher.kube.ssa import apply_entry, owned
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.kueueworkload import (
    MULTIKUEUE_CONTROLLER,
    KueueWorkload,
    pod_sets_demand,
)

__all__ = ["ADMISSION_MANAGER", "CHECKS", "CONFIGS", "DISPATCHER_NAME", "WORKLOADS", "Nominator",
           "multikueue_checks"]

log = structlog.get_logger("dispatcher.nominator")

DISPATCHER_NAME = "dispatcher.io/multikueue-dispatcher"
"""What the Kueue manager's ``multiKueue.dispatcherName`` is set to for us."""
ADMISSION_MANAGER = "kueue-admission"
"""The field manager Kueue v0.17.0 asks an external dispatcher to write nominations as."""
_KUEUE = ("kueue.x-k8s.io", "v1beta2")
WORKLOADS = ResourceRef(group=_KUEUE[0], version=_KUEUE[1], kind="Workload",
                        plural="workloads", namespaced=True)
CHECKS = ResourceRef(group=_KUEUE[0], version=_KUEUE[1], kind="AdmissionCheck",
                     plural="admissionchecks", namespaced=False)
CONFIGS = ResourceRef(group=_KUEUE[0], version=_KUEUE[1], kind="MultiKueueConfig",
                      plural="multikueueconfigs", namespaced=False)
POD_LABELS = {("batch/v1", "Job"): "batch.kubernetes.io/job-name",
              ("jobset.x-k8s.io/v1alpha2", "JobSet"): "jobset.sigs.k8s.io/jobset-name"}
"""The label each framework puts on its pods, with the job's name: how the pods of a copy
MultiKueue made are told apart on a worker (other kinds: the reservation expires)."""
_RETRY_S = 5.0
_ROUND_S = 0.5


class Nominator:
    """Watches the hub's Kueue objects and nominates a worker per waiting Workload."""

    def __init__(self, *, hub: KubeClient, fleet: FleetView, live: LiveCatalog,
                 settings: ControlSettings, clock: Callable[[], float]) -> None:
        self.hub, self.fleet, self.live, self.settings = hub, fleet, live, settings
        self.clock = clock
        self.workloads: dict[str, dict[str, Any]] = {}
        self._checks: dict[str, str] = {}  # MultiKueue AdmissionCheck -> its config's name
        self._configs: dict[str, tuple[str, ...]] = {}  # MultiKueueConfig -> workers
        self._since: dict[str, tuple[tuple[str, ...], float]] = {}  # uid -> (list, seen at)
        self._listed: set[str] = set()
        self._bare = BareFleet()  # the workers with nothing running (standby nominations)
        self._said: dict[str, str] = {}  # uid -> the last waiting reason an Event said
        # uid -> (its generation, what it asks): its job is read and resolved once, not
        # at every round it waits through
        self._demands: dict[str, tuple[int, tuple[Demand, str, str, Mapping[str, str]]]] = {}
        self.events = EventRecorder(client=hub, clock=clock) if settings.record_events \
            else None
        self.listed = asyncio.Event()
        """Set once every watch listed (the replica's readiness)."""
        self.workers = Workers(handler=self._reconcile, concurrency=settings.workers,
                               describe=self._describe)
        self._tasks: list[asyncio.Task[None]] = []

    # -- watches ---------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Watch and nominate until ``stop``."""
        namespaces = self.settings.namespaces or ("",)
        self._tasks = [guarded(self._follow(CHECKS, ""), name="kueue-checks"),
                       guarded(self._follow(CONFIGS, ""), name="kueue-configs"),
                       *(guarded(self._follow(WORKLOADS, ns), name=f"kueue-workloads/{ns}")
                         for ns in namespaces),
                       guarded(self._on_fleet_changes(), name="nominator-fleet")]
        if self.events is not None:
            self._tasks.append(guarded(self.events.run(), name="events"))
        log.info("nominator.started", dispatcher_name=DISPATCHER_NAME,
                 namespaces=list(self.settings.namespaces) or "all")
        try:
            await stop.wait()
        finally:
            await self.workers.stop()
            await cancel_all(self._tasks)

    def _synced(self) -> None:
        namespaces = self.settings.namespaces or ("",)
        if {CHECKS.plural, CONFIGS.plural, *(f"{WORKLOADS.plural}/{ns}" for ns in namespaces)
            } <= self._listed:
            self.listed.set()

    async def _follow(self, ref: ResourceRef, namespace: str) -> None:
        key = f"{ref.plural}/{namespace}" if ref.namespaced else ref.plural
        while True:
            stream = cast(AsyncGenerator[watch.Listed | watch.Changed, None],
                          watch.informer(self.hub, ref, namespace=namespace or None))
            try:
                async with contextlib.aclosing(stream):
                    async for item in stream:
                        if isinstance(item, watch.Listed):
                            self._relist(ref, item.objects, namespace)
                            self._listed.add(key)
                            self._synced()
                        else:
                            self._apply(ref, item.type, item.object)
            except KubeError as exc:
                log.warning("nominator.watch_failed", resource=key, error=str(exc)[:300])
                await asyncio.sleep(_RETRY_S)

    def _relist(self, ref: ResourceRef, objects: list[dict[str, Any]], namespace: str
                ) -> None:
        if ref is WORKLOADS:  # one watched namespace's (or every one's: "")
            kept = {str(o["metadata"]["uid"]): o for o in objects}
            for uid in [u for u, o in self.workloads.items() if u not in kept and (
                    not namespace or o["metadata"].get("namespace") == namespace)]:
                self._gone(uid)
            self.workloads.update(kept)
            for uid in kept:
                self.workers.kick(uid)
            return
        if ref is CHECKS:
            self._checks = dict(filter(None, (_multikueue_check(o) for o in objects)))
        else:
            self._configs = {str(o["metadata"]["name"]): _workers(o) for o in objects}
        self._kick_waiting()

    def _apply(self, ref: ResourceRef, kind: str, obj: dict[str, Any]) -> None:
        name = str(obj["metadata"].get("name"))
        if ref is WORKLOADS:
            uid = str(obj["metadata"]["uid"])
            if kind == "DELETED":
                self._gone(uid)
            else:
                self.workloads[uid] = obj
            self.workers.kick(uid)
            return
        if ref is CHECKS:
            self._checks.pop(name, None)
            found = _multikueue_check(obj) if kind != "DELETED" else None
            if found is not None:
                self._checks[found[0]] = found[1]
        elif kind == "DELETED":
            self._configs.pop(name, None)
        else:
            self._configs[name] = _workers(obj)
        self._kick_waiting()

    def _gone(self, uid: str) -> None:
        self.workloads.pop(uid, None)
        self._since.pop(uid, None)
        self._said.pop(uid, None)
        self._demands.pop(uid, None)
        self._release(uid)

    async def _on_fleet_changes(self) -> None:
        """Capacity changed somewhere: what waits for a worker may fit now. At most one
        round per ``_ROUND_S`` (a burst of pod events is one change for this)."""
        async for _ in self.fleet.pulse.changes():
            self._kick_waiting()
            await asyncio.sleep(_ROUND_S)

    def _kick_waiting(self) -> None:
        checks = frozenset(self._checks)
        for uid, obj in self.workloads.items():
            if KueueWorkload.of(obj, checks, parse_time).waiting() is None:
                self.workers.kick(uid)

    # -- one Workload ----------------------------------------------------------------------

    def _describe(self, uid: str) -> Mapping[str, str]:
        meta = (self.workloads.get(uid) or {}).get("metadata") or {}
        return {"uid": uid, "namespace": str(meta.get("namespace", "")),
                "name": str(meta.get("name", ""))}

    async def _reconcile(self, uid: str) -> float | None:
        obj = self.workloads.get(uid)
        if obj is None:
            return None
        wl = KueueWorkload.of(obj, frozenset(self._checks), parse_time)
        now = self.clock()
        since = self._seen(wl, now)
        held = self._held(uid)
        fit = None
        over = nomination.needs_placement(wl, held=held, since=since, now=now,
                                          admit_within=self.settings.multikueue_admit_within_s)
        if over is not None:
            try:
                fit = await self._place(obj, wl, now, over)
            except ValueError as exc:  # Kueue validates pod sets: not expected
                log.warning("nomination.unreadable", **self._describe(uid), error=str(exc))
                return None
        answer = nomination.decide(wl, held=held, since=since, now=now,
                                   admit_within=self.settings.multikueue_admit_within_s,
                                   fit=fit)
        if answer.kind is NominationKind.RELEASE:
            self._release(uid)
            log.info("nomination.released", uid=uid, reason=answer.reason)
        elif answer.kind is NominationKind.NOMINATE:
            await self._nominate(obj, wl, answer)
        elif answer.kind is NominationKind.HOLD and answer.placement is not None \
                and answer.placement.reservation is not None:
            self._hold(wl, answer.placement.reservation)
            log.info("nomination.held", **self._describe(uid), reason=answer.reason)
        elif fit is not None:
            self._say(obj, uid, answer.reason, fit.now)
        return answer.recheck_after

    def _say(self, obj: Mapping[str, Any], uid: str, reason: str,
             placement: Placement) -> None:
        """``nomination.waiting`` and ``NoWorkerFits`` on the hub Workload when why it
        waits changes (its kind of reason, not its numbers: as the dispatch path's
        ``Pending``), not at every round it waits through."""
        key = meaning_key(placement)
        if self._said.get(uid) == key:
            return
        self._said[uid] = key
        log.info("nomination.waiting", **self._describe(uid), reason=reason)
        if self.events is not None:
            self.events.record(workload=obj, reason="NoWorkerFits", message=reason,
                               warning=True)

    def _seen(self, wl: KueueWorkload, now: float) -> float | None:
        """When the Workload's current nominations were first seen (None: none)."""
        if not wl.nominated:
            self._since.pop(wl.uid, None)
            return None
        known = self._since.get(wl.uid)
        if known is None or known[0] != wl.nominated:
            known = (wl.nominated, now)
            self._since[wl.uid] = known
        return known[1]

    async def _place(self, obj: Mapping[str, Any], wl: KueueWorkload, now: float,
                     over: nomination.Candidates) -> nomination.Fit:
        workers = set(self._configs.get(self._checks.get(wl.check or "", ""), ()))
        demand, api_version, kind, annotations = await self._demand(obj, wl)
        nominees = over is nomination.Candidates.NOMINEES
        candidates = [m for m in self.fleet.snapshots()
                      if m.name in workers and (m.name in wl.nominated) == nominees]
        return nomination.place(wl, demand, api_version=api_version, kind=kind,
                                annotations=annotations, members=lambda: candidates, now=now,
                                reservation_ttl_s=self.settings.reservation_ttl_s,
                                default_policy=self.settings.default_policy, bare=self._bare)

    async def _demand(self, obj: Mapping[str, Any], wl: KueueWorkload
                      ) -> tuple[Demand, str, str, Mapping[str, str]]:
        """What the Workload asks of a worker, once per Workload generation (its pod sets
        are immutable; its job's placement annotations are read when it first waits)."""
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        known = self._demands.get(wl.uid)
        if known is not None and known[0] == generation:
            return known[1]
        found, lasting = await self._read_demand(obj, wl)
        if lasting:
            self._demands[wl.uid] = (generation, found)
        return found

    async def _read_demand(self, obj: Mapping[str, Any], wl: KueueWorkload
                           ) -> tuple[tuple[Demand, str, str, Mapping[str, str]], bool]:
        """Its job resolved through its definition (gangs, topology, the job's
        placement annotations), else its pod sets; and whether that lasts (not when the
        job could not be read now). ValueError: pod sets that are no demand."""
        job = await self._job(wl)
        if job is not None and self.live.current.find(
                str(job.get("apiVersion")), str(job.get("kind"))) is not None:
            try:
                resolution = await self.live.evaluator.resolve_async(job)
            except WorkloadError as exc:
                log.info("nomination.pod_sets", uid=wl.uid, reason=str(exc)[:300])
            else:
                return (resolution.demand, resolution.api_version, resolution.kind,
                        (job.get("metadata") or {}).get("annotations") or {}), True
        owner = wl.owner or ("", "", "")
        return (pod_sets_demand(obj), owner[0], owner[1], {}), \
            job is not None or wl.owner is None

    async def _job(self, wl: KueueWorkload) -> dict[str, Any] | None:
        if wl.owner is None:
            return None
        api_version, kind, name = wl.owner
        try:
            ref = await self.hub.discovery.resource(api_version, kind)
            if ref is None:
                return None
            job: dict[str, Any] = await self.hub.request("GET", ref.item(name, wl.namespace))
        except KubeError:
            return None
        return job

    async def _nominate(self, obj: Mapping[str, Any], wl: KueueWorkload,
                        answer: nomination.Nomination) -> None:
        """Apply the nominations as ``kueue-admission`` (its fields kept), then hold the
        chosen GPUs; a conflict (the Workload changed meanwhile) is decided again."""
        status = owned(obj.get("status") or {},
                       (apply_entry(obj, manager=ADMISSION_MANAGER, subresource="status")
                        .get("f:status") or {}))
        meta = obj["metadata"]
        body = {"apiVersion": WORKLOADS.api_version, "kind": WORKLOADS.kind,
                "metadata": {"name": meta["name"], "namespace": meta["namespace"],
                             "uid": meta["uid"], "resourceVersion": meta["resourceVersion"]},
                "status": {**status, "nominatedClusterNames": list(answer.members)}}
        try:
            updated = await self.hub.request(
                "PATCH", WORKLOADS.item(meta["name"], meta["namespace"], "status"),
                query=[("fieldManager", ADMISSION_MANAGER), ("force", "true")], body=body,
                content_type="application/apply-patch+yaml")
        except (Conflict, NotFound):
            self.workers.later(wl.uid, 0.1)
            return
        self.workloads[wl.uid] = updated
        placement = answer.placement
        if placement is not None and placement.reservation is not None:
            self._hold(wl, placement.reservation)
        decision = placement.decision.to_dict() if placement is not None else {}
        log.info("nomination.decided", **self._describe(wl.uid), nominated=list(answer.members),
                 reason=answer.reason, **decision)
        self._said.pop(wl.uid, None)
        if self.events is not None:
            self.events.record(workload=updated, reason="Nominated",
                               message=f"nominated {', '.join(answer.members)}: "
                                       f"{answer.reason}")

    # -- reservations ----------------------------------------------------------------------

    def _hold(self, wl: KueueWorkload, reservation: Any) -> None:
        book = self.fleet.reservations(reservation.member)
        if book is None:
            return
        book.add(reservation)
        book.quota_by(wl.uid, f"{wl.namespace}/{wl.name}")  # MultiKueue's copy: same name
        owner = wl.owner
        label = POD_LABELS.get((owner[0], owner[1])) if owner else None
        if owner is not None and label is not None:
            book.attribute(namespace=wl.namespace, label=label, value=owner[2],
                           workload_uid=wl.uid)

    def _held(self, uid: str) -> str | None:
        """The worker we hold GPUs on for ``uid`` (None: none)."""
        for name in self.fleet.names():
            book = self.fleet.reservations(name)
            if book is not None and uid in book:
                return name
        return None

    def _release(self, uid: str) -> None:
        for name in self.fleet.names():
            book = self.fleet.reservations(name)
            if book is not None:
                book.release(uid)


def multikueue_checks(checks: Iterable[Mapping[str, Any]],
                      configs: Iterable[Mapping[str, Any]]) -> dict[str, tuple[str, ...]]:
    """MultiKueue's AdmissionChecks among ``checks`` -> the workers of their
    MultiKueueConfig (as listed in ``configs``)."""
    workers = {str(o["metadata"]["name"]): _workers(o) for o in configs}
    return {check: workers.get(config, ())
            for check, config in filter(None, map(_multikueue_check, checks))}


def _multikueue_check(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(check name, its MultiKueueConfig) of an AdmissionCheck of MultiKueue's, else None."""
    spec = obj.get("spec") or {}
    if spec.get("controllerName") != MULTIKUEUE_CONTROLLER:
        return None
    params = spec.get("parameters") or {}
    if params.get("kind") != "MultiKueueConfig":
        return None
    return str(obj["metadata"]["name"]), str(params.get("name") or "")


def _workers(obj: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(str(c) for c in (obj.get("spec") or {}).get("clusters") or ())
