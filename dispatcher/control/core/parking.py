"""May this workload wait in the queue at all? Invalid requests and never-placeable ones.

A workload whose request is wrong (an unknown ``dispatcher.io/policy``, a selector that does
not parse, a junk priority) or that no member could run even with every GPU free (bigger
than every member, a product nobody has, pinned to a member that does not exist or refuses
its namespace) must not wait in the queue like one that only needs capacity to free up: it
would hold its namespace's gate forever and tell the user nothing useful. It is *parked*
(``queue.PendingQueue.park``) with its reason (``names.PendingReason``): ``InvalidAnnotation``
(fixed by the user) or ``Unplaceable`` (re-checked whenever the fleet changes: a member added
may take it). ``control.core.placing`` decides which.

"Could ever run" is the real placement over the *bare* fleet: each member with its nodes as
they are now but nothing running and nothing reserved, Ready and not cordoned (a member's
health and cordon come and go). Node-level state (a node NotReady or cordoned) is kept as
is: it is re-checked on every change. A Kueue member's quota does not bound the bare fleet
(quota frees, a stopped queue resumes, a cohort lends, none of which changes the nodes the
bare view is re-checked on): quota only makes a workload wait. A member that is not ready
and lists no nodes now counts with the nodes it last listed (an unreachable member keeps its
inventory); one never listed is unknown, not empty: a workload that only an unknown member
might take is parked with that said, and re-checked when the fleet changes (the member
connects), so it neither heads its namespace's queue nor is retried at every fleet change
meanwhile.
Pure: no I/O, no clock (``BareFleet`` only caches the bare copies; ``dispatcher simulate``,
whose bare fleet never changes, gives its own ``BareView``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.placement import engine
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    PlacementError,
    PlacementRequest,
)

__all__ = ["INVALID_ANNOTATION", "UNPLACEABLE", "BareFleet", "BareView", "Never",
           "annotation_error", "bare", "could_hold", "never", "restrict", "unplaceable"]

UNPLACEABLE = "unplaceable: "
"""Prefix of every never-placeable message."""
INVALID_ANNOTATION = "invalid annotation "
"""Prefix of every invalid-request message."""

def annotation_error(request: PlacementRequest) -> str | None:
    """Why the request's annotations are invalid (policy, selector), or None."""
    if request.policy not in engine.POLICIES:
        return (f"{INVALID_ANNOTATION}dispatcher.io/policy={request.policy!r}: unknown "
                f"placement policy (known: {', '.join(engine.POLICIES)}); not dispatched "
                f"until it is fixed")
    try:
        engine.eligible((), request)
    except PlacementError as exc:  # names the annotation itself ("annotation ...: ...")
        detail = str(exc).removeprefix("annotation ")
        return f"{INVALID_ANNOTATION}{detail}; not dispatched until it is fixed"
    return None


def bare(capacity: ClusterCapacity) -> ClusterCapacity:
    """A copy of ``capacity`` with the same nodes and nothing running or reserved."""
    copy = capacity.snapshot()
    copy.relist_pods(())
    for node in list(copy.nodes()):
        if node.reserved:
            copy.reserve(node.name, -node.reserved)
    return copy


def _fingerprint(capacity: ClusterCapacity) -> tuple[object, ...]:
    s = capacity.summary()
    return (s.nodes, s.ready_nodes, s.cordoned_nodes, s.capacity, s.allocatable,
            tuple((p.product, p.nodes, p.allocatable) for p in s.products))


class BareView(Protocol):
    """Where placing asks whether a workload could ever run: ``BareFleet`` over the live
    members, or ``dispatcher simulate``'s fixed bare fleet (which may memoise: it never
    changes)."""

    def never(self, members: Sequence[MemberSnapshot], request: PlacementRequest, *,
              excluded: Sequence[str]) -> Never | None:
        """``never`` over the bare fleet of ``members``, ``excluded`` restricted."""
        ...

    def could_hold(self, members: Sequence[MemberSnapshot], request: PlacementRequest
                   ) -> tuple[str, ...]:
        """Which of ``members`` could run ``request`` with nothing running (best first)."""
        ...


