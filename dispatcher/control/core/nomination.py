"""Which worker MultiKueue should copy a hub Workload to: the external dispatcher's decision.

Pure: a function of the hub Workload (``workloads.kueueworkload``), when its current
nominations were first seen, and the placement of its demand over the MultiKueue workers
(``placing.place_ask``, the same node-level fit as a dispatch). Kueue keeps the tenancy
(quota, cohorts, fair sharing, preemption): a Workload is decided here only once the hub's
ClusterQueue reserved its quota and its MultiKueue check waits for a worker.

When a worker fits it now, that one worker is nominated: one remote copy, on nodes that
hold every gang. When none does (a saturated fleet), waiting for one to fit costs a round
trip per freed slot (we see the GPUs free, nominate, MultiKueue copies the Workload, the
worker's Kueue admits it), which MultiKueue's own all-at-once dispatcher does not pay: its
copies already wait in every worker's queue and the first worker whose quota frees admits
one at once. So a Workload no worker fits now *stands by* on every worker whose nodes could
hold every gang once their GPUs free (the bare fleet, ``parking``), best first, and the
first of them to admit it takes it; a worker whose nodes never could is not sent a copy.

==  ==============================================  =====================================
#   when                                            answer
==  ==============================================  =====================================
1   not waiting for a nomination (no quota yet,     NOTHING; RELEASE what we held when it
    finished, deleted, chosen, check not Pending)   finished, is gone, lost its quota, or
                                                    another nominee than the one we held
                                                    GPUs on admitted it
2   nominated, for less than ``admit_within``       NOTHING (look again when it is up); HOLD
                                                    its nominee's GPUs again when we hold
                                                    none for it (nominated before a restart)
3   nominated that long, a worker not yet           NOMINATE the same list plus it (never
    nominated fits now, fewer than 20 listed        removed: a listed worker may have
                                                    admitted a copy already)
4   nominated that long, nothing else fits          NOTHING (looked at again on a change)
5   not nominated, a worker fits now                NOMINATE it (its GPUs reserved)
6   not nominated, nothing fits now, some worker's  NOMINATE those workers (standby; no
    nodes could hold it once free                   GPUs reserved: none is free)
7   not nominated, no worker's nodes ever could     NOTHING, with why (the quota stays
                                                    reserved in Kueue meanwhile)
==  ==============================================  =====================================
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.parking import BareFleet
from dispatcher.control.core.placing import Ask, Placement, Setting, place_ask
from dispatcher.control.core.queue import Entry, PendingQueue
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.kueueworkload import MAX_NOMINATED, KueueWorkload

__all__ = ["Candidates", "Fit", "Nomination", "NominationKind", "decide", "needs_placement",
           "place"]


class NominationKind(enum.StrEnum):
    NOTHING = "nothing"
    NOMINATE = "nominate"
    HOLD = "hold"  # reserve the placement's GPUs, write nothing
    RELEASE = "release"


class Candidates(enum.StrEnum):
    """Which workers ``decide``'s placement is over."""

    OTHERS = "others"  # the check's workers not nominated yet (rows 3-6)
    NOMINEES = "nominees"  # those nominated (row 2's HOLD)


@dataclass(frozen=True, kw_only=True)
class Nomination:
    """The answer: ``members`` is the whole list to write (NOMINATE), ``placement`` the
    decision that chose the new one (its reservation is taken), ``recheck_after`` when to
    look again without an event."""

    kind: NominationKind
    reason: str
    members: tuple[str, ...] = ()
    placement: Placement | None = None
    recheck_after: float | None = None


@dataclass(frozen=True, kw_only=True)
class Fit:
    """``place``'s answer: the placement over the candidates now and, when none fits now
    and the Workload is not nominated yet, ``standby``: the candidates whose nodes could
    hold every gang once their GPUs free, best first (row 6)."""

    now: Placement
    standby: tuple[str, ...] = ()


def _waited(wl: KueueWorkload, since: float | None, now: float) -> float:
    return 0.0 if since is None else max(0.0, now - since)


def needs_placement(wl: KueueWorkload, *, held: str | None, since: float | None, now: float,
                    admit_within: float) -> Candidates | None:
    """Over which workers ``decide`` reads a placement (None: it reads none, the engine
    does not run)."""
    if wl.waiting() is not None:
        return None
    if not wl.nominated:
        return Candidates.OTHERS
    if len(wl.nominated) < MAX_NOMINATED and admit_within > 0 \
            and _waited(wl, since, now) >= admit_within:
        return Candidates.OTHERS
    return None if held is not None else Candidates.NOMINEES


