"""The discrete-event loop: arrivals, dispatch decisions, completions, in virtual time.

No sleeping and no wall clock: a heap of timed events is drained in (time, kind, sequence)
order, so a seed fully determines a run. At each instant, completions free capacity first,
then arrivals join the queue, then one dispatch pass runs; the fleet is sampled at fixed
intervals in between (utilization per member, stranded GPUs):

* Every decision is the controller's own: ``control.core.placing.place_ask`` over the real
  capacity model (annotations, the namespace gate, the engine, parking), and the queue is
  the controller's ``control.core.queue.PendingQueue``, so a placement, parking or queue policy
  change shows here with no second implementation. A pass walks the queue in order
  (priority first, then namespaces take turns, then age), asking ``place_ask`` for each
  waiting workload and applying its queue step as the controller does: placed, waiting
  (for capacity, or behind its namespace's gate once a waiting workload has been passed
  over ``backfillLimit`` times), or parked.
* A parked workload (no member of the bare fleet could ever run it, or its annotations are
  invalid) is reported as never placeable, with the placement's reason per member.
* The memo of failed shapes is a cache *around* ``place_ask``, never a copy of it: capacity
  only shrinks between completions, so a "fits nowhere now" answer for a shape (demand and
  annotations) stays true until a workload finishes and frees GPUs on some member, and
  ``place_ask`` is not asked again for that shape until then.

Every placement is booked in an independent ``Ledger``, which raises if a node is ever given
more GPUs than it has.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dispatcher.control.core import parking
from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.placing import (
    Ask,
    Placement,
    QueueStep,
    Setting,
    place_ask,
    request_of,
)
from dispatcher.control.core.queue import Entry, PendingQueue
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.sim.backend import Backend
from dispatcher.sim.cores import choice
from dispatcher.sim.ledger import Ledger
from dispatcher.sim.results import RunResult, Sample, SimDispatch, SimWorkload, Unplaceable
from dispatcher.sim.scenario import QueueSpec
from dispatcher.workloads.demand import Demand

__all__ = ["Progress", "simulate"]

Progress = Callable[[float], None]
"""Called now and then with the virtual time reached (seconds)."""

_COMPLETE, _ARRIVE = 0, 1
_Events = list[tuple[float, int, int, object]]


class _Bare:
    """The bare fleet of a simulated run (the ``empty`` view). It never changes, so its
    answer to a request is kept: a memo around ``parking.never``, the parking rule."""

    def __init__(self, members: Sequence[MemberSnapshot]) -> None:
        self.members = members
        self.answers: dict[tuple[object, ...], parking.Never | None] = {}
        self.holders: dict[tuple[object, ...], tuple[str, ...]] = {}

    def never(self, members: Sequence[MemberSnapshot], request: PlacementRequest, *,
              excluded: Sequence[str]) -> parking.Never | None:
        key = (request.identity, tuple(excluded))
        if key not in self.answers:
            self.answers[key] = parking.never(parking.restrict(self.members,
                                                               excluded=excluded), request)
        return self.answers[key]

    def could_hold(self, members: Sequence[MemberSnapshot], request: PlacementRequest
                   ) -> tuple[str, ...]:
        names = {m.name for m in members}
        key = request.identity
        if key not in self.holders:
            self.holders[key] = parking.could_hold(self.members, request)
        return tuple(n for n in self.holders[key] if n in names)


@dataclass
class _Waiting:
    """A queued workload: its entry, what placing reads, its shape's small int."""

    entry: Entry
    workload: SimWorkload
    ask: Ask
    shape: int


