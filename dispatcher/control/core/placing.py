"""Placing one workload: the decision over a snapshot of the queue and the fleet.

One function places a workload for the controller (``decide``, branch 8 of its table),
``dispatcher explain`` (offline and live) and ``dispatcher simulate``: ``place_ask``, on
plain data (an ``Ask``: the workload's queue entry, resolved demand, annotations, the
members it may not use and the ones already holding a copy; a ``Setting``: the member
views, the bare fleet, the queue, the defaults and the clock reading). ``place`` is its
front for a hub object: it reads the priority annotation and the resolution first. Without
I/O or a clock, in this order:

1. may it wait at all? A junk priority or annotation, on a shared hub a workload the hub
   does not hold (its own controllers may run it), a definition that cannot read it (or
   broke an evaluation bound on it: quarantined), a pod template that cannot be a Pod park
   it (``PendingReason``); parked workloads hold nothing in the queue
   (``control.core.parking``);
2. is a copy already on a reachable member (a record lost or requeued)? Then that member
   is chosen: adopt, never duplicate;
   otherwise a pod template that sets a scheduling field the operator's policy refuses
   (``control.core.podpolicy``: ``nodeName``, a priority class or scheduler not allowed in its
   namespace) parks it;
3. does its namespace's gate hold it (bounded backfill, ``control.core.queue``)?
4. the engine's decision over the members it may use (earlier failed attempts excluded,
   and members claimed by a workload ahead of it in the cross-namespace order);
5. with no member now: could one ever run it (the bare fleet)? Else it is parked;
6. waiting, and for ``claim_after_s`` already: it claims a member (``Placement.claim``):
   the one, of those its nodes could ever hold it on and nobody else claims, with the
   most GPUs free now (the nearest to fitting); bypassed ``backfill_limit`` times, it
   claims one against its own namespace only, instead of gating that namespace
   everywhere (``control.core.queue``). Its own claim is kept while it waits (the shell
   drops claims on members that left the fleet).

Steps 1 (priority, hold, resolution) are ``place``'s; the sim's workloads are resolved and
carry their scenario's priority. The request is built from the annotations here only
(``request_of``: ``PlacementRequest.from_annotations``), for every caller.

The answer is a ``Placement``: the decision, the queue step and the reservation to take.
The shell (``control.reconcile``) applies the queue step and the reservation in the same
synchronous step that asked, so two decisions never take the same GPUs; ``simulate`` binds
the assignment in its capacity model instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from types import MappingProxyType
from typing import Any, Protocol

from dispatcher.control.core import parking
from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.parking import restrict
from dispatcher.control.core.podpolicy import PodFieldPolicy, refusal
from dispatcher.control.core.priority import InvalidPriority, PriorityPolicy
from dispatcher.control.core.queue import Entry
from dispatcher.control.core.record import parse_time
from dispatcher.fleet.queueing import QUEUE_LABEL
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
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.errors import TemplateError, WorkloadError
from dispatcher.workloads.podfields import PodField
from dispatcher.workloads.resolve import Resolution

__all__ = ["Ask", "Placement", "PlacementInput", "QueueStep", "QueueView", "Setting",
           "alternatives", "alternatives_for", "place", "place_ask", "request_for",
           "request_of", "restrict"]

_NO_ANNOTATIONS: Mapping[str, str] = MappingProxyType({})


class QueueView(Protocol):
    """What placing reads of the pending queue (``control.core.queue.PendingQueue``)."""

    backfill_limit: int

    def gate(self, entry: Entry) -> Entry | None: ...

    def bypasses(self, uid: str) -> int: ...

    def saturated(self, uid: str) -> bool: ...

    def claims_widely(self, uid: str) -> bool: ...

    def claims(self) -> Mapping[str, Entry]: ...

    def claimed_by(self, uid: str) -> str | None: ...

    def claims_against(self, entry: Entry) -> Mapping[str, Entry]: ...


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
    bare: parking.BareView
    queue: QueueView
    priority: PriorityPolicy
    default_policy: str
    reservation_ttl_s: float
    now: float
    unheld: str | None = None  # shared hub: why the hub may be running it (``hubhold``)
    pod_fields: PodFieldPolicy = field(default_factory=PodFieldPolicy)
    count_fits: bool = False  # explain: how many times it fits on each member
    policy: str | None = None  # explain --policy: over the annotation and the default
    claim_after_s: float = 0.0  # waited this long: it claims a member (0: never)


@dataclass(frozen=True, kw_only=True)
class Ask:
    """One workload as ``place_ask`` reads it: plain data, no hub object.

    ``entry`` is its queue entry (uid, namespace, priority, age); ``annotations`` its own
    (the ``dispatcher.io/*`` placement rules are read from them by ``request_of``);
    ``scheduling`` the scheduling fields its pod templates set (``podpolicy``);
    ``excluded`` members an earlier attempt gave up on, ``held`` reachable members that
    already hold a copy (adopted, never duplicated)."""

    entry: Entry
    demand: Demand
    api_version: str = ""
    kind: str = ""
    annotations: Mapping[str, str] = field(default_factory=lambda: _NO_ANNOTATIONS)
    scheduling: tuple[PodField, ...] = ()
    excluded: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    queue: str | None = None
    """The object's own Kueue queue label (``fleet.queueing.QUEUE_LABEL``), if any."""
    # What placing worked out for this Ask before: its request and annotation error per
    # Setting, the last gate answer. An Ask asked again (the simulator walks its queue on
    # every completion) reuses them; they are functions of the Ask and the keys only.
    _requests: dict[tuple[object, ...], tuple[PlacementRequest, str | None]] = field(
        default_factory=dict, compare=False, repr=False)
    _gated: dict[tuple[object, ...], Placement] = field(default_factory=dict, compare=False,
                                                        repr=False)

    def request(self, setting: Setting) -> tuple[PlacementRequest, str | None]:
        """``request_of`` for ``setting``, and why its annotations are invalid (or None)."""
        key = setting.request_key
        found = self._requests.get(key)
        if found is None:
            request = request_of(self, default_policy=setting.default_policy,
                                 choice_only=setting.choice_only,
                                 count_fits=setting.count_fits, policy=setting.policy)
            found = self._requests[key] = (request, parking.annotation_error(request))
        return found


@dataclass(frozen=True, kw_only=True)
class Setting:
    """What ``place_ask`` reads besides the workload. ``members`` is called only when the
    engine runs (a parked or gated workload never builds member snapshots); ``bare`` only
    when nothing fits now. The engine reports every member's verdict (the controller logs
    them all), or with ``choice_only`` (``simulate``) the choice only: it stops at the
    first feasible rank and works out no reason for the members it rejects. ``count_fits``
    (explain) counts how many times the demand fits on each member; ``policy`` (explain
    ``--policy``) wins over the annotation and ``default_policy``."""

    members: Callable[[], Sequence[MemberSnapshot]]
    bare: parking.BareView
    queue: QueueView
    default_policy: str
    now: float
    reservation_ttl_s: float = 0.0
    pod_fields: PodFieldPolicy = field(default_factory=PodFieldPolicy)
    choice_only: bool = False
    count_fits: bool = False
    policy: str | None = None
    claim_after_s: float = 0.0

    @cached_property
    def request_key(self) -> tuple[object, ...]:
        """What of this setting a request depends on (``Ask.request``'s memo key)."""
        return (self.default_policy, self.choice_only, self.count_fits, self.policy)


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
    checked: Decision | None = None  # parked after the engine ran: its decision (explain)
    bare: Decision | None = None  # parked unplaceable: the bare fleet's decision (reasons)
    blocker: Entry | None = None  # held by its namespace's gate: the one it may not pass
    claim: str | None = None  # waiting long: the member it claims (``PendingQueue.claim``)
    claim_wide: bool = False  # the claim bars every namespace, not only its own


def request_of(ask: Ask, *, default_policy: str, choice_only: bool = False,
               count_fits: bool = False, policy: str | None = None) -> PlacementRequest:
    """The placement request of ``ask``: its annotations (pin, selector, policy,
    topology; ``policy`` wins over the annotation, which wins over ``default_policy``),
    its namespace, and what the engine reports: every member's verdict (the controller
    logs them all in ``placement.decided``), with fit counts (``count_fits``: explain), or
    the choice only (``choice_only``: simulate)."""
    request = PlacementRequest.from_annotations(
        demand=ask.demand, api_version=ask.api_version, kind=ask.kind,
        annotations=ask.annotations, default_policy=default_policy, count_fits=count_fits,
        namespace=ask.entry.namespace)
    return replace(request, exhaustive=not choice_only, reasons=not choice_only,
                   policy=policy or request.policy, queue=ask.queue)


def _ask(inp: PlacementInput, entry: Entry, resolution: Resolution) -> Ask:
    return Ask(entry=entry, demand=resolution.demand, api_version=resolution.api_version,
               kind=resolution.kind,
               annotations=inp.workload["metadata"].get("annotations") or _NO_ANNOTATIONS,
               scheduling=resolution.scheduling, excluded=inp.excluded, held=inp.held,
               queue=queue_label(inp.workload))


def _setting(inp: PlacementInput) -> Setting:
    return Setting(members=inp.members, bare=inp.bare, queue=inp.queue,
                   default_policy=inp.default_policy, now=inp.now,
                   reservation_ttl_s=inp.reservation_ttl_s, pod_fields=inp.pod_fields,
                   count_fits=inp.count_fits, policy=inp.policy,
                   claim_after_s=inp.claim_after_s)


def request_for(workload: Mapping[str, Any], resolution: Resolution, *,
                default_policy: str) -> PlacementRequest:
    """The controller's placement request of a resolved hub workload."""
    namespace = str(workload["metadata"].get("namespace") or "")
    ask = Ask(entry=Entry(uid="", priority=0, created=0.0, namespace=namespace),
              demand=resolution.demand, api_version=resolution.api_version,
              kind=resolution.kind,
              annotations=workload["metadata"].get("annotations") or _NO_ANNOTATIONS,
              queue=queue_label(workload))
    return request_of(ask, default_policy=default_policy)


def queue_label(workload: Mapping[str, Any]) -> str | None:
    """The hub object's Kueue queue label, if it has one."""
    value = (workload["metadata"].get("labels") or {}).get(QUEUE_LABEL)
    return str(value) if value else None


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
                  name=f"{namespace}/{meta.get('name') or ''}")
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


def _adopting(entry: Entry, demand: Demand, member: str, *, policy: str) -> Placement:
    return Placement(entry=entry, queue=QueueStep.LEAVE, decision=Decision(
        policy=policy, pods=demand.pods, gpus=demand.gpus,
        gangs=sum(1 for g in demand.gangs if not g.independent),
        verdicts=(Verdict(member=member, feasible=True, free=0,
                          reason="a copy of this workload is there"),),
        chosen=member, assignment=(), summary=f"adopting the copy already on {member}"))


def _gated(ask: Ask, setting: Setting) -> Placement | None:
    queue, entry = setting.queue, ask.entry
    blocker = queue.gate(entry)
    if blocker is None:
        return None
    bypasses, limit = queue.bypasses(blocker.uid), queue.backfill_limit
    key = (blocker.uid, bypasses, limit, setting.default_policy)
    last = ask._gated.get(key)
    if last is not None:
        return last
    message = (f"waiting behind {blocker.name} (bypassed {bypasses} times; backfill limit "
               f"{limit} in namespace {entry.namespace})")
    placement = Placement(entry=entry, queue=QueueStep.WAIT, reason=PendingReason.QUEUED,
                          decision=_no_choice(message, policy=setting.default_policy),
                          blocker=blocker)
    ask._gated.clear()  # only the last answer is kept
    ask._gated[key] = placement
    return placement


def _nothing_now(ask: Ask, setting: Setting, members: Sequence[MemberSnapshot],
                 request: PlacementRequest, decision: Decision) -> Placement:
    never = setting.bare.never(members, request, excluded=ask.excluded)
    if never is not None:
        return replace(_parked(ask.entry, PendingReason.UNPLACEABLE, never.message,
                               policy=setting.default_policy),
                       decided=True, checked=decision, bare=never.bare)
    return Placement(entry=ask.entry, decision=decision, queue=QueueStep.WAIT,
                     reason=PendingReason.NO_FEASIBLE_MEMBER, decided=True)


def _held_for(members: Sequence[MemberSnapshot], claimed: Mapping[str, Entry], *,
              queue: QueueView, now: float) -> list[MemberSnapshot]:
    """The members as a workload behind their claimants sees them: not ready, with why."""
    def why(claimant: Entry) -> str:
        whom = "nothing behind it" if queue.claims_widely(claimant.uid) \
            else f"nothing behind it in {claimant.namespace}"
        return (f"held for {claimant.name}, waiting {now - claimant.created:.0f}s: {whom} "
                f"is placed here until it fits")
    return [replace(m, ready=False, not_ready_reason=why(claimed[m.name]))
            if m.name in claimed else m for m in members]


def _nearest(ask: Ask, setting: Setting, members: Sequence[MemberSnapshot],
             request: PlacementRequest, *, taken: set[str]) -> str | None:
    """Of the members not ``taken`` nor excluded whose nodes could ever hold the request,
    the one with the most GPUs free now (the nearest to fitting)."""
    free = {m.name: m.capacity.free for m in members
            if m.name not in taken and m.name not in ask.excluded}
    holders = setting.bare.could_hold([m for m in members if m.name in free], request)
    return max(holders, key=lambda name: free[name], default=None)


def _claiming(ask: Ask, setting: Setting, members: Sequence[MemberSnapshot],
              request: PlacementRequest, waiting: Placement) -> Placement:
    """``waiting`` with the member it claims (step 6), or as it is: against every
    namespace once it waited ``claim_after_s``, against its own once its backfill limit
    is reached (``control.core.queue``)."""
    entry, queue = ask.entry, setting.queue
    if setting.claim_after_s <= 0:
        return waiting
    held = queue.claimed_by(entry.uid)
    waited = setting.now - entry.created
    wide = waited >= setting.claim_after_s
    if held is None and not wide and not (queue.backfill_limit > 0  # 0: strict order, gated
                                          and queue.saturated(entry.uid)):
        return waiting
    if held is None:  # kept while it waits (a member removed: ``PendingQueue.keep_claims``)
        claims = queue.claims()
        held = _nearest(ask, setting, members, request, taken=set(claims))
        if held is None and wide:  # none free of claims: a narrow one behind it gives way
            held = _nearest(ask, setting, members, request, taken={
                m for m, c in claims.items()
                if queue.claims_widely(c.uid) or c.order < entry.order})
    if held is None:
        return waiting
    wide = wide or queue.claims_widely(entry.uid)
    whom = "nothing behind it" if wide else f"nothing behind it in {entry.namespace}"
    summary = (f"{waiting.decision.summary}; waiting {waited:.0f}s: {held} is held for it "
               f"({whom} is placed there until it fits)")
    return replace(waiting, claim=held, claim_wide=wide,
                   decision=replace(waiting.decision, summary=summary))


def place(inp: PlacementInput) -> Placement:
    """Place a hub workload now, or say why not (steps in the module docstring): its
    priority, hold and resolution here, the rest in ``place_ask``."""
    entry = _entry(inp)
    if isinstance(entry, Placement):
        return entry
    if inp.unheld is not None:
        return _parked(entry, PendingReason.NOT_HELD, inp.unheld, policy=inp.default_policy)
    if isinstance(inp.resolution, WorkloadError):
        return _unresolved(entry, inp.resolution, policy=inp.default_policy)
    return place_ask(_ask(inp, entry, inp.resolution), _setting(inp))


def place_ask(ask: Ask, setting: Setting) -> Placement:
    """Place ``ask`` now, or say why not: adoption, pod policy, annotations, the gate, the
    engine, the bare fleet (module docstring, steps 2-5)."""
    entry, policy = ask.entry, setting.default_policy
    if ask.held:
        return _adopting(entry, ask.demand, ask.held[0], policy=policy)
    refused = refusal(ask.scheduling, namespace=entry.namespace, policy=setting.pod_fields) \
        if ask.scheduling else None
    if refused is not None:
        return _parked(entry, PendingReason.POD_TEMPLATE_REFUSED, refused, policy=policy)
    request, invalid = ask._requests.get(setting.request_key) or ask.request(setting)
    if invalid is not None:
        return _parked(entry, PendingReason.INVALID_ANNOTATION, invalid, policy=policy)
    gated = _gated(ask, setting)
    if gated is not None:
        return gated
    members = setting.members()
    claimed = setting.queue.claims_against(entry)
    try:
        seen = _held_for(members, claimed, queue=setting.queue, now=setting.now) \
            if claimed else members
        decision = engine.decide(restrict(seen, excluded=ask.excluded), request)
    except PlacementError as exc:  # the pinned member does not exist
        return _parked(entry, PendingReason.UNPLACEABLE, f"{parking.UNPLACEABLE}{exc}",
                       policy=policy)
    if decision.chosen is None:
        waiting = _nothing_now(ask, setting, members, request, decision)
        return _claiming(ask, setting, members, request, waiting) \
            if waiting.queue is QueueStep.WAIT else waiting
    reservation = (Reservation(workload_uid=entry.uid, member=decision.chosen,
                               nodes=tuple((g.node, g.gpus) for g in decision.assignment),
                               expires_at=setting.now + setting.reservation_ttl_s)
                   if decision.assignment else None)
    return Placement(entry=entry, decision=decision, queue=QueueStep.PLACED,
                     reservation=reservation, decided=True)
