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

from collections.abc import Sequence
from dataclasses import replace

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.placement.fit import (
    PackResult,
    PodGroup,
    count_fits,
    explain_misfit,
    pack,
    pod_groups,
)
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
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
            and (request.group, request.kind) not in member.served_kinds):
        group = f" ({request.group})" if request.group else ""
        return f"kind {request.kind}{group} not served"
    return None


def eligible(members: Sequence[MemberSnapshot], request: PlacementRequest) -> tuple[str, ...]:
    """Members that could take the request at all (every gate passes; free capacity not
    considered): who is left after a member refused a copy. Raises PlacementError like
    ``decide`` for an invalid selector."""
    selector = _selector(request)
    return tuple(m.name for m in members if _gate(m, request, selector) is None)


_MEMO_LIMIT = 256


def _pack_or_why(capacity: ClusterCapacity, groups: tuple[PodGroup, ...]
                 ) -> PackResult | str:
    """``pack``, or the misfit reason when nothing fits, memoised per capacity version.

    Both depend only on the member's nodes (free GPUs, classes) and the pod groups, so a
    member that has not changed since the last decision with the same shapes answers from
    its memo: the controller's every-member verdicts stay cheap under bursts of similar
    workloads. The memo is dropped when the capacity changes.
    """
    memo = _memo(capacity)
    found = memo.get(groups)
    if found is None:
        packed = pack(capacity, groups)
        found = packed if packed is not None else _why(capacity, groups)
        memo[groups] = found
    return found  # type: ignore[return-value]


def _why(capacity: ClusterCapacity, groups: tuple[PodGroup, ...]) -> str:
    """``explain_misfit``, memoised like ``_pack_or_why``."""
    memo = _memo(capacity)
    key = ("why", groups)
    found = memo.get(key)
    if found is None:
        found = memo[key] = explain_misfit(capacity, groups)
    return found  # type: ignore[return-value]


def _memo(capacity: ClusterCapacity) -> dict[object, object]:
    memo = capacity.verdict_memo
    if memo.get(_VERSION) != capacity.version or len(memo) > _MEMO_LIMIT:
        memo.clear()
        memo[_VERSION] = capacity.version
    return memo


_VERSION = "version"


def _quick_misfit(capacity: ClusterCapacity, gpus: int, largest_pod: int) -> bool:
    """O(1) necessary conditions: enough free GPUs, and one node with room for the largest pod."""
    return capacity.free < gpus or capacity.largest_free_block < largest_pod


def decide(members: Sequence[MemberSnapshot], request: PlacementRequest) -> Decision:
    """Choose a member for ``request``; raises PlacementError when the request is invalid.

    Gates and O(1) capacity checks run for every member; the packer then runs in rank order
    and, unless the request is exhaustive, stops after the first feasible rank (members
    tied with it on preference and score are still packed, for a deterministic choice).
    """
    if request.policy not in POLICIES:
        raise PlacementError(f"unknown placement policy {request.policy!r} "
                             f"(known: {', '.join(POLICIES)})")
    names = {m.name for m in members}
    if request.pin is not None and request.pin not in names:
        known = ", ".join(sorted(names)) or "none"
        raise PlacementError(f"pinned member {request.pin!r} (dispatcher.io/cluster) does not "
                             f"exist; members: {known}")
    selector = _selector(request)
    demand = request.demand
    groups = pod_groups(demand)
    gpus = demand.gpus
    largest_pod = max((g.gpus for g in groups), default=0)
    best_fit = request.policy == "best-fit"
    exhaustive = request.exhaustive or request.count_fits
    no_fits = 0 if request.count_fits else None
    prefer = {name: i for i, name in enumerate(request.prefer)}

    rejected: list[Verdict] = []
    # (preference, -score, name, member, score) for members that pass every gate
    candidates: list[tuple[int, float, str, MemberSnapshot, float]] = []
    for member in members:
        capacity = member.capacity
        reason = _gate(member, request, selector)
        if reason is None and _quick_misfit(capacity, gpus, largest_pod):
            reason = _why(capacity, groups)
        if reason is not None:
            rejected.append(Verdict(member=member.name, feasible=False, reason=reason,
                                    free=capacity.free, fits=no_fits))
            continue
        free_after = capacity.free - gpus
        score = float(-free_after if best_fit else free_after)
        score += request.weights.get(member.name, 0.0)
        candidates.append((prefer.get(member.name, len(prefer)), -score, member.name,
                           member, score))
    candidates.sort(key=lambda c: (c[0], c[1], c[2]))

    feasible: list[tuple[tuple[int, float, int, str], Verdict, PackResult]] = []
    skipped: list[Verdict] = []
    stop_at: tuple[int, float] | None = None
    for preference, neg_score, name, member, score in candidates:
        capacity = member.capacity
        if stop_at is not None and (preference, neg_score) != stop_at and not exhaustive:
            skipped.append(Verdict(
                member=name, feasible=None, free=capacity.free,
                free_after=capacity.free - gpus, score=score,
                reason="not evaluated: a better-ranked member fits"))
            continue
        result = _pack_or_why(capacity, groups)
        if isinstance(result, str):
            rejected.append(Verdict(member=name, feasible=False, free=capacity.free,
                                    reason=result, fits=no_fits))
            continue
        if stop_at is None:
            stop_at = (preference, neg_score)
        free_after = capacity.free - gpus
        fits = count_fits(capacity, groups) if request.count_fits else None
        times = f", fits {fits} time(s)" if fits is not None else ""
        verdict = Verdict(member=name, feasible=True, free=capacity.free, fits=fits,
                          free_after=free_after, score=score,
                          reason=f"fits: {capacity.free} GPUs free, {free_after} left "
                                 f"after{times}")
        leftover = result.leftover() if best_fit else 0
        feasible.append(((preference, neg_score, leftover, name), verdict, result))

    feasible.sort(key=lambda item: item[0])
    chosen = feasible[0][1].member if feasible else None
    assignment = feasible[0][2].assignment() if feasible else ()
    ranked: list[Verdict] = []
    for i, (_, verdict, result) in enumerate(feasible):
        if i == 0 or request.count_fits:
            grants = assignment if i == 0 else result.assignment()
            ranked.append(replace(verdict, assignment=grants))
        else:
            ranked.append(verdict)
    ranked.extend(skipped)
    ranked.extend(sorted(rejected, key=lambda v: v.member))
    return Decision(policy=request.policy, pods=demand.pods, gpus=gpus,
                    gangs=sum(1 for g in demand.gangs if not g.independent),
                    verdicts=tuple(ranked), chosen=chosen,
                    assignment=assignment, summary=_summary(ranked, chosen, request))


def _units(demand: Demand) -> str:
    """``in 2 gang(s)``, ``as 3 independent pod(s)`` or both: how the framework will start
    the pods (all of them are placed together either way)."""
    gangs = sum(1 for g in demand.gangs if not g.independent)
    solo = sum(g.pods for g in demand.gangs if g.independent)
    parts = ([f"in {gangs} gang(s)"] if gangs or not solo else []) \
        + ([f"{'and' if gangs else 'as'} {solo} independent pod(s)"] if solo else [])
    return " ".join(parts)


def _summary(ranked: Sequence[Verdict], chosen: str | None, request: PlacementRequest) -> str:
    """One line for the Pending condition message and logs."""
    what = f"{request.demand.pods} pod(s) / {request.demand.gpus} GPU(s) " \
           f"{_units(request.demand)}"
    if chosen is not None:
        best = ranked[0]
        feasible = sum(1 for v in ranked if v.feasible)
        unchecked = sum(1 for v in ranked if v.feasible is None)
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