def decide(wl: KueueWorkload, *, held: str | None, since: float | None, now: float,
           admit_within: float, fit: Fit | None) -> Nomination:
    """The answer for ``wl`` (table above). ``held``: the worker we hold GPUs on for it
    (None: none); ``since``: when its current nominations were first seen (None: not
    nominated)."""
    placement = fit.now if fit is not None else None
    why = wl.waiting()
    if why is not None:
        gone = wl.deleting or wl.finished or (wl.cluster is None and not wl.quota_reserved) \
            or (wl.cluster is not None and wl.cluster != held)
        if held is not None and gone:
            return Nomination(kind=NominationKind.RELEASE, reason=why)
        return Nomination(kind=NominationKind.NOTHING, reason=why)
    if wl.nominated:
        listed = ", ".join(wl.nominated)
        waited = _waited(wl, since, now)
        if admit_within <= 0 or waited < admit_within:
            recheck = admit_within - waited if admit_within > 0 else None
            if held is None and placement is not None and placement.reservation is not None \
                    and placement.decision.chosen in wl.nominated:
                return Nomination(kind=NominationKind.HOLD, placement=placement,
                                  recheck_after=recheck,
                                  reason=f"nominated {listed} before: its GPUs held again")
            return Nomination(kind=NominationKind.NOTHING,
                              reason=f"nominated {listed}: waiting for a worker to admit it",
                              recheck_after=recheck)
        chosen = placement.decision.chosen if placement is not None else None
        if len(wl.nominated) >= MAX_NOMINATED or chosen is None or chosen in wl.nominated:
            return Nomination(kind=NominationKind.NOTHING,
                              reason=f"nominated {listed} {waited:.0f}s ago, none admitted "
                                     f"it; no other worker fits now")
        return Nomination(kind=NominationKind.NOMINATE, members=(*wl.nominated, chosen),
                          placement=placement,
                          reason=f"{listed} did not admit it within {admit_within:.0f}s; "
                                 f"adding {chosen}: {placement.decision.summary}"
                          if placement is not None else "")
    if placement is None or placement.decision.chosen is None:
        summary = placement.decision.summary if placement is not None else "no workers"
        if fit is not None and fit.standby:
            return Nomination(kind=NominationKind.NOMINATE, members=fit.standby,
                              reason=f"no worker fits now ({summary}); standing by on "
                                     f"{', '.join(fit.standby)}, whose nodes could hold it "
                                     f"once free: the first to admit it takes it")
        return Nomination(kind=NominationKind.NOTHING, reason=f"no worker fits now: {summary}")
    return Nomination(kind=NominationKind.NOMINATE, members=(placement.decision.chosen,),
                      placement=placement, reason=placement.decision.summary)


def place(wl: KueueWorkload, demand: Demand, *, api_version: str, kind: str,
          annotations: Mapping[str, str], members: Callable[[], Sequence[MemberSnapshot]],
          now: float, reservation_ttl_s: float, default_policy: str,
          bare: BareFleet | None = None) -> Fit:
    """``place_ask`` for the Workload's demand over ``members`` (the MultiKueue workers not
    yet nominated, or the nominees): the dispatch's node-level fit, its annotations' rules
    (pin, selector, policy, topology), and no queue of ours (Kueue orders the workloads);
    and, when none fits now and it is not nominated yet, the standby workers (``Fit``).
    ``bare``: the shell's ``BareFleet`` (it caches the bare copies)."""
    ask = Ask(entry=Entry(uid=wl.uid, priority=0, created=now, name=wl.name,
                          namespace=wl.namespace),
              demand=demand, api_version=api_version, kind=kind, annotations=annotations,
              queue=wl.queue or None)
    bare = bare if bare is not None else BareFleet()
    setting = Setting(members=members, bare=bare, queue=PendingQueue(backfill_limit=0),
                      default_policy=default_policy, now=now,
                      reservation_ttl_s=reservation_ttl_s)
    placement = place_ask(ask, setting)
    if placement.decision.chosen is not None or wl.nominated \
            or placement.reason is not PendingReason.NO_FEASIBLE_MEMBER:
        return Fit(now=placement)
    request, _ = ask.request(setting)
    return Fit(now=placement, standby=_standby(members(), request, bare))


def _standby(members: Sequence[MemberSnapshot], request: PlacementRequest, bare: BareFleet
             ) -> tuple[str, ...]:
    """The members whose nodes could hold ``request`` with nothing running, best first (a
    member not ready or cordoned now, or whose nodes are not known yet, is left out: it is
    nominated once it fits)."""
    return bare.could_hold([m for m in members if m.ready and not m.cordoned], request)
