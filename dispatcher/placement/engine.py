"""The decision: filter members, fit the gangs, score, choose, explain.

Filters run cheapest first and the first that rejects a member gives its reason: pin,
cluster selector, namespace allow-list, Ready, cordoned, served kind, then gang fit at node
granularity (``placement.fit``). Feasible members are ranked by (``prefer`` order, policy score plus
the member's weight, name), so the same input always gives the same answer.

Policies (score: higher is better):

- ``most-free`` (default): free GPUs the member has left after the placement; spreads load
  and leaves room for the next large workload on the member with the most headroom.
- ``best-fit``: minus the free GPUs left after the placement, i.e. the fullest member that
  still fits wins; ties go to the placement that leaves fewer GPUs stranded on the nodes it
  uses. Packs members tightly, keeping other members empty for big gangs.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import ClassVar

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.placement.fit import (
    PackResult,
    PodGroup,
    count_fits,
    explain_misfit,
    pack,
    pod_groups,
    surely_fits,
)
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    NodeGrant,
    PlacementError,
    PlacementRequest,
    Verdict,
)
from dispatcher.placement.selector import Selector, SelectorError, parse_selector
from dispatcher.workloads.demand import Demand

__all__ = ["POLICIES", "decide", "eligible"]

POLICIES: tuple[str, ...] = ("most-free", "best-fit")
_SUMMARY_LIMIT = 900


def _selector(request: PlacementRequest) -> Selector | None:
    if not request.selector:
        return None
    try:
        return parse_selector(request.selector)
    except SelectorError as exc:
        raise PlacementError(f"annotation dispatcher.io/cluster-selector: {exc}") from exc


def _gate(member: MemberSnapshot, request: PlacementRequest,
          selector: Selector | None) -> str | None:
    """The reason a member is out before any fitting, or None."""
    if request.pin is not None and member.name != request.pin:
        return f"not the pinned member (dispatcher.io/cluster={request.pin})"
    if selector is not None:
        failing = selector.failing(member.labels)
        if failing:
            shown = ",".join(f"{r.key}={member.labels[r.key]}" for r in failing
                             if r.key in member.labels)
            labels = f" (member has {shown})" if shown else ""
            return f"selector {','.join(str(r) for r in failing)} does not match{labels}"
    allowed = member.allowed_namespaces
    if allowed and request.namespace not in allowed:
        return (f"namespace {request.namespace or '(unknown)'} not allowed "
                f"(allowedNamespaces: {', '.join(allowed)})")
    if not member.ready:
        return "not ready" + (f": {member.not_ready_reason}" if member.not_ready_reason else "")
    if member.cordoned:
        return "cordoned"
    if (request.kind and member.served_kinds is not None
            and request.gvk not in member.served_kinds):
        group = f" ({request.group})" if request.group else ""
        return f"kind {request.kind}{group} not served"
    return None


def eligible(members: Sequence[MemberSnapshot], request: PlacementRequest) -> tuple[str, ...]:
    """Members that could take the request at all (every gate passes; free capacity not
    considered): who is left after a member refused a copy. Raises PlacementError like
    ``decide`` for an invalid selector."""
    selector = _selector(request)
    return tuple(m.name for m in members if _gate(m, request, selector) is None)


_MEMO_LIMIT = 512


class _Fitted:
    """One member's capacity verdict for one request shape, as memoised on its capacity.

    ``verdict`` is what ``decide`` reports for the member when no weight applies (feasible
    or not, reason, free, fits, free_after, score); ``result`` the packing when feasible,
    ``leftover`` its fragmentation (best-fit's tie-break), ``grants`` its node assignment
    once someone asked for it, ``rank`` its place among feasible members. Everything here
    is a function of the member's nodes (its capacity version), its name and the request
    shape, so it is shared by every decision until the capacity changes.
    """

    __slots__ = ("grants", "leftover", "rank", "result", "unpacked", "verdict")

    def __init__(self, verdict: Verdict, result: PackResult | None, leftover: int, *,
                 unpacked: tuple[ClusterCapacity, tuple[PodGroup, ...]] | None = None
                 ) -> None:
        self.verdict = verdict
        self.result = result
        self.leftover = leftover
        self.unpacked = unpacked  # feasible by ``surely_fits``: pack when chosen
        self.grants: tuple[NodeGrant, ...] | None = None
        # The feasible ranking key (preference, -score, leftover, name) when no preference
        # or weight applies: built once, not per decision.
        self.rank = (0, -(verdict.score or 0.0), leftover, verdict.member)

    def assignment(self) -> tuple[NodeGrant, ...]:
        if self.grants is None:
            if self.result is None and self.unpacked is not None:
                self.result = pack(*self.unpacked)
                assert self.result is not None, "surely_fits said it fits"
            self.grants = self.result.assignment() if self.result is not None else ()
        return self.grants


class _Shape:
    """What a member's capacity verdict reads from the request, hashed once per decision.

    ``key`` is a small int standing for (pod groups, GPUs, policy, count_fits): member memos are
    keyed by (member name, key), so a lookup hashes a str (cached by Python) and an int, not
    the pod groups (nested dataclasses) once per member.
    """

    __slots__ = ("best_fit", "count_fits", "gpus", "groups", "key", "largest_pod")

    _ids: ClassVar[dict[tuple[object, ...], int]] = {}
    _next: ClassVar[Iterator[int]] = itertools.count()

    def __init__(self, groups: tuple[PodGroup, ...], *, gpus: int, best_fit: bool,
                 count_fits: bool) -> None:
        self.groups = groups
        self.gpus = gpus
        self.best_fit = best_fit
        self.count_fits = count_fits
        self.largest_pod = max((g.gpus for g in groups), default=0)
        ids = _Shape._ids
        identity = (groups, gpus, best_fit, count_fits)
        key = ids.get(identity)
        if key is None:
            if len(ids) >= _MEMO_LIMIT:  # ids are never reused: stale memo keys just miss
                ids.clear()
            key = ids[identity] = next(_Shape._next)
        self.key = key

    _recent: ClassVar[dict[tuple[int, bool, bool], tuple[Demand, _Shape]]] = {}

    @classmethod
    def of(cls, demand: Demand, *, best_fit: bool, count_fits: bool) -> _Shape:
        """The shape of ``demand``, reused while the same Demand object is asked again (a
        workload waiting for room is decided again with its cached resolution): grouping
        the pods and interning the groups cost more than a 100-member decision's lookups."""
        recent = cls._recent
        slot = (id(demand), best_fit, count_fits)
        found = recent.get(slot)
        if found is not None and found[0] is demand:
            return found[1]
        shape = cls(pod_groups(demand), gpus=demand.gpus, best_fit=best_fit,
                    count_fits=count_fits)
        if len(recent) >= _MEMO_LIMIT:
            recent.clear()
        recent[slot] = (demand, shape)  # holds the Demand, so its id is not reused
        return shape


def _memo(capacity: ClusterCapacity) -> dict[object, object]:
    """The member's memo, emptied when its capacity changed since it was filled."""
    memo = capacity.verdict_memo
    if memo.get(_VERSION) != capacity.version or len(memo) > _MEMO_LIMIT:
        memo.clear()
        memo[_VERSION] = capacity.version
    return memo


_VERSION = "version"


def _out_of_bounds(capacity: ClusterCapacity, shape: _Shape) -> bool:
    """O(1) necessary conditions fail: too few free GPUs, or no node with room for the
    largest pod."""
    return capacity.free < shape.gpus or capacity.largest_free_block < shape.largest_pod


def _fitted(name: str, capacity: ClusterCapacity, shape: _Shape) -> _Fitted:
    """The member's capacity verdict for ``shape``, memoised per capacity version.

    Bounds before fits: the O(1) bounds reject without packing; under most-free, a member
    ``surely_fits`` proves feasible is not packed unless chosen (its verdict reads no
    placement); otherwise the packer decides, and its misfit gets the numeric reason.
    """
    memo = _memo(capacity)
    key = (name, shape.key)
    found = memo.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    groups = shape.groups
    free = capacity.free
    fits = 0 if shape.count_fits else None
    if _out_of_bounds(capacity, shape):
        fitted = _Fitted(Verdict(member=name, feasible=False, free=free, fits=fits,
                                 reason=explain_misfit(capacity, groups)), None, 0)
    elif not shape.best_fit and not shape.count_fits and surely_fits(capacity, groups):
        free_after = free - shape.gpus
        fitted = _Fitted(
            Verdict(member=name, feasible=True, free=free, free_after=free_after,
                    score=float(free_after),
                    reason=f"fits: {free} GPUs free, {free_after} left after"),
            None, 0, unpacked=(capacity, groups))
    else:
        result = pack(capacity, groups)
        if result is None:
            fitted = _Fitted(Verdict(member=name, feasible=False, free=free, fits=fits,
                                     reason=explain_misfit(capacity, groups)), None, 0)
        else:
            free_after = free - shape.gpus
            score = float(-free_after if shape.best_fit else free_after)
            fits = count_fits(capacity, groups) if shape.count_fits else None
            times = f", fits {fits} time(s)" if fits is not None else ""
            fitted = _Fitted(
                Verdict(member=name, feasible=True, free=free, fits=fits,
                        free_after=free_after, score=score,
                        reason=f"fits: {free} GPUs free, {free_after} left after{times}"),
                result, result.leftover() if shape.best_fit else 0)
    memo[key] = fitted
    return fitted


def _gated(name: str, capacity: ClusterCapacity, reason: str, shape: _Shape) -> Verdict:
    """The verdict of a member a gate rejected (memoised like ``_fitted``: it reads the
    member's free GPUs, the reason and whether fits are counted)."""
    memo = _memo(capacity)
    key = ("gate", name, reason, shape.count_fits)
    found = memo.get(key)
    if found is None:
        found = memo[key] = Verdict(member=name, feasible=False, reason=reason,
                                    free=capacity.free, fits=0 if shape.count_fits else None)
    return found  # type: ignore[return-value]


def decide(members: Sequence[MemberSnapshot], request: PlacementRequest) -> Decision:
    """Choose a member for ``request``; raises PlacementError when the request is invalid.

    Gates and O(1) capacity bounds run for every member; the packer then runs in rank order
    and, unless the request is exhaustive, stops after the first feasible rank (members
    tied with it on preference and score are still packed, for a deterministic choice).
    A member's verdict is memoised on its capacity per request shape (``_fitted``), so in
    the controller's exhaustive decisions a member that did not change since the last
    decision of the same shape costs a gate and a dict lookup.
    """
    if request.policy not in POLICIES:
        raise PlacementError(f"unknown placement policy {request.policy!r} "
                             f"(known: {', '.join(POLICIES)})")
    if request.pin is not None and all(m.name != request.pin for m in members):
        known = ", ".join(sorted(m.name for m in members)) or "none"
        raise PlacementError(f"pinned member {request.pin!r} (dispatcher.io/cluster) does not "
                             f"exist; members: {known}")
    selector = _selector(request)
    demand = request.demand
    best_fit = request.policy == "best-fit"
    shape = _Shape.of(demand, best_fit=best_fit, count_fits=request.count_fits)
    gpus = shape.gpus
    exhaustive = request.exhaustive or request.count_fits
    prefer = {name: i for i, name in enumerate(request.prefer)}
    weights = request.weights
    unpreferred = len(prefer)

    if exhaustive:
        return _exhaustive(members, request, selector, shape)
    rejected: list[Verdict] = []
    # (preference, -score, name, index into ``fitted``) for members that pass every gate;
    # names are unique, so the tuples sort without comparing further.
    candidates: list[tuple[int, float, str, int]] = []
    fitted: list[tuple[MemberSnapshot, _Fitted | None]] = []
    for member in members:
        name = member.name
        capacity = member.capacity
        reason = _gate(member, request, selector)
        if reason is not None:
            rejected.append(_gated(name, capacity, reason, shape))
            continue
        # Exhaustive: the whole verdict now (memoised). Otherwise only the bounds here, as
        # a fresh decision would: members ranked below the first feasible one stay "not
        # evaluated" even when an earlier decision packed them.
        entry = (_fitted(name, capacity, shape) if exhaustive or _out_of_bounds(capacity, shape)
                 else None)
        if entry is not None and entry.verdict.feasible is False:
            rejected.append(entry.verdict)
            continue
        score = float(-(capacity.free - gpus) if best_fit else capacity.free - gpus)
        if weights:
            score += weights.get(name, 0.0)
        candidates.append((prefer.get(name, unpreferred) if prefer else 0, -score, name,
                           len(fitted)))
        fitted.append((member, entry))
    candidates.sort()

    feasible: list[tuple[tuple[int, float, int, str], Verdict, _Fitted]] = []
    skipped: list[Verdict] = []
    stop_at: tuple[int, float] | None = None
    for preference, neg_score, name, index in candidates:
        member, entry = fitted[index]
        if stop_at is not None and (preference, neg_score) != stop_at and not exhaustive:
            capacity = member.capacity
            skipped.append(Verdict(
                member=name, feasible=None, free=capacity.free,
                free_after=capacity.free - gpus, score=-neg_score,
                reason="not evaluated: a better-ranked member fits"))
            continue
        if entry is None:
            entry = _fitted(name, member.capacity, shape)
        verdict = entry.verdict
        if not verdict.feasible:
            rejected.append(verdict)
            continue
        if stop_at is None:
            stop_at = (preference, neg_score)
        if verdict.score != -neg_score:  # a weight applies
            verdict = replace(verdict, score=-neg_score)
        feasible.append(((preference, neg_score, entry.leftover, name), verdict, entry))

    return _decision(request, feasible, skipped, rejected)


def _exhaustive(members: Sequence[MemberSnapshot], request: PlacementRequest,
                selector: Selector | None, shape: _Shape) -> Decision:
    """``decide`` when every member is evaluated (the controller's path): one pass, each
    member's verdict from its memo, no ranking of candidates before packing."""
    prefer = {name: i for i, name in enumerate(request.prefer)}
    weights = request.weights
    unpreferred = len(prefer)
    rejected: list[Verdict] = []
    feasible: list[tuple[tuple[int, float, int, str], Verdict, _Fitted]] = []
    for member in members:
        name = member.name
        capacity = member.capacity
        reason = _gate(member, request, selector)
        if reason is not None:
            rejected.append(_gated(name, capacity, reason, shape))
            continue
        entry = _fitted(name, capacity, shape)
        verdict = entry.verdict
        if not verdict.feasible:
            rejected.append(verdict)
        elif prefer or weights:
            score = (verdict.score or 0.0) + weights.get(name, 0.0)
            if score != verdict.score:
                verdict = replace(verdict, score=score)
            feasible.append(((prefer.get(name, unpreferred), -score, entry.leftover, name),
                             verdict, entry))
        else:
            feasible.append((entry.rank, verdict, entry))
    return _decision(request, feasible, [], rejected)


def _decision(request: PlacementRequest,
              feasible: list[tuple[tuple[int, float, int, str], Verdict, _Fitted]],
              skipped: list[Verdict], rejected: list[Verdict]) -> Decision:
    """Verdicts best first (feasible by rank, then not evaluated, then the rest by name)."""
    demand = request.demand
    feasible.sort(key=_rank)
    chosen = feasible[0][1].member if feasible else None
    assignment = feasible[0][2].assignment() if feasible else ()
    ranked: list[Verdict] = []
    for i, (_, verdict, entry) in enumerate(feasible):
        if i == 0 or request.count_fits:
            ranked.append(replace(verdict, assignment=entry.assignment()))
        else:
            ranked.append(verdict)
    ranked.extend(skipped)
    rejected.sort(key=_member)
    ranked.extend(rejected)
    return Decision(policy=request.policy, pods=demand.pods, gpus=demand.gpus,
                    gangs=sum(1 for g in demand.gangs if not g.independent),
                    verdicts=tuple(ranked), chosen=chosen, assignment=assignment,
                    summary=_summary(ranked, chosen, request, feasible=len(feasible),
                                     unchecked=len(skipped)))


_rank = operator.itemgetter(0)
_member = operator.attrgetter("member")


def _units(demand: Demand) -> str:
    """``in 2 gang(s)``, ``as 3 independent pod(s)`` or both: how the framework will start
    the pods (all of them are placed together either way)."""
    gangs = sum(1 for g in demand.gangs if not g.independent)
    solo = sum(g.pods for g in demand.gangs if g.independent)
    parts = ([f"in {gangs} gang(s)"] if gangs or not solo else []) \
        + ([f"{'and' if gangs else 'as'} {solo} independent pod(s)"] if solo else [])
    return " ".join(parts)


def _summary(ranked: Sequence[Verdict], chosen: str | None, request: PlacementRequest, *,
             feasible: int, unchecked: int) -> str:
    """One line for the Pending condition message and logs."""
    what = f"{request.demand.pods} pod(s) / {request.demand.gpus} GPU(s) " \
           f"{_units(request.demand)}"
    if chosen is not None:
        best = ranked[0]
        more = f", {unchecked} not evaluated" if unchecked else ""
        return (f"placed {what} on {chosen} ({request.policy}, {best.free_after} GPUs free "
                f"after; {feasible} of {len(ranked)} member(s) feasible{more})")
    if not ranked:
        return f"no member can take {what}: no members"
    # Group members with the same reason so 100 cordoned members take one clause.
    by_reason: dict[str, list[str]] = {}
    for verdict in ranked:
        by_reason.setdefault(verdict.reason, []).append(verdict.member)
    clauses = []
    for reason, names in by_reason.items():
        who = names[0] if len(names) == 1 else f"{names[0]} and {len(names) - 1} more"
        clauses.append(f"{who}: {reason}")
    line = f"no member can take {what}: " + "; ".join(clauses)
    return line if len(line) <= _SUMMARY_LIMIT else line[: _SUMMARY_LIMIT - 3] + "..."