def restrict(members: Sequence[MemberSnapshot], *, excluded: Sequence[str]
             ) -> list[MemberSnapshot]:
    """The members as this workload may use them: the ones an earlier attempt gave up on
    turn not-ready with that reason, so the summary says why (and a pin to one is explained,
    not rejected). Namespace allow-lists are the engine's own gate."""
    return [replace(m, ready=False, not_ready_reason="excluded: an earlier attempt there "
                                                     "failed")
            if m.name in excluded else m for m in members]


@dataclass
class BareFleet:
    """Bare copies of members' capacity, rebuilt only when a member's nodes change."""

    _cache: dict[str, tuple[tuple[object, ...], ClusterCapacity]] = field(
        default_factory=dict)

    def view(self, members: Sequence[MemberSnapshot]
             ) -> tuple[list[MemberSnapshot], tuple[str, ...]]:
        """The members as they could ever be (see the module docstring), and the names of
        the unknown ones (not ready, no nodes listed)."""
        out, unknown = [], []
        for member in members:
            cached = self._cache.get(member.name)
            if not member.ready and member.capacity.node_count == 0:
                if cached is None or cached[1].node_count == 0:
                    unknown.append(member.name)
                else:  # unreachable now: its last-known inventory
                    out.append(replace(member, capacity=cached[1], ready=True,
                                       not_ready_reason="", cordoned=False, quota=None))
                    continue
            key = _fingerprint(member.capacity)
            if cached is None or cached[0] != key:
                cached = self._cache[member.name] = (key, bare(member.capacity))
            out.append(replace(member, capacity=cached[1], ready=True, not_ready_reason="",
                               cordoned=False, quota=None))
        for gone in set(self._cache) - {m.name for m in members}:
            del self._cache[gone]
        return out, tuple(unknown)

    def never(self, members: Sequence[MemberSnapshot], request: PlacementRequest, *,
              excluded: Sequence[str]) -> Never | None:
        bare, unknown = self.view(members)
        return never(restrict(bare, excluded=excluded), request, unknown=unknown)

    def could_hold(self, members: Sequence[MemberSnapshot], request: PlacementRequest
                   ) -> tuple[str, ...]:
        return could_hold(self.view(members)[0], request)


@dataclass(frozen=True, slots=True)
class Never:
    """Why a workload could never run: the message and, when the bare fleet was asked,
    its decision (every member's reason)."""

    message: str
    bare: Decision | None = None


def never(members: Sequence[MemberSnapshot], request: PlacementRequest, *,
          unknown: Sequence[str] = ()) -> Never | None:
    """Why no member of ``members`` (a ``BareView``, restricted to what this workload may
    use) could ever run ``request``, or None when one could (or an ``unknown`` member
    might). Raises PlacementError for an invalid request (check ``annotation_error`` first).
    """
    names = {m.name for m in members}
    if request.pin is not None and request.pin not in names:
        return Never(f"{UNPLACEABLE}pinned member {request.pin!r} (dispatcher.io/cluster) "
                     f"does not exist; members: {', '.join(sorted(names)) or 'none'}")
    known = [m for m in members if m.name not in unknown]
    decision = engine.decide(known, replace(request, exhaustive=True, count_fits=False))
    if decision.chosen is not None:
        return None
    maybe = [m.name for m in members if m.name in unknown and m.ready]  # ready: allowed
    if maybe and engine.eligible([m for m in members if m.name in maybe], request):
        return Never(f"{UNPLACEABLE}no member whose nodes are known could run it even with "
                     f"every GPU free ({decision.summary}); {', '.join(sorted(maybe))} "
                     f"might once connected (its nodes are not known yet): looked at again "
                     f"when the fleet changes", decision)
    return Never(f"{UNPLACEABLE}even with every GPU free, {decision.summary}", decision)


def could_hold(members: Sequence[MemberSnapshot], request: PlacementRequest
               ) -> tuple[str, ...]:
    """The members of a bare fleet whose nodes could hold ``request``, best first (a
    member whose nodes are not known holds nothing)."""
    decision = engine.decide(members, replace(request, exhaustive=True, count_fits=False))
    return tuple(v.member for v in decision.verdicts if v.feasible)


def unplaceable(members: Sequence[MemberSnapshot], request: PlacementRequest, *,
                unknown: Sequence[str] = ()) -> str | None:
    """``never``'s message, or None."""
    found = never(members, request, unknown=unknown)
    return None if found is None else found.message
