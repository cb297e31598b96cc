"""Placing one workload: the decision over a snapshot of the queue and the fleet.

``place`` is what ``decide`` runs when a workload has no member yet (branch 8 of its
table). It answers, from plain inputs and without I/O or a clock:

1. may it wait at all? A junk priority or annotation, on a shared hub a workload the hub
   does not hold (its own controllers may run it), a definition that cannot read it (or
   broke an evaluation bound on it: quarantined), a pod template that cannot be a Pod park
   it (``PendingReason``); parked workloads hold nothing in the queue
   (``control.parking``);
2. is a copy already on a reachable member (a record lost or requeued)? Then that member
   is chosen: adopt, never duplicate;
   otherwise a pod template that sets a scheduling field the operator's policy refuses
   (``control.podpolicy``: ``nodeName``, a priority class or scheduler not allowed in its
   namespace) parks it;
3. does its namespace's gate hold it (bounded backfill, ``control.queue``)?
4. the engine's decision over the members it may use (earlier failed attempts excluded);
5. with no member now: could one ever run it (the bare fleet)? Else it is parked.

The answer is a ``Placement``: the decision, the queue step and the reservation to take.
The shell (``control.reconcile``) applies the queue step and the reservation in the same
synchronous step that asked, so two decisions never take the same GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from dispatcher.control import parking
from dispatcher.control.names import PendingReason
from dispatcher.control.podpolicy import PodFieldPolicy, refusal
from dispatcher.control.priority import InvalidPriority, PriorityPolicy
from dispatcher.control.queue import Entry
from dispatcher.control.record import parse_time
from dispatcher.fleet.reservations import Reservation
from dispatcher.placement import engine
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    PlacementError,
    PlacementRequest,
    Verdict,
)
from dispatcher.workloads.bounded import ObjectQuarantined
from dispatcher.workloads.errors import TemplateError, WorkloadError
from dispatcher.workloads.resolve import Resolution

__all__ = ["Placement", "PlacementInput", "QueueStep", "QueueView", "alternatives",
           "alternatives_for", "place", "request_for", "restrict"]


class QueueView(Protocol):
    """What placing reads of the pending queue (``control.queue.PendingQueue``)."""

    backfill_limit: int

    def gate(self, entry: Entry) -> Entry | None: ...

    def bypasses(self, uid: str) -> int: ...


class QueueStep(StrEnum):
    """What the shell does with the workload's queue entry."""

    WAIT = "wait"  # PendingQueue.add: waits for capacity (or behind its gate)
    PARK = "park"  # PendingQueue.park: waits outside the gate for a fleet change or a fix
    PLACED = "placed"  # PendingQueue.placed: leaves it; those it passed count a bypass
    LEAVE = "leave"  # PendingQueue.remove: leaves it, nobody bypassed (adoption)


@dataclass(frozen=True, kw_only=True)
class PlacementInput:
    """Everything ``place`` reads. ``members`` and ``bare`` are read only when needed (a
    parked or gated workload never builds member snapshots)."""

    uid: str
    workload: Mapping[str, Any]
    resolution: Resolution | WorkloadError
    excluded: tuple[str, ...]
    held: tuple[str, ...]  # reachable members that already hold a copy
    members: Callable[[], Sequence[MemberSnapshot]]
    bare: parking.BareFleet
    queue: QueueView
    priority: PriorityPolicy
    default_policy: str
    reservation_ttl_s: float
    now: float
    unheld: str | None = None  # shared hub: why the hub may be running it (``hubhold``)
    pod_fields: PodFieldPolicy = field(default_factory=PodFieldPolicy)


@dataclass(frozen=True, kw_only=True)
class Placement:
    """The answer: ``decision.chosen`` or, when None, why (``reason``; the message is
    ``decision.summary``). ``decided`` says whether the engine ran (one log line each)."""

    entry: Entry
    decision: Decision
    queue: QueueStep
    reason: PendingReason | None = None
    reservation: Reservation | None = None
    decided: bool = False


def request_for(workload: Mapping[str, Any], resolution: Resolution, *,
                default_policy: str) -> PlacementRequest:
    """The placement request of a resolved workload: its annotations, its namespace, and
    every member's verdict (the controller logs them all in ``placement.decided``)."""
    meta = workload["metadata"]
    request = PlacementRequest.from_annotations(
        demand=resolution.demand, api_version=resolution.api_version, kind=resolution.kind,
        annotations=meta.get("annotations") or {}, default_policy=default_policy,
        namespace=str(meta.get("namespace") or ""))
    return replace(request, exhaustive=True)


def restrict(members: Sequence[MemberSnapshot], *, excluded: Sequence[str]
             ) -> list[MemberSnapshot]:
    """The members as this workload may use them: the ones an earlier attempt gave up on
    turn not-ready with that reason, so the summary says why (and a pin to one is explained,
    not rejected). Namespace allow-lists are the engine's own gate."""
    return [replace(m, ready=False, not_ready_reason="excluded: an earlier attempt there "
                                                     "failed")
            if m.name in excluded else m for m in members]


def alternatives(members: Sequence[MemberSnapshot], request: PlacementRequest, *,
                 excluded: Sequence[str]) -> tuple[str, ...]:
    """Members that could still take ``request`` with ``excluded`` left out (free capacity
    not considered): who is left after a member refused a copy."""
    try:
        return engine.eligible(restrict(members, excluded=excluded), request)
    except PlacementError:
        return ()


def alternatives_for(inp: PlacementInput, *, without: str) -> tuple[str, ...]:
    """``alternatives`` for a placement input, ``without`` excluded too (none when the
    workload does not resolve)."""
    if not isinstance(inp.resolution, Resolution):
        return ()
    request = request_for(inp.workload, inp.resolution, default_policy=inp.default_policy)
    return alternatives(inp.members(), request, excluded=(*inp.excluded, without))


