"""The decision: filter members, fit the gangs, score, choose, explain.

Filters run cheapest first and the first that rejects a member gives its reason: pin,
cluster selector, namespace allow-list, Ready, cordoned, served kind, on a Kueue member the
quota of the copy's ClusterQueue (``fleet.quota``; the reason gives both bounds), then gang
fit at node granularity (``placement.fit``). Feasible members are ranked by (``prefer``
order, policy score plus the member's weight, name), so the same input always gives the same
answer.

Policies (score: higher is better):

- ``most-free`` (default): free GPUs the member has left after the placement; spreads load
  and leaves room for the next large workload on the member with the most headroom.
- ``best-fit``: minus the free GPUs left after the placement, i.e. the fullest member that
  still fits wins; ties go to the placement that leaves fewer GPUs stranded on the nodes it
  uses. Packs members tightly, keeping other members empty for big gangs.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace

from dispatcher.fleet.queueing import KUEUE
from dispatcher.fleet.quota import QuotaFit
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    PlacementError,
    PlacementRequest,
    Verdict,
)
from dispatcher.placement.selector import Selector, SelectorError, parse_selector
from dispatcher.placement.verdicts import Fitted, Shape, gated, out_of_bounds, verdict_of
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


def _quota(member: MemberSnapshot, request: PlacementRequest) -> QuotaFit | None:
    """The quota bound on a Kueue member whose queues are known (None: not bounded).
    The member's in-flight reservations count against it: a copy just sent is not in the
    ClusterQueue's numbers until its Workload reserves quota (then it is, once)."""
    quota, queueing = member.quota, member.queueing
    if quota is None or queueing.system != KUEUE:
        return None
    namespace = request.namespace or "default"
    return quota.fit(request.demand, namespace=namespace,
                     queue=queueing.label(namespace, request.queue),
                     in_flight=member.in_flight)


def _quota_misfit(fit: QuotaFit | None, member: MemberSnapshot) -> str | None:
    if fit is None or fit.fits:
        return None
    return f"{fit.reason}; {member.capacity.free} free on nodes"


def _with_quota(verdict: Verdict, fit: QuotaFit | None) -> Verdict:
    return verdict if fit is None else replace(verdict, quota=fit)


def eligible(members: Sequence[MemberSnapshot], request: PlacementRequest) -> tuple[str, ...]:
    """Members that could take the request at all (every gate passes; free capacity not
    considered): who is left after a member refused a copy. Raises PlacementError like
    ``decide`` for an invalid selector."""
    selector = _selector(request)
    return tuple(m.name for m in members if _gate(m, request, selector) is None)


def decide(members: Sequence[MemberSnapshot], request: PlacementRequest) -> Decision:
    """Choose a member for ``request``; raises PlacementError when the request is invalid.

    Gates and O(1) capacity bounds run for every member; the packer then runs in rank order
    and, unless the request is exhaustive, stops after the first feasible rank (members
    tied with it on preference and score are still packed, for a deterministic choice).
    A member's verdict is memoised on its capacity per request shape
    (``verdicts.verdict_of``), so in the controller's exhaustive decisions a member that did
    not change since the last decision of the same shape costs a gate and a dict lookup.
    """
    if request.policy not in POLICIES:
        raise PlacementError(f"unknown placement policy {request.policy!r} "
                             f"(known: {', '.join(POLICIES)})")
    if request.pin is not None and all(m.name != request.pin for m in members):
        known = ", ".join(sorted(m.name for m in members)) or "none"
        raise PlacementError(f"pinned member {request.pin!r} (dispatcher.io/cluster) does not "
                             f"exist; members: {known}")
    selector = _selector(request)
    shape = Shape.of(request.demand, best_fit=request.policy == "best-fit",
                      count_fits=request.count_fits, topology=request.topology)
    if request.exhaustive or request.count_fits:
        return _exhaustive(members, request, selector, shape)
    rejected: list[Verdict] = []
    candidates, fitted = _candidates(members, request, selector, shape, rejected)
    feasible, skipped = _in_rank_order(candidates, fitted, shape, rejected)
    return _decision(request, feasible, skipped, rejected)


_Candidate = tuple[int, float, str, int]
_Feasible = tuple[tuple[int, float, int, str], Verdict, Fitted]
_Fitted = tuple[MemberSnapshot, Fitted | None, QuotaFit | None]


