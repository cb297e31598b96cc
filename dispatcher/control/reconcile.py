"""The shell around ``decide``: read a snapshot, decide, execute, repeat.

Fed by ``Workers`` (one call per hub workload uid at a time). Reads ``HubCache``,
``CopyCache`` and the ``FleetView`` into a ``Snapshot``; ``decide`` (pure, with placement
inside it: ``control.core.placing``) answers an ``Action``; the shell applies the action's
placement (queue step, reservation), plans the copy a SUBMIT or UPDATE_COPY writes
(``control.planner``) and runs the action through the two ports (``control.writer``: hub
writes, member writes), which answers an ``Outcome``; its local effects (a reservation
released, the workload forgotten, what the step saw) are applied before the next snapshot.
It returns when to look again, and the worker schedules that. Placement and its
reservation happen without an ``await`` in between (snapshot, decide and apply are one
synchronous step), so two decisions can never take the same GPUs.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import structlog

from dispatcher.control import actions
from dispatcher.control.caches import CopyCache, HubCache
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import record as records
from dispatcher.control.core.copies import Rejection, written_generation
from dispatcher.control.core.copyplan import CopyPlan
from dispatcher.control.core.decide import (
    STUCK,
    Action,
    ActionKind,
    Copy,
    CopyState,
    MemberHealth,
    Snapshot,
    decide,
    placing_needed,
)
from dispatcher.control.core.gangsched import mechanism_of
from dispatcher.control.core.hubhold import HoldScope, unheld_reason
from dispatcher.control.core.hubstatus import hub_status
from dispatcher.control.core.parking import BareFleet
from dispatcher.control.core.placing import Placement, PlacementInput, QueueStep
from dispatcher.control.core.queue import PendingQueue
from dispatcher.control.events import EventRecorder
from dispatcher.control.fleetview import FleetView
from dispatcher.control.memory import StepMemory
from dispatcher.control.meters import placed
from dispatcher.control.observe import Metrics
from dispatcher.control.planner import CopyPlanner
from dispatcher.control.readings import forget_readings
from dispatcher.control.recent import RecentDecisions
from dispatcher.control.resolutions import Resolutions
from dispatcher.control.settings import ControlSettings
from dispatcher.control.submit import MemberWrites
from dispatcher.control.writer import HubWriter, MemberWriter, Outcome, Ports
from dispatcher.control.writes import HubWrites
from dispatcher.fleet.admission import queued_generic
from dispatcher.fleet.queueing import QUEUE_LABEL
from dispatcher.fleet.reservations import Reservation
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.gangapis import NONE
from dispatcher.kube.patches import strip_nulls
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.placement.model import Decision
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.model import Definition, GenericStatus

__all__ = ["Reconciler"]

log = structlog.get_logger("dispatcher")

MAX_STEPS = 12
_PLACING = frozenset({ActionKind.CREATE_RECORD, ActionKind.RECORD_PLACEMENT})
"""Actions that write the placement just applied: one that raises undoes it."""
# Copies whose pods are read for decide.got_going: what may not have got going yet.
_NOT_GOING = STUCK | {GenericStatus.RUNNING}
_WAIT_FALLBACK_S = 5.0


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True, kw_only=True)
class Settled:
    """What a placed workload's NOTHING was decided from: the resource versions of its
    hub object, record and copy (a watch or a write's answer changes them), and what the
    snapshot reads beside them. Equal inputs, equal answer."""

    workload: str
    record: str
    copy: str | None
    synced: bool
    health: MemberHealth
    mirrored: str | None
    refusal: Rejection | None
    foreign: bool


class Reconciler:
    """Decides and acts for one workload at a time (see the module docstring)."""

    def __init__(self, *, settings: ControlSettings, live: LiveCatalog,
                 hub: KubeClient | None, fleet: FleetView, hub_cache: HubCache, copies: CopyCache,
                 queue: PendingQueue, metrics: Metrics, events: EventRecorder | None,
                 clock: Callable[[], float] = time.time,
                 monotonic: Callable[[], float] = time.monotonic,
                 hub_writer: HubWriter | None = None,
                 member_writer: MemberWriter | None = None) -> None:
        self.settings = settings
        self.live = live
        self.fleet = fleet
        self.cache = hub_cache
        self.copies = copies
        self.queue = queue
        self.metrics = metrics
        self.clock = clock
        self._pod_fields = settings.pod_policy
        self.resolutions = Resolutions(live=live, priority=settings.priority, clock=clock)
        # the real ports; unit tests inject one recording fake per port
        if hub_writer is None:
            assert hub is not None, "the real hub writer writes to the hub"
            hub_writer = HubWrites(hub=hub, cache=hub_cache, events=events,
                                   hub_mode=settings.hub_mode)
        if member_writer is None:
            assert hub is not None, "member namespaces are checked against the hub's"
            member_writer = MemberWrites(settings=settings, live=live, hub=hub, fleet=fleet,
                                         copies=copies, monotonic=monotonic)
        self.ports = Ports(hub=hub_writer, members=member_writer, metrics=metrics,
                           monotonic=monotonic)
        self.planner = CopyPlanner(
            settings=settings, live=live, resolutions=self.resolutions, fleet=fleet,
            copies=copies, pod_security=member_writer.namespaces.required
            if isinstance(member_writer, MemberWrites) else None)
        """Plans the copy a SUBMIT or UPDATE_COPY writes (``control.core.copyplan``)."""
        self.scope = HoldScope.watching(namespaces=settings.namespaces,
                                        own=settings.leader.namespace,
                                        selector=settings.label_selector)
        """What the controller watches: a live object outside it is not held, as far as we
        know (``_outside``)."""
        self.memory = StepMemory(clock=clock)
        """What our last steps saw that the hub does not say (read by ``snapshot``)."""
        self._said: dict[str, tuple[object, ...]] = {}
        """Per workload, the verdicts its last ``placement.decided`` line gave."""
        self._bare = BareFleet()  # what the fleet could ever run (``placing``)
        self.recent = RecentDecisions()
        """The latest decisions, for the fleet view (in memory only)."""
        self._settled: dict[str, Settled] = {}
        """Per placed workload answered NOTHING: the inputs of that answer (``_inputs``)."""

    @property
    def catalog(self) -> Catalog:
        """The catalog in effect now (it changes as hub definitions do)."""
        return self.live.current

    # -- snapshot ------------------------------------------------------------------------

    def snapshot(self, uid: str, placing: PlacementInput | None = None) -> Snapshot:
        """The frozen input of ``decide`` for ``uid``, from the caches."""
        item = self.cache.workload(uid)
        record = self.cache.record_value(uid)
        workload = item.obj if item is not None else None
        snap = Snapshot(now=self.clock(), workload=workload, record=record,
                        placing=placing, rules=self.settings.rules,
                        refusal=self.memory.refusal(uid),
                        workload_gone=workload is None and record is not None
                        and (record.deleting or self.memory.gone(uid)))
        cluster = record.cluster if record is not None else None
        outside = self.memory.outside(uid) if workload is None and record is not None \
            and not snap.workload_gone else None
        if outside is not None:
            snap = replace(snap, unheld=outside)
        if cluster is None or (workload is None and not snap.workload_gone
                               and outside is None):
            return snap
        health = self.fleet.health(cluster)
        copy = Copy(state=CopyState.UNKNOWN)
        assert record is not None
        if health.reachable:
            copy = self._copy(cluster, uid, workload) if workload is not None \
                else self._leftover(cluster, uid, record)
        unheld = self._unheld(workload) if workload is not None else outside
        return replace(snap, health=health, copy=copy, unheld=unheld)

    def _leftover(self, cluster: str, uid: str, record: records.DispatchRecord) -> Copy:
        """The copy of a workload gone from the hub: only whether it is there matters."""
        if self.copies.get(cluster, uid) is not None:
            return Copy(state=CopyState.OURS)
        api_version, kind, _ = record.workload_ref
        synced = (cluster, GroupVersionKind.of(api_version, kind)) in self.copies.synced
        return Copy(state=CopyState.ABSENT if synced else CopyState.UNKNOWN)

    def _copy(self, cluster: str, uid: str, workload: Mapping[str, Any]) -> Copy:
        found = self.copies.get(cluster, uid)
        if found is not None:
            meta = found.obj["metadata"]
            rv = str(meta.get("resourceVersion", ""))
            # pruned fields would never compare equal: once mirrored, the hub's status is it
            hub = workload.get("status") or {}
            target = None if self.memory.last_mirrored(uid) == rv else hub_status(
                workload, strip_nulls(found.obj.get("status") or {}),
                hub_owns_status=self._hub_owns_status(workload))
            status = hub if target is None else target
            mechanism = mechanism_of(found.obj)
            # read only while it may not have got going (decide.got_going, the stuck and
            # GangStalled rows): its pods, not its status word, say whether it did
            bound, held, room = 0, 0, None
            if found.generic in _NOT_GOING:
                bound, held = self._pod_progress(cluster, uid)
                if mechanism != NONE:
                    bound, room = self._gang_progress(cluster, uid)
            copy_uid = str(meta.get("uid", ""))
            admission = self.copies.admission(cluster, copy_uid)
            if (book := self.fleet.reservations(cluster)) is not None:
                book.quota_by(uid, copy_uid)  # its Kueue Workload's job uid, when it queues
            return Copy(state=CopyState.OURS, uid=copy_uid, status=status,
                        generic=queued_generic(found.generic, admission,
                                               queued=QUEUE_LABEL in (meta.get("labels") or {})),
                        statuses=found.statuses, resource_version=rv,
                        written_generation=written_generation(found.obj),
                        seen_at=found.seen_at, gang_mechanism=mechanism,
                        bound_pods=bound, held_gpus=held, room_gpus=room,
                        admission=admission)
        if self.memory.foreign(cluster, uid):
            return Copy(state=CopyState.FOREIGN)
        key = GroupVersionKind.of(str(workload.get("apiVersion")), str(workload.get("kind")))
        synced = (cluster, key) in self.copies.synced
        return Copy(state=CopyState.ABSENT if synced else CopyState.UNKNOWN)

    def _pod_progress(self, cluster: str, uid: str) -> tuple[int, int]:
        """(GPU pods bound, GPUs still reserved for its pods not seen bound) of a copy that
        may not have got going (``decide.got_going``)."""
        book = self.fleet.reservations(cluster)
        if book is None:
            return 0, 0
        held = book.get(uid)
        return book.bound(uid), held.gpus if held is not None else 0

    def _gang_progress(self, cluster: str, uid: str) -> tuple[int, int | None]:
        """(GPU pods bound, GPUs the member has for it: free plus still reserved for it)
        of a copy joined to a member gang (``decide``'s GangStalled rows)."""
        book = self.fleet.reservations(cluster)
        member = self.fleet.snapshot(cluster)
        if book is None or member is None:
            return 0, None
        held = book.get(uid)
        return book.bound(uid), member.capacity.free + (held.gpus if held else 0)

    def _shared_definition(self, workload: Mapping[str, Any]) -> Definition | None:
        """The workload's definition when the hub is shared (its hold matters), else None."""
        if self.settings.hub_mode != "shared":
            return None
        return self.catalog.find(str(workload.get("apiVersion") or ""),
                                 str(workload.get("kind") or ""))

    def _hub_owns_status(self, workload: Mapping[str, Any]) -> bool:
        """On a shared hub, a kind held by a pause has its status written by the hub's own
        controller: the mirror leaves it (``control.core.hubstatus``)."""
        definition = self._shared_definition(workload)
        return definition is not None and definition.hold is not None \
            and definition.hold.hub_writes_status

    def _unheld(self, workload: Mapping[str, Any]) -> str | None:
        definition = self._shared_definition(workload)
        return None if definition is None else unheld_reason(workload, definition)

    async def placement_input(self, uid: str, snap: Snapshot) -> PlacementInput:
        """What placing reads: the workload resolved (``prepare`` may await the bounded
        pool), the reachable members already holding a copy, and read-only views of the
        queue and the fleet."""
        workload, record = snap.workload, snap.record
        assert workload is not None
        await self.resolutions.prepare(uid, workload)
        held = tuple(m for m in self.copies.where(uid) if self.fleet.health(m).reachable)
        return PlacementInput(
            uid=uid, workload=workload, resolution=self.resolutions.get(uid, workload),
            excluded=record.excluded if record is not None else (), held=held,
            members=self.fleet.snapshots,
            bare=self._bare, queue=self.queue, priority=self.settings.priority,
            default_policy=self.settings.default_policy,
            reservation_ttl_s=self.settings.reservation_ttl_s, now=snap.now,
            unheld=self._unheld(workload), pod_fields=self._pod_fields,
            claim_after_s=self.settings.claim_after_s)

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

    async def reconcile(self, uid: str) -> float | None:
        """Decide and act until nothing is left to do now (at most ``MAX_STEPS`` steps);
        answers when to look again (seconds), or None. Every log line written meanwhile
        names the workload (``workload_fields``).

        A placed workload whose last answer was NOTHING (in sync, no recheck) is not
        decided again while nothing it was decided from changed (``_settled``): in a
        burst, a watch event that is the echo of a write still in flight wakes its worker
        once more for the same answer (about two such wake-ups per dispatch)."""
        if self._still_settled(uid):
            return None
        with structlog.contextvars.bound_contextvars(**self.workload_fields(uid)):
            return await self._reconcile(uid)

    async def _reconcile(self, uid: str) -> float | None:
        await self._confirm_gone(uid)
        for _ in range(MAX_STEPS):
            snap = self.snapshot(uid)
            if placing_needed(snap):  # read first (it may await), then a fresh snapshot
                snap = self.snapshot(uid, await self.placement_input(uid, snap))
            started = time.perf_counter()
            action = decide(snap)  # snapshot, decide and apply: one synchronous step
            if action.placement is not None:
                self._apply(action.placement)
                placed(self.metrics, action.placement, time.perf_counter() - started, self.queue)
            if action.hold is not None:
                self._hold(action.hold)
            if action.kind in (ActionKind.NOTHING, ActionKind.WAIT):
                return self._idle(uid, snap, action)
            if action.kind in (ActionKind.SUBMIT, ActionKind.UPDATE_COPY):
                action = replace(action, plan=await self.plan_copy(uid, snap, action))
            try:
                outcome = await actions.execute(self.ports, uid=uid, snap=snap, action=action)
            except BaseException:
                if action.kind in _PLACING and action.placement is not None \
                        and action.placement.reservation is not None:
                    self._release(uid)  # its decision was not written: undone
                raise
            self._effects(uid, outcome)
            if not outcome.again:
                return outcome.after
        return None

    async def plan_copy(self, uid: str, snap: Snapshot, action: Action
                        ) -> CopyPlan | Rejection | None:
        """The copy the action writes on its member, kept to the recorded decision's
        topology domains and preferring its planned nodes (None: an update with no copy
        to write to)."""
        assert action.member is not None and snap.workload is not None
        record = snap.record
        domains = record.domains if record is not None else ()
        planned = record.reservation if record is not None else None
        nodes = tuple(node for node, _ in planned.nodes) \
            if planned is not None and planned.member == action.member \
            and self.settings.prefer_planned_nodes else ()
        if action.kind is ActionKind.UPDATE_COPY:
            return await self.planner.update(uid, cluster=action.member,
                                             workload=snap.workload, domains=domains,
                                             nodes=nodes)
        return await self.planner.submit(uid, cluster=action.member, workload=snap.workload,
                                         domains=domains, nodes=nodes)

    def _effects(self, uid: str, outcome: Outcome) -> None:
        """The action's local effects (``Outcome``), before the next snapshot."""
        if outcome.forget:
            self._forget(uid)
        elif outcome.release:
            self._release(uid)
        if outcome.refused is not None:
            self.memory.refused(uid, outcome.refused)
        if outcome.answered:
            self.memory.answered(uid)
        if outcome.mirrored is not None:
            self.memory.mirrored(uid, outcome.mirrored)
        if outcome.foreign is not None:
            self.memory.saw_foreign(outcome.foreign, uid)

    def _hold(self, reservation: Reservation) -> None:
        """Hold ``reservation`` in its member's book (replacing the workload's own)."""
        book = self.fleet.reservations(reservation.member)
        if book is not None:
            book.add(reservation)

    def _release(self, uid: str) -> None:
        """Drop the workload's reservation wherever it is held."""
        for name in self.fleet.names():
            book = self.fleet.reservations(name)
            if book is not None:
                book.release(uid)

    def _forget(self, uid: str) -> None:
        """The workload leaves: its reservation and its queue entry go."""
        self._release(uid)
        self.queue.remove(uid)
        self.metrics.pending.set(len(self.queue))

    def _drop(self, uid: str) -> None:
        """The hub object is gone: forget everything about it."""
        self._said.pop(uid, None)
        self._forget(uid)
        self.memory.forget(uid)
        self.resolutions.forget(uid)

    def _apply(self, placement: Placement) -> None:
        """Take the placement's reservation and queue step (synchronously: no other
        decision runs in between)."""
        entry, decision = placement.entry, placement.decision
        if placement.decided:
            said = _verdicts(decision)
            if decision.chosen is not None or self._said.get(entry.uid) != said:
                # a waiting workload is decided on every try: its line only when a
                # member's verdict turns (the counts in it move with the fleet)
                log.info("placement.decided", uid=entry.uid, **decision.to_dict())
                if decision.chosen is None:
                    self._said[entry.uid] = said
                else:
                    self._said.pop(entry.uid, None)
            self.recent.add(at=self.clock(), workload=self.workload_fields(entry.uid),
                            decision=decision)
        if placement.reservation is not None:
            reservations = self.fleet.reservations(placement.reservation.member)
            if reservations is not None:
                reservations.add(placement.reservation)
        step = placement.queue
        if step is QueueStep.PLACED:
            if self.queue.placed(entry):
                # one ahead reached its backfill limit: a round now, so it claims a member
                # at once (else its namespace is gated until the fleet next changes)
                self.fleet.pulse.bump()
        elif step is QueueStep.WAIT:
            self.queue.add(entry)
            claim, wide = placement.claim, placement.claim_wide
            if claim is not None and self.queue.take_claim(entry, claim, wide=wide):
                log.info("queue.claimed", uid=entry.uid, member=claim, wide=wide,
                         reason=decision.summary)
                self.fleet.pulse.bump()  # what its gate held may go elsewhere now
        elif step is QueueStep.PARK:
            self.queue.park(entry, decision.summary)
        else:
            self.queue.remove(entry.uid)
        self.metrics.pending.set(len(self.queue))

    async def _confirm_gone(self, uid: str) -> None:
        """A record whose workload is not cached: ask the hub whether it is gone (a
        watch's label selector hides a live one that lost its label). Its record being
        deleted says so without a read (garbage collection of its owner). On a shared hub,
        a live one out of the watched scope is no longer held as far as we know (its hold
        was checked only while we saw it): ``snapshot`` says so."""
        record = self.cache.record_value(uid)
        if record is None or self.cache.workload(uid) is not None or self.memory.gone(uid) \
                or record.deleting:
            return
        read = await self.ports.hub.read_workload(record)
        if read.gone:
            self.memory.found_gone(uid)
        elif read.found is not None and self.settings.hub_mode == "shared":
            self.memory.found_outside(uid, self._outside(read.found))

    def _outside(self, workload: Mapping[str, Any]) -> str | None:
        """Why a live hub object is out of the scope the controller watches (None: in it,
        only not listed yet)."""
        meta = workload.get("metadata") or {}
        if self.scope.covers(str(meta.get("namespace") or ""), meta.get("labels") or {}):
            return None
        return (f"it left the watched scope (watch.labelSelector "
                f"{self.settings.label_selector!r}), so the shared hub's controllers may "
                f"run it")

    def _inputs(self, uid: str) -> Settled | None:
        """What ``decide`` reads for a placed workload, by the versions of the objects (hub
        object, record, copy) and the values beside them; None when the workload is not
        placed and present."""
        item, raw = self.cache.workload(uid), self.cache.record(uid)
        record = self.cache.record_value(uid)
        if item is None or raw is None or record is None or record.cluster is None:
            return None
        cluster = record.cluster
        found = self.copies.get(cluster, uid)
        synced = found is not None or (cluster, GroupVersionKind.of(
            str(item.obj.get("apiVersion")), str(item.obj.get("kind")))) in self.copies.synced
        return Settled(workload=_version(item.obj), record=_version(raw),
                       copy=None if found is None else _version(found.obj), synced=synced,
                       health=self.fleet.health(cluster),
                       mirrored=self.memory.last_mirrored(uid),
                       refusal=self.memory.refusal(uid),
                       foreign=self.memory.foreign(cluster, uid))

    def _still_settled(self, uid: str) -> bool:
        before = self._settled.get(uid)
        if before is None:
            return False
        if before == self._inputs(uid):
            return True
        del self._settled[uid]
        return False

    def _idle(self, uid: str, snap: Snapshot, action: Action) -> float | None:
        if snap.workload is None and action.kind is ActionKind.NOTHING:
            self._settled.pop(uid, None)
            self._drop(uid)
            return None
        if action.kind is ActionKind.NOTHING and action.recheck_after is None:
            inputs = self._inputs(uid)  # no await since the snapshot: what it was read from
            if inputs is not None:
                self._settled[uid] = inputs
        delay = action.recheck_after
        if delay is None and action.kind is ActionKind.WAIT:
            delay = _WAIT_FALLBACK_S
        return None if delay is None else max(delay, 0.05)

    # -- the catalog changed ---------------------------------------------------------------

    def forget_readings(self) -> None:
        """Drop every reading of the old catalog (keyed by its version: stale ones are
        never read again; this frees them) and the settled answers read through it."""
        self.resolutions.clear()
        self._settled.clear()  # a copy's status reads through the definitions
        forget_readings()

    async def note_definition(self, uid: str, *, present: bool, kind: str) -> None:
        """Say on a dispatched workload's Dispatch that its kind lost (or regained) its
        definition. Nothing else changes: the copy keeps running, its status keeps the
        last reading, nothing is deleted."""
        record = self.cache.record_value(uid)
        if record is None or record.cluster is None:
            return  # not dispatched: the next decision says "cannot resolve"
        message = (f"a definition serves {kind} again" if present else
                   f"no definition serves {kind} any more (its hub definition was deleted "
                   f"and there is no built-in or config one): the copy is left running, "
                   f"its last status reading kept, and no new workload of this kind is "
                   f"dispatched")
        with contextlib.suppress(KubeError):
            await self.ports.hub.patch_record(uid, {"conditions": [records.condition(
                type_="Definition", status=present,
                reason="DefinitionRestored" if present else "DefinitionRemoved",
                message=message, now=self.clock())]})


def _verdicts(decision: Decision) -> tuple[object, ...]:
    """What a ``placement.decided`` line says that matters: the choice and which members
    could take the workload (not their free counts)."""
    return (decision.chosen, *((v.member, v.feasible) for v in decision.verdicts))