@dataclass
class _Run:
    """The mutable state of one policy run."""

    backend: Backend
    ledger: Ledger
    policy: str
    duration: float
    queue: PendingQueue
    now: float = 0.0
    waiting: dict[str, _Waiting] = field(default_factory=dict)
    # (demand, annotations) -> a small int, so the hot loop never hashes a Demand; and how
    # many waiting workloads have each.
    shapes: dict[tuple[Demand, tuple[tuple[str, str], ...]], int] = field(default_factory=dict)
    shape_count: dict[int, int] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)  # uids that held their namespace back
    # shape -> epoch of its last "fits nowhere now"; only a completion since can change it.
    failed: dict[int, int] = field(default_factory=dict)
    epoch: int = 0
    freed_at: dict[str, int] = field(default_factory=dict)
    decisions: list[SimDispatch] = field(default_factory=list)
    unplaceable: list[Unplaceable] = field(default_factory=list)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    last_change: float = 0.0
    completed: int = 0
    placement_calls: int = 0
    bare: _Bare | None = None
    asking: _Waiting | None = None  # the workload ``place_ask`` is asked about now
    pass_setting: Setting | None = None  # what it reads in this pass (no cycle through it)
    claim_after_s: float = 0.0
    again: bool = False  # the queue's claims or gates changed: pass once more (as a round)

    def account(self) -> None:
        """Integrate GPU-seconds per member up to ``now``."""
        span = self.now - self.last_change
        if span > 0:
            for member, used in self.ledger.member_used.items():
                self.gpu_seconds[member] += used * span
        self.last_change = self.now

    def arrive(self, workload: SimWorkload) -> None:
        entry = Entry(uid=workload.uid, priority=workload.priority, created=workload.arrival,
                      name=f"{workload.namespace}/{workload.name}",
                      namespace=workload.namespace)
        ask = Ask(entry=entry, demand=workload.demand, api_version=workload.api_version,
                  kind=workload.kind, annotations=dict(workload.annotations))
        shape = self.shapes.setdefault((workload.demand, workload.annotations),
                                       len(self.shapes))
        self.shape_count[shape] = self.shape_count.get(shape, 0) + 1
        self.queue.add(entry)
        self.waiting[workload.uid] = _Waiting(entry, workload, ask, shape)

    def leave(self, item: _Waiting) -> None:
        del self.waiting[item.entry.uid]
        left = self.shape_count[item.shape] - 1
        if left:
            self.shape_count[item.shape] = left
        else:
            del self.shape_count[item.shape]

    def start(self, item: _Waiting, placement: Placement, events: _Events, seq: int) -> None:
        workload, picked = item.workload, choice(placement.decision)
        self.unclaim(item.entry.uid)
        for reached in self.queue.placed(item.entry):  # at its backfill limit: it claims
            self.failed.pop(self.waiting[reached.uid].shape, None)  # or gates, at once
            self.again = True
        self.leave(item)
        self.account()
        self.ledger.hold(uid=workload.uid, member=picked.member, pods=picked.pods)
        self.backend.bind(uid=workload.uid, choice=picked, durable=workload.run_time is None)
        self.decisions.append(SimDispatch(
            uid=workload.uid, name=workload.name, member=picked.member, start=self.now,
            wait=self.now - workload.arrival, nodes=picked.pods, template=workload.template,
            kind=workload.kind, gpus=workload.demand.gpus, namespace=workload.namespace))
        if workload.run_time is not None and self.now + workload.run_time <= self.duration:
            heapq.heappush(events, (self.now + workload.run_time, _COMPLETE, seq, workload))

    def unclaim(self, uid: str) -> None:
        """The member ``uid`` claimed is open again: what failed there may fit now (the
        memo of failed shapes is told, as for GPUs freed)."""
        member = self.queue.claimed_by(uid)
        if member is not None:
            self.epoch += 1
            self.freed_at[member] = self.epoch

    def park(self, item: _Waiting, placement: Placement) -> None:
        """Never placeable (as the controller parks it): reported with every member's
        reason when the bare fleet was asked, else the message alone."""
        workload, bare = item.workload, placement.bare
        self.unclaim(item.entry.uid)
        reasons = {v.member: v.reason for v in bare.verdicts} if bare is not None else {}
        self.queue.park(item.entry, str(placement.reason))
        self.leave(item)
        self.unplaceable.append(Unplaceable(
            uid=workload.uid, name=workload.name, kind=workload.kind,
            template=workload.template, gpus=workload.demand.gpus, reasons=reasons,
            parked=str(placement.reason),
            reason="; ".join(f"{m}: {r}" for m, r in reasons.items())
            or placement.decision.summary))

    def complete(self, workload: SimWorkload) -> None:
        self.account()
        member = self.ledger.free(uid=workload.uid)
        self.backend.release(uid=workload.uid)
        self.completed += 1
        self.epoch += 1
        if member is not None:
            self.freed_at[member] = self.epoch

    def still_full(self, shape: int, latest: int) -> bool:
        """Whether ``shape`` is known to fit nowhere now: it did not at its last try and no
        member freed GPUs since (``latest``: the epoch of the last completion that freed
        any; the memo around ``place_ask``)."""
        since = self.failed.get(shape)
        return since is not None and since >= latest

    @property
    def latest_free(self) -> int:
        return max(self.freed_at.values(), default=0)

    def members(self) -> Sequence[MemberSnapshot]:
        """The live members ``place_ask`` is shown for the workload being asked about:
        when its shape fit nowhere at its last try, only the members that freed GPUs since
        (and a pinned one, so a pin stays a pin): the others are at most as free as then,
        so they cannot change the answer (the memo around ``place_ask``)."""
        live = self.backend.members("live")
        item, setting = self.asking, self.pass_setting
        since = self.failed.get(item.shape) if item is not None else None
        if item is None or since is None or setting is None:
            return live
        pin = item.ask.request(setting)[0].pin
        freed = self.freed_at
        return [m for m in live if freed.get(m.name, 0) > since or m.name == pin]

    def setting(self) -> Setting:
        """What ``place_ask`` reads in this pass: the live members (``members``), the bare
        fleet, the queue; the choice only (no reason for the members it rejects)."""
        if self.bare is None:
            self.bare = _Bare(self.backend.members("empty"))
        self.pass_setting = Setting(
            members=self.members, bare=self.bare, queue=self.queue,
            default_policy=self.policy, now=self.now, choice_only=True,
            claim_after_s=self.claim_after_s)
        return self.pass_setting

    def dispatch_pass(self, events: _Events, next_seq: Callable[[], int]) -> None:
        """Passes over the queue until its claims and gates settle: the controller starts
        a round when a workload reaches its backfill limit or claims a member."""
        self.one_pass(events, next_seq)
        while self.again:
            self.again = False
            self.one_pass(events, next_seq)

    def claim(self, item: _Waiting, placement: Placement) -> None:
        """Apply ``placement``'s claim as the controller does (``PendingQueue.claim``)."""
        member, entry, queue = placement.claim, item.entry, self.queue
        assert member is not None
        holder = queue.claims().get(member)
        if queue.take_claim(entry, member, wide=placement.claim_wide):
            self.again = True  # what its namespace's gate held may go elsewhere now
            if holder is not None and holder.uid != entry.uid:  # a narrow claim gave way:
                self.epoch += 1  # what it barred may fit there now
                self.freed_at[member] = self.epoch
        if not queue.claims_widely(entry.uid):  # its backfill limit: holds its namespace
            self.gated.add(entry.uid)

    def one_pass(self, events: _Events, next_seq: Callable[[], int]) -> None:
        """Walk the queue in order, applying each ``place_ask`` answer.

        Capacity only shrinks during a pass, so a shape that did not fit is not asked again
        in it, and the pass ends once every waiting shape failed (exact, not a look-ahead
        bound: the controller tries every waiting workload each round too). A full fleet
        does not end it: a workload no member could ever run is parked then too, as the
        controller parks it on arrival. A failure where a claim kept the workload off a
        member is not remembered for its shape: the same shape of another namespace, or
        ahead of the claimant, may fit there."""
        failed: set[int] = set()
        setting, latest = self.setting(), self.latest_free
        for entry in self.queue.in_order():
            if len(failed) >= len(self.shape_count):
                return
            item = self.waiting[entry.uid]
            if item.shape in failed or self.still_full(item.shape, latest):
                failed.add(item.shape)
                continue
            self.asking = item
            placement = place_ask(item.ask, setting)
            self.placement_calls += placement.blocker is None  # past the gate
            if placement.queue is QueueStep.PLACED:
                self.start(item, placement, events, next_seq())
            elif placement.queue is QueueStep.PARK:
                self.park(item, placement)
            elif placement.reason is PendingReason.QUEUED:
                assert placement.blocker is not None
                self.gated.add(placement.blocker.uid)
            else:
                if placement.claim is not None:
                    self.claim(item, placement)
                if not self.queue.claims_against(item.entry):
                    failed.add(item.shape)
                    self.failed[item.shape] = self.epoch


