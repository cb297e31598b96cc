"""A member's verdict for one request shape, memoised on its capacity.

The controller asks for every member's verdict on every decision (``placement.decided``
logs them all). A verdict is a function of the member's nodes (its capacity version), its
name and the request shape (pod groups, GPUs, policy, whether fits are counted), so it is
kept on the capacity until that changes: a member that did not change since the last
decision of the same shape costs a dictionary lookup. Bounds before fits: the O(1) bounds
reject without packing, and under most-free a member ``surely_fits`` proves feasible is not
packed unless chosen.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import ClassVar

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.topology import TopologyLevel
from dispatcher.placement.domains import Unit, fit_domains, units_of
from dispatcher.placement.fit import (
    PackResult,
    PodGroup,
    count_fits,
    pack,
    pod_groups,
    surely_fits,
)
from dispatcher.placement.misfit import explain_misfit
from dispatcher.placement.model import NodeGrant, Verdict
from dispatcher.workloads.demand import Demand, Gang, TopologyConstraint

__all__ = ["Fitted", "Shape", "gated", "out_of_bounds", "verdict_of"]

_MEMO_LIMIT = 512


class Fitted:
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


class Shape:
    """What a member's capacity verdict reads from the request, hashed once per decision.

    ``key`` is a small int standing for (pod groups, GPUs, policy, count_fits, topology
    units): member memos are keyed by (member name, key), so a lookup hashes a str (cached
    by Python) and an int, not the pod groups (nested dataclasses) once per member.
    ``units`` are the gangs kept in one topology domain (``placement.domains``) and
    ``rest`` the gangs placed anywhere; without units the verdict is the plain fit.
    """

    __slots__ = ("best_fit", "count_fits", "gpus", "groups", "key", "largest_pod", "rest",
                 "units")

    _ids: ClassVar[dict[tuple[object, ...], int]] = {}
    _next: ClassVar[Iterator[int]] = itertools.count()

    def __init__(self, groups: tuple[PodGroup, ...], *, gpus: int, best_fit: bool,
                 count_fits: bool, units: tuple[Unit, ...] = (),
                 rest: tuple[Gang, ...] = ()) -> None:
        self.groups = groups
        self.gpus = gpus
        self.best_fit = best_fit
        self.count_fits = count_fits
        self.units = units
        self.rest = rest if units else ()
        self.largest_pod = max((g.gpus for g in groups), default=0)
        ids = Shape._ids
        identity = (groups, gpus, best_fit, count_fits, units, self.rest)
        key = ids.get(identity)
        if key is None:
            if len(ids) >= _MEMO_LIMIT:  # ids are never reused: stale memo keys just miss
                ids.clear()
            key = ids[identity] = next(Shape._next)
        self.key = key

    _recent: ClassVar[dict[tuple[int, bool, bool, TopologyConstraint | None],
                           tuple[Demand, Shape]]] = {}

    @classmethod
    def of(cls, demand: Demand, *, best_fit: bool, count_fits: bool,
           topology: TopologyConstraint | None = None) -> Shape:
        """The shape of ``demand``, reused while the same Demand object is asked again (a
        workload waiting for room is decided again with its cached resolution): grouping
        the pods and interning the groups cost more than a 100-member decision's lookups.
        ``topology`` (the request's annotation) overrides every gang's own constraint."""
        recent = cls._recent
        slot = (id(demand), best_fit, count_fits, topology)
        found = recent.get(slot)
        if found is not None and found[0] is demand:
            return found[1]
        units, rest = units_of(demand, topology)
        shape = cls(pod_groups(demand), gpus=demand.gpus, best_fit=best_fit,
                    count_fits=count_fits, units=units, rest=rest)
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


def out_of_bounds(capacity: ClusterCapacity, shape: Shape) -> bool:
    """O(1) necessary conditions fail: too few free GPUs, or no node with room for the
    largest pod."""
    return capacity.free < shape.gpus or capacity.largest_free_block < shape.largest_pod


def verdict_of(name: str, capacity: ClusterCapacity, shape: Shape,
               levels: tuple[TopologyLevel, ...] = ()) -> Fitted:
    """The member's capacity verdict for ``shape``, memoised per capacity version.

    Bounds before fits: the O(1) bounds reject without packing; under most-free, a member
    ``surely_fits`` proves feasible is not packed unless chosen (its verdict reads no
    placement); otherwise the packer decides, and its misfit gets the numeric reason.
    A shape with topology units is fitted per domain (``placement.domains``) over the
    member's ``levels`` (part of the memo key: a level declared later changes the answer).
    """
    memo = _memo(capacity)
    key: tuple[object, ...] = (name, shape.key, levels) if shape.units else (name, shape.key)
    found = memo.get(key)
    if found is not None:
        return found  # type: ignore[return-value]
    groups = shape.groups
    free = capacity.free
    fits = 0 if shape.count_fits else None
    if out_of_bounds(capacity, shape):
        entry = Fitted(Verdict(member=name, feasible=False, free=free, fits=fits,
                                 reason=explain_misfit(capacity, groups)), None, 0)
    elif shape.units:
        entry = _in_domains(name, capacity, shape, levels)
    elif not shape.best_fit and not shape.count_fits and surely_fits(capacity, groups):
        free_after = free - shape.gpus
        entry = Fitted(
            Verdict(member=name, feasible=True, free=free, free_after=free_after,
                    score=float(free_after),
                    reason=f"fits: {free} GPUs free, {free_after} left after"),
            None, 0, unpacked=(capacity, groups))
    else:
        result = pack(capacity, groups)
        if result is None:
            entry = Fitted(Verdict(member=name, feasible=False, free=free, fits=fits,
                                     reason=explain_misfit(capacity, groups)), None, 0)
        else:
            free_after = free - shape.gpus
            score = float(-free_after if shape.best_fit else free_after)
            fits = count_fits(capacity, groups) if shape.count_fits else None
            times = f", fits {fits} time(s)" if fits is not None else ""
            entry = Fitted(
                Verdict(member=name, feasible=True, free=free, fits=fits,
                        free_after=free_after, score=score,
                        reason=f"fits: {free} GPUs free, {free_after} left after{times}"),
                result, result.leftover() if shape.best_fit else 0)
    memo[key] = entry
    return entry


def _in_domains(name: str, capacity: ClusterCapacity, shape: Shape,
                levels: tuple[TopologyLevel, ...]) -> Fitted:
    """The verdict of a shape whose gangs must each stay in one topology domain. A counted
    fit is 1 (a lower bound: the packer placed it once; copies are not counted per
    domain). A misfit that is not the domains' doing (the demand does not fit the member
    at all: a product it lacks, too few GPUs) gives the plain reason, which says more."""
    found = fit_domains(capacity, levels, shape.units, shape.rest, best_fit=shape.best_fit,
                        rooms=shape.count_fits)
    free = capacity.free
    if found.result is None:
        reason = found.reason if pack(capacity, shape.groups) is not None \
            else explain_misfit(capacity, shape.groups)
        return Fitted(Verdict(member=name, feasible=False, free=free,
                              fits=0 if shape.count_fits else None, reason=reason,
                              rooms=found.rooms), None, 0)
    free_after = free - shape.gpus
    score = float(-free_after if shape.best_fit else free_after)
    return Fitted(
        Verdict(member=name, feasible=True, free=free, fits=1 if shape.count_fits else None,
                free_after=free_after, score=score, domains=found.domains, rooms=found.rooms,
                reason=f"fits: {free} GPUs free, {free_after} left after; {found.reason}"),
        found.result, found.result.leftover() if shape.best_fit else 0)


def gated(name: str, capacity: ClusterCapacity, reason: str, shape: Shape) -> Verdict:
    """The verdict of a member a gate rejected (memoised like ``verdict_of``: it reads the
    member's free GPUs, the reason and whether fits are counted)."""
    memo = _memo(capacity)
    key = ("gate", name, reason, shape.count_fits)
    found = memo.get(key)
    if found is None:
        found = memo[key] = Verdict(member=name, feasible=False, reason=reason,
                                    free=capacity.free, fits=0 if shape.count_fits else None)
    return found  # type: ignore[return-value]