def _no_choice(summary: str, *, policy: str) -> Decision:
    return Decision(policy=policy, pods=0, gpus=0, gangs=0, verdicts=(), chosen=None,
                    assignment=(), summary=summary)


def _parked(entry: Entry, reason: PendingReason, message: str, *, policy: str
            ) -> Placement:
    return Placement(entry=entry, decision=_no_choice(message, policy=policy),
                     queue=QueueStep.PARK, reason=reason)


def _entry(inp: PlacementInput) -> Entry | Placement:
    meta = inp.workload["metadata"]
    namespace = str(meta.get("namespace") or "")
    entry = Entry(uid=inp.uid, priority=0, namespace=namespace,
                  created=parse_time(meta.get("creationTimestamp")) or inp.now,
                  name=f"{namespace}/{meta['name']}")
    try:
        return replace(entry, priority=inp.priority.of(meta.get("annotations"), namespace))
    except InvalidPriority as exc:
        return _parked(entry, PendingReason.INVALID_ANNOTATION, str(exc),
                       policy=inp.default_policy)


def _unresolved(entry: Entry, error: WorkloadError, *, policy: str) -> Placement:
    if isinstance(error, TemplateError):
        return _parked(entry, PendingReason.INVALID_TEMPLATE,
                       f"invalid pod template: {error.path}: {error.reason}; never "
                       f"submitted until it is fixed", policy=policy)
    if isinstance(error, ObjectQuarantined):
        return _parked(entry, PendingReason.QUARANTINED,
                       f"quarantined: definition {error.definition} exceeded its "
                       f"{error.bound} bound ({error.detail}) on this object; it is not "
                       f"evaluated again until the object changes (other objects of its "
                       f"kind are unaffected)", policy=policy)
    return _parked(entry, PendingReason.RESOLVE_FAILED,
                   f"cannot resolve: {str(error).splitlines()[0][:500]}", policy=policy)


def _adopting(entry: Entry, resolution: Resolution, member: str, *, policy: str
              ) -> Placement:
    demand = resolution.demand
    return Placement(entry=entry, queue=QueueStep.LEAVE, decision=Decision(
        policy=policy, pods=demand.pods, gpus=demand.gpus,
        gangs=sum(1 for g in demand.gangs if not g.independent),
        verdicts=(Verdict(member=member, feasible=True, free=0,
                          reason="a copy of this workload is there"),),
        chosen=member, assignment=(), summary=f"adopting the copy already on {member}"))


def _gated(inp: PlacementInput, entry: Entry) -> Placement | None:
    blocker = inp.queue.gate(entry)
    if blocker is None:
        return None
    message = (f"waiting behind {blocker.name} (bypassed {inp.queue.bypasses(blocker.uid)} "
               f"times; backfill limit {inp.queue.backfill_limit} in namespace "
               f"{entry.namespace})")
    return Placement(entry=entry, decision=_no_choice(message, policy=inp.default_policy),
                     queue=QueueStep.WAIT, reason=PendingReason.QUEUED)


def _nothing_now(inp: PlacementInput, entry: Entry, request: PlacementRequest,
                 decision: Decision) -> Placement:
    bare, unknown = inp.bare.view(inp.members())
    never = parking.unplaceable(restrict(bare, excluded=inp.excluded), request,
                                unknown=unknown)
    if never is not None:
        return replace(_parked(entry, PendingReason.UNPLACEABLE, never,
                               policy=inp.default_policy), decided=True)
    return Placement(entry=entry, decision=decision, queue=QueueStep.WAIT,
                     reason=PendingReason.NO_FEASIBLE_MEMBER, decided=True)


def place(inp: PlacementInput) -> Placement:
    """Place the workload now, or say why not (steps in the module docstring)."""
    entry = _entry(inp)
    if isinstance(entry, Placement):
        return entry
    policy = inp.default_policy
    if inp.unheld is not None:
        return _parked(entry, PendingReason.NOT_HELD, inp.unheld, policy=policy)
    if isinstance(inp.resolution, WorkloadError):
        return _unresolved(entry, inp.resolution, policy=policy)
    if inp.held:
        return _adopting(entry, inp.resolution, inp.held[0], policy=policy)
    refused = refusal(inp.resolution.scheduling, namespace=entry.namespace,
                      policy=inp.pod_fields)
    if refused is not None:
        return _parked(entry, PendingReason.POD_TEMPLATE_REFUSED, refused, policy=policy)
    request = request_for(inp.workload, inp.resolution, default_policy=policy)
    invalid = parking.annotation_error(request)
    if invalid is not None:
        return _parked(entry, PendingReason.INVALID_ANNOTATION, invalid, policy=policy)
    gated = _gated(inp, entry)
    if gated is not None:
        return gated
    try:
        decision = engine.decide(restrict(inp.members(), excluded=inp.excluded), request)
    except PlacementError as exc:  # the pinned member does not exist
        return _parked(entry, PendingReason.UNPLACEABLE, f"{parking.UNPLACEABLE}{exc}",
                       policy=policy)
    if decision.chosen is None:
        return _nothing_now(inp, entry, request, decision)
    reservation = (Reservation(workload_uid=inp.uid, member=decision.chosen,
                               nodes=tuple((g.node, g.gpus) for g in decision.assignment),
                               expires_at=inp.now + inp.reservation_ttl_s)
                   if decision.assignment else None)
    return Placement(entry=entry, decision=decision, queue=QueueStep.PLACED,
                     reservation=reservation, decided=True)