def _candidates(members: Sequence[MemberSnapshot], request: PlacementRequest,
                selector: Selector | None, shape: Shape, rejected: list[Verdict]
                ) -> tuple[list[_Candidate], list[_Fitted]]:
    """Members past every gate and the O(1) bounds, ranked (preference, -score, name,
    index into the second list); the others go to ``rejected``. Only the bounds run here,
    as a fresh decision would: members ranked below the first feasible one stay "not
    evaluated" even when an earlier decision packed them. Without ``request.reasons`` the
    rejected ones are left out (no verdict built)."""
    prefer = {name: i for i, name in enumerate(request.prefer)}
    unpreferred, weights = len(prefer), request.weights
    best_fit, gpus = shape.best_fit, shape.gpus
    candidates: list[_Candidate] = []
    fitted: list[_Fitted] = []
    reasons = request.reasons
    for member in members:
        name, capacity = member.name, member.capacity
        reason = _gate(member, request, selector)
        quota = _quota(member, request) if reason is None else None
        reason = reason or _quota_misfit(quota, member)
        if reason is not None:
            if reasons:
                rejected.append(_with_quota(gated(name, capacity, reason, shape), quota))
            continue
        if out_of_bounds(capacity, shape):
            if reasons:
                rejected.append(verdict_of(name, capacity, shape,
                                           member.topology_levels).verdict)
            continue
        score = float(-(capacity.free - gpus) if best_fit else capacity.free - gpus)
        if weights:
            score += weights.get(name, 0.0)
        # names are unique, so the tuples sort without comparing further
        candidates.append((prefer.get(name, unpreferred) if prefer else 0, -score, name,
                           len(fitted)))
        fitted.append((member, None, quota))
    candidates.sort()
    return candidates, fitted


def _in_rank_order(candidates: list[_Candidate],
                   fitted: list[_Fitted], shape: Shape,
                   rejected: list[Verdict]) -> tuple[list[_Feasible], list[Verdict]]:
    """Pack in rank order until the first feasible rank (members tied with it are still
    packed, for a deterministic choice); the rest are "not evaluated"."""
    feasible: list[_Feasible] = []
    skipped: list[Verdict] = []
    stop_at: tuple[int, float] | None = None
    for preference, neg_score, name, index in candidates:
        member, entry, quota = fitted[index]
        if stop_at is not None and (preference, neg_score) != stop_at:
            capacity = member.capacity
            skipped.append(Verdict(
                member=name, feasible=None, free=capacity.free,
                free_after=capacity.free - shape.gpus, score=-neg_score,
                reason="not evaluated: a better-ranked member fits"))
            continue
        if entry is None:
            entry = verdict_of(name, member.capacity, shape, member.topology_levels)
        verdict = _with_quota(entry.verdict, quota)
        if not verdict.feasible:
            rejected.append(verdict)
            continue
        if stop_at is None:
            stop_at = (preference, neg_score)
        if verdict.score != -neg_score:  # a weight applies
            verdict = replace(verdict, score=-neg_score)
        feasible.append(((preference, neg_score, entry.leftover, name), verdict, entry))
    return feasible, skipped


def _exhaustive(members: Sequence[MemberSnapshot], request: PlacementRequest,
                selector: Selector | None, shape: Shape) -> Decision:
    """``decide`` when every member is evaluated (the controller's path): one pass, each
    member's verdict from its memo, no ranking of candidates before packing."""
    prefer = {name: i for i, name in enumerate(request.prefer)}
    weights = request.weights
    unpreferred = len(prefer)
    rejected: list[Verdict] = []
    feasible: list[_Feasible] = []
    for member in members:
        name = member.name
        capacity = member.capacity
        reason = _gate(member, request, selector)
        quota = _quota(member, request) if reason is None else None
        reason = reason or _quota_misfit(quota, member)
        if reason is not None:
            rejected.append(_with_quota(gated(name, capacity, reason, shape), quota))
            continue
        entry = verdict_of(name, capacity, shape, member.topology_levels)
        verdict = _with_quota(entry.verdict, quota)
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


def _decision(request: PlacementRequest, feasible: list[_Feasible], skipped: list[Verdict],
              rejected: list[Verdict]) -> Decision:
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
                                     unchecked=len(skipped)),
                    domains=feasible[0][1].domains if feasible else ())


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


def _in_domains(verdict: Verdict) -> str:
    """`` in rack r1`` (one domain) or `` in rack r1 (gang a), rack r2 (gang b)``."""
    domains = verdict.domains
    if not domains:
        return ""
    if len(domains) == 1:
        return f" in {domains[0].level} {domains[0].value}"
    return " in " + ", ".join(f"{d.level} {d.value} ({', '.join(d.gangs)})" for d in domains)


def _summary(ranked: Sequence[Verdict], chosen: str | None, request: PlacementRequest, *,
             feasible: int, unchecked: int) -> str:
    """One line for the Pending condition message and logs."""
    what = f"{request.demand.pods} pod(s) / {request.demand.gpus} GPU(s) " \
           f"{_units(request.demand)}"
    if chosen is not None:
        best = ranked[0]
        more = f", {unchecked} not evaluated" if unchecked else ""
        line = (f"placed {what} on {chosen}{_in_domains(best)} ({request.policy}, "
                f"{best.free_after} GPUs free after; {feasible} of {len(ranked)} member(s) "
                f"feasible{more})")
        # a Kueue member passed over for its quota says so: nodes alone would not tell why
        quota = [f"{v.member}: {v.reason}" for v in ranked
                 if v.quota is not None and not v.quota.fits]
        if quota:
            line += "; not by quota: " + "; ".join(quota)
        return line if len(line) <= _SUMMARY_LIMIT else line[: _SUMMARY_LIMIT - 3] + "..."
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
