"""The discrete-event loop: arrivals, dispatch decisions, completions, in virtual time.

No sleeping and no wall clock: a heap of timed events is drained in (time, kind, sequence)
order, so a seed fully determines a run. At each instant, completions free capacity first,
then arrivals join the queue, then one dispatch pass runs; the fleet is sampled at fixed
intervals in between (utilization per member, stranded GPUs):

* The queue is ordered by priority (higher first), then age. A pass walks it in order,
  placing each workload that fits now on the member the policy picks (the real placement
  over the real capacity model), and stops once more than ``backfill`` workloads that do not
  fit have been passed: bounded work per event, and bounded overtaking.
* A workload that cannot fit stays queued. Each time one behind it is placed instead, it is
  "passed over"; after ``starvation_limit`` times, a member is reserved for it: one where it
  fits once every batch job has finished (services never do). Nothing else is placed there
  until it starts, so a large gang is not starved forever by a stream of small ones.
* A workload no member of the bare fleet could ever run is not queued: it is reported as
  never placeable, with the placement's reason per member.
* Re-evaluation is event-driven: capacity only shrinks between completions, so a "fits
  nowhere" answer for a demand stays true until a workload finishes, and then only the
  members that freed GPUs since are asked again (the others are still too full, and the
  policy can only choose among feasible members).

Every placement is booked in an independent ``Ledger``, which raises if a node is ever given
more GPUs than it has.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.sim.backend import Backend, Choice, NoFit, Rules, View
from dispatcher.sim.ledger import Ledger
from dispatcher.sim.results import Decision, RunResult, Sample, SimWorkload, Unplaceable
from dispatcher.sim.scenario import QueueSpec
from dispatcher.workloads.demand import Demand

__all__ = ["Progress", "simulate"]

Progress = Callable[[float], None]
"""Called now and then with the virtual time reached (seconds)."""

_COMPLETE, _ARRIVE = 0, 1


@dataclass(slots=True)
class _Queued:
    key: tuple[int, float, int]
    workload: SimWorkload
    passed_over: int = 0
    reserved: str | None = None
    no_reservation: bool = False


@dataclass
class _Run:
    """The mutable state of one policy run."""

    backend: Backend
    ledger: Ledger
    policy: str
    queue_spec: QueueSpec
    duration: float
    now: float = 0.0
    queue: list[_Queued] = field(default_factory=list)
    reserved: dict[str, str] = field(default_factory=dict)  # member -> uid
    # (demand, excluded members) -> epoch of its last "fits nowhere"; capacity only shrinks
    # between completions, so only members freed since then need asking again.
    failed: dict[tuple[Demand, Rules, frozenset[str]], int] = field(default_factory=dict)
    epoch: int = 0
    freed_at: dict[str, int] = field(default_factory=dict)
    empty_verdicts: dict[tuple[Demand, Rules], NoFit | None] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    unplaceable: list[Unplaceable] = field(default_factory=list)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    last_change: float = 0.0
    completed: int = 0
    reservations: int = 0
    placement_calls: int = 0

    def account(self) -> None:
        """Integrate GPU-seconds per member up to ``now``."""
        span = self.now - self.last_change
        if span > 0:
            for member, used in self.ledger.member_used.items():
                self.gpu_seconds[member] += used * span
        self.last_change = self.now

    def place(self, workload: SimWorkload, *, view: View,
              exclude: frozenset[str]) -> Choice | NoFit:
        self.placement_calls += 1
        return self.backend.place(workload.demand, policy=self.policy, view=view,
                                  exclude=exclude, rules=workload.rules)

    def arrive(self, workload: SimWorkload, seq: int) -> None:
        demand = workload.demand
        key = (demand, workload.rules)
        if key not in self.empty_verdicts:
            outcome = self.place(workload, view="empty", exclude=frozenset())
            self.empty_verdicts[key] = outcome if isinstance(outcome, NoFit) else None
        verdict = self.empty_verdicts[key]
        if verdict is not None:
            self.unplaceable.append(Unplaceable(
                uid=workload.uid, name=workload.name, kind=workload.kind,
                template=workload.template, gpus=demand.gpus,
                reason=verdict.summary() or "no member in the fleet",
                reasons=verdict.reasons))
            return
        entry = _Queued(key=(-workload.priority, workload.arrival, seq), workload=workload)
        bisect.insort(self.queue, entry, key=lambda q: q.key)

    def start(self, entry: _Queued, choice: Choice, events: list[tuple[float, int, int, object]],
              seq: int) -> None:
        workload = entry.workload
        self.account()
        self.ledger.hold(uid=workload.uid, member=choice.member, pods=choice.pods)
        self.backend.bind(uid=workload.uid, choice=choice, durable=workload.run_time is None)
        self.decisions.append(Decision(
            uid=workload.uid, name=workload.name, member=choice.member, start=self.now,
            wait=self.now - workload.arrival, nodes=choice.pods, template=workload.template,
            kind=workload.kind, gpus=workload.demand.gpus))
        if entry.reserved is not None:
            del self.reserved[entry.reserved]
        if workload.run_time is not None and self.now + workload.run_time <= self.duration:
            heapq.heappush(events, (self.now + workload.run_time, _COMPLETE, seq, workload))

    def complete(self, workload: SimWorkload) -> None:
        self.account()
        member = self.ledger.free(uid=workload.uid)
        self.backend.release(uid=workload.uid)
        self.completed += 1
        self.epoch += 1
        if member is not None:
            self.freed_at[member] = self.epoch

    def try_place(self, entry: _Queued) -> Choice | None:
        """Place ``entry`` now if it fits, asking only members that could have changed."""
        exclude = frozenset(m for m, uid in self.reserved.items()
                            if uid != entry.workload.uid)
        key = (entry.workload.demand, entry.workload.rules, exclude)
        since = self.failed.get(key)
        ask = exclude
        if since is not None:
            changed = {m for m, at in self.freed_at.items() if at > since} - exclude
            if not changed:
                return None
            ask = frozenset(self.ledger.members) - changed
        verdict = self.place(entry.workload, view="live", exclude=ask)
        if isinstance(verdict, Choice):
            return verdict
        self.failed[key] = self.epoch
        return None

    def reserve(self, entry: _Queued) -> None:
        """Reserve a member where ``entry`` fits once the batch jobs there have finished."""
        others = frozenset(self.reserved)
        verdict = self.place(entry.workload, view="durable", exclude=others)
        if isinstance(verdict, NoFit):
            entry.no_reservation = True
            return
        entry.reserved = verdict.member
        self.reserved[verdict.member] = entry.workload.uid
        self.reservations += 1

    def dispatch_pass(self, events: list[tuple[float, int, int, object]],
                      next_seq: Callable[[], int]) -> None:
        """Walk the queue in order, placing what fits, until ``backfill`` workloads that do
        not fit have been passed (the head is always tried)."""
        skipped: list[_Queued] = []
        index = 0
        while index < len(self.queue) and len(skipped) <= self.queue_spec.backfill:
            entry = self.queue[index]
            choice = self.try_place(entry)
            if choice is None:
                skipped.append(entry)
                index += 1
                continue
            del self.queue[index]
            self.start(entry, choice, events, next_seq())
            for waiting in skipped:
                waiting.passed_over += 1
                if (waiting.reserved is None and not waiting.no_reservation
                        and waiting.passed_over >= self.queue_spec.starvation_limit):
                    self.reserve(waiting)


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
    run = _Run(backend=backend, ledger=ledger, policy=policy, queue_spec=queue or QueueSpec(),
               duration=horizon, gpu_seconds=dict.fromkeys(ledger.members, 0.0))
    events: list[tuple[float, int, int, object]] = []
    counter = iter(range(1 << 62))

    def next_seq() -> int:
        return next(counter)

    for workload in workloads:
        if workload.arrival <= horizon:
            heapq.heappush(events, (workload.arrival, _ARRIVE, next_seq(), workload))
    interval = sample_interval or horizon / 200
    samples: list[Sample] = []
    next_sample = 0.0
    processed = 0
    report_every = max(1, len(events) // 50)
    while events:
        now = events[0][0]
        # Samples strictly before ``now`` see the state left by the previous instant.
        while next_sample < now:
            samples.append(_sample(run, next_sample))
            next_sample += interval
        run.now = now
        changed = False
        while events and events[0][0] == now:
            _, kind, seq, payload = heapq.heappop(events)
            processed += 1
            if kind == _COMPLETE:
                run.complete(payload)  # type: ignore[arg-type]
            else:
                run.arrive(payload, seq)  # type: ignore[arg-type]
            changed = True
            if check_every and processed % check_every == 0:
                ledger.check()
            if progress is not None and processed % report_every == 0:
                progress(now)
        if changed:
            run.dispatch_pass(events, next_seq)
    end = horizon if duration is not None else run.now
    while next_sample <= end:
        samples.append(_sample(run, next_sample))
        next_sample += interval
    run.now = end
    run.account()
    ledger.check()
    if progress is not None:
        progress(end)
    return RunResult(
        policy=policy, duration=end,
        submitted=sum(1 for w in workloads if w.arrival <= horizon),
        decisions=tuple(run.decisions), completed=run.completed,
        pending_at_end=len(run.queue), unplaceable=tuple(run.unplaceable),
        gpu_seconds=run.gpu_seconds, member_gpus=dict(ledger.member_total),
        samples=tuple(samples), reservations=run.reservations,
        placement_calls=run.placement_calls, events=processed)


def _sample(run: _Run, t: float) -> Sample:
    ledger = run.ledger
    wanted = {(entry.workload.demand, entry.workload.rules) for entry in run.queue}
    usable: set[str] = set()
    for demand, rules in wanted:
        since = run.failed.get((demand, rules, frozenset()))
        if since is not None and not any(at > since for at in run.freed_at.values()):
            continue  # known to fit nowhere since the last completion
        usable |= run.backend.fitting(demand, rules=rules)
    shapes = [shape for demand, _ in wanted for gang in demand.gangs
              for shape in gang.pod_shapes]
    stranded, free = ledger.fragmentation(shapes, members=usable)
    return Sample(
        t=t,
        utilization={m: (ledger.member_used[m] / total if total else 0.0)
                     for m, total in ledger.member_total.items()},
        stranded=stranded if run.queue else None, free=free, pending=len(run.queue))