def simulate(*, fleet: FleetSpec, workloads: Sequence[SimWorkload], backend: Backend,
             policy: str, duration: float | None, queue: QueueSpec | None = None,
             sample_interval: float | None = None, progress: Progress | None = None,
             check_every: int = 0) -> RunResult:
    """Replay ``workloads`` on ``fleet`` under ``policy`` for ``duration`` virtual seconds.

    ``duration`` None runs until nothing more can happen (the last arrival or completion;
    services then count as running to that point), for replays whose length is not known;
    it needs ``sample_interval``. ``backend`` must be fresh (an empty fleet).
    ``check_every`` > 0 re-verifies the whole ledger every that many events (tests); every
    placement is checked as it is booked anyway.
    """
    if duration is None and not sample_interval:
        raise ValueError("simulate(duration=None) needs a sample_interval")
    horizon = math.inf if duration is None else duration
    ledger = Ledger(fleet)
    spec = queue or QueueSpec()
    run = _Run(backend=backend, ledger=ledger, policy=policy, duration=horizon,
               queue=PendingQueue(backfill_limit=spec.backfill_limit),
               gpu_seconds=dict.fromkeys(ledger.members, 0.0),
               claim_after_s=spec.claim_after_s)
    loop = _Loop(run, check_every=check_every, progress=progress)
    for workload in workloads:
        if workload.arrival <= horizon:
            loop.push(workload.arrival, _ARRIVE, workload)
    loop.drain(interval=sample_interval or horizon / 200)
    end = horizon if duration is not None else run.now
    loop.sample_until(end, inclusive=True)
    run.now = end
    run.account()
    ledger.check()
    if progress is not None:
        progress(end)
    return RunResult(
        policy=policy, duration=end,
        submitted=sum(1 for w in workloads if w.arrival <= horizon),
        decisions=tuple(run.decisions), completed=run.completed,
        pending_at_end=run.queue.waiting, unplaceable=tuple(run.unplaceable),
        gpu_seconds=run.gpu_seconds, member_gpus=dict(ledger.member_total),
        samples=tuple(loop.samples), gated=len(run.gated),
        placement_calls=run.placement_calls, events=loop.processed)


class _Loop:
    """The event heap of one run, drained instant by instant, and the samples taken."""

    def __init__(self, run: _Run, *, check_every: int, progress: Progress | None) -> None:
        self.run = run
        self.events: _Events = []
        self.counter = iter(range(1 << 62))
        self.check_every = check_every
        self.progress = progress
        self.samples: list[Sample] = []
        self.next_sample = 0.0
        self.interval = 0.0
        self.processed = 0

    def next_seq(self) -> int:
        return next(self.counter)

    def push(self, at: float, kind: int, payload: object) -> None:
        heapq.heappush(self.events, (at, kind, self.next_seq(), payload))

    def sample_until(self, t: float, *, inclusive: bool = False) -> None:
        """Samples up to ``t`` (strictly before unless ``inclusive``): they see the state
        the previous instant left."""
        while self.next_sample < t or (inclusive and self.next_sample == t):
            self.samples.append(_sample(self.run, self.next_sample))
            self.next_sample += self.interval

    def drain(self, *, interval: float) -> None:
        """Every instant in order: completions, then arrivals, then one dispatch pass."""
        run, events = self.run, self.events
        self.interval = interval
        report_every = max(1, len(events) // 50)
        while events:
            now = events[0][0]
            self.sample_until(now)
            run.now = now
            while events and events[0][0] == now:
                _, kind, _, payload = heapq.heappop(events)
                self.processed += 1
                if kind == _COMPLETE:
                    run.complete(payload)  # type: ignore[arg-type]
                else:
                    run.arrive(payload)  # type: ignore[arg-type]
                if self.check_every and self.processed % self.check_every == 0:
                    run.ledger.check()
                if self.progress is not None and self.processed % report_every == 0:
                    self.progress(now)
            run.dispatch_pass(events, self.next_seq)


def _sample(run: _Run, t: float) -> Sample:
    ledger = run.ledger
    wanted = {item.shape: item.ask for item in run.waiting.values()}
    usable: set[str] = set()
    latest = run.latest_free
    for shape, ask in wanted.items():
        if run.still_full(shape, latest):
            continue  # known to fit nowhere since the last completion
        usable |= run.backend.fitting(request_of(ask, default_policy="most-free",
                                                 choice_only=True))
    shapes = [pod for ask in wanted.values() for gang in ask.demand.gangs
              for pod in gang.pod_shapes]
    stranded, free = ledger.fragmentation(shapes, members=usable)
    return Sample(
        t=t,
        utilization={m: (ledger.member_used[m] / total if total else 0.0)
                     for m, total in ledger.member_total.items()},
        stranded=stranded if run.waiting else None, free=free, pending=len(run.waiting))
