"""The discrete-event loop: arrivals, dispatch decisions, completions, in virtual time.

No sleeping and no wall clock: a heap of timed events is drained in (time, kind, sequence)
order, so a seed fully determines a run. At each instant, completions free capacity first,
then arrivals join the queue, then one dispatch pass runs; the fleet is sampled at fixed
intervals in between (utilization per member, stranded GPUs):

* The queue is the controller's own ``control.queue.PendingQueue``, so a queue policy change
  shows here with no second implementation: priority first, then namespaces take turns,
  then age. A pass walks it in order, placing each workload that fits now on the member the
  policy picks (the real placement over the real capacity model), skipping the ones the
  queue's gate holds: once a waiting workload has been passed over ``backfillLimit`` times
  by later workloads *of its namespace*, nothing behind it in its namespace is placed until
  it starts (so a large gang is not starved by its own team's small ones, and no team's
  waiting workload holds another team back).
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

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from dispatcher.control.queue import Entry, PendingQueue
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


@dataclass
class _Run:
    """The mutable state of one policy run."""

    backend: Backend
    ledger: Ledger
    policy: str
    queue_spec: QueueSpec
    duration: float
    now: float = 0.0
    queue: PendingQueue = field(default_factory=lambda: PendingQueue(backfill_limit=50))
    waiting: dict[str, tuple[Entry, SimWorkload, int]] = field(default_factory=dict)
    # (demand, rules) -> a small int, so the hot loop never hashes a Demand; and how many
    # waiting workloads have each.
    shapes: dict[tuple[Demand, Rules], int] = field(default_factory=dict)
    shape_count: dict[int, int] = field(default_factory=dict)
    gated: set[str] = field(default_factory=set)  # uids that held their namespace's gate
    # shape -> epoch of its last "fits nowhere"; capacity only shrinks between completions,
    # so only members freed since then need asking again.
    failed: dict[int, int] = field(default_factory=dict)
    epoch: int = 0
    freed_at: dict[str, int] = field(default_factory=dict)
    empty_verdicts: dict[tuple[Demand, Rules], NoFit | None] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    unplaceable: list[Unplaceable] = field(default_factory=list)
    gpu_seconds: dict[str, float] = field(default_factory=dict)
    last_change: float = 0.0
    completed: int = 0
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

    def arrive(self, workload: SimWorkload) -> None:
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
        entry = Entry(uid=workload.uid, priority=workload.priority, created=workload.arrival,
                      name=f"{workload.namespace}/{workload.name}",
                      namespace=workload.namespace)
        shape = self.shapes.setdefault((workload.demand, workload.rules), len(self.shapes))
        self.shape_count[shape] = self.shape_count.get(shape, 0) + 1
        self.queue.add(entry)
        self.waiting[workload.uid] = (entry, workload, shape)

    def start(self, workload: SimWorkload, choice: Choice,
              events: list[tuple[float, int, int, object]], seq: int) -> None:
        self.account()
        self.ledger.hold(uid=workload.uid, member=choice.member, pods=choice.pods)
        self.backend.bind(uid=workload.uid, choice=choice, durable=workload.run_time is None)
        self.decisions.append(Decision(
            uid=workload.uid, name=workload.name, member=choice.member, start=self.now,
            wait=self.now - workload.arrival, nodes=choice.pods, template=workload.template,
            kind=workload.kind, gpus=workload.demand.gpus, namespace=workload.namespace))
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

    def try_place(self, workload: SimWorkload, shape: int) -> Choice | None:
        """Place ``workload`` now if it fits, asking only members that could have changed."""
        since = self.failed.get(shape)
        ask: frozenset[str] = frozenset()
        if since is not None:
            changed = {m for m, at in self.freed_at.items() if at > since}
            if not changed:
                return None
            ask = frozenset(self.ledger.members) - changed
        verdict = self.place(workload, view="live", exclude=ask)
        if isinstance(verdict, Choice):
            return verdict
        self.failed[shape] = self.epoch
        return None

    def dispatch_pass(self, events: list[tuple[float, int, int, object]],
                      next_seq: Callable[[], int]) -> None:
        """Walk the queue in order, placing what fits and the gate lets through.

        Capacity only shrinks during a pass, so a shape that did not fit is not asked again
        in it, and the pass ends once every waiting shape failed (exact, not a look-ahead
        bound: the controller tries every waiting workload each round too)."""
        free = sum(self.ledger.member_total.values()) - sum(self.ledger.member_used.values())
        failed: set[int] = set()
        for entry in self.queue.in_order():
            if free <= 0 or len(failed) >= len(self.shape_count):
                return
            _, workload, shape = self.waiting[entry.uid]
            if shape in failed:
                continue
            blocker = self.queue.gate(entry)
            if blocker is not None:
                self.gated.add(blocker.uid)
                continue
            choice = self.try_place(workload, shape)
            if choice is None:
                failed.add(shape)
                continue
            self.queue.placed(entry)
            del self.waiting[entry.uid]
            left = self.shape_count[shape] - 1
            if left:
                self.shape_count[shape] = left
            else:
                del self.shape_count[shape]
            self.start(workload, choice, events, next_seq())
            free -= workload.demand.gpus


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
    run = _Run(backend=backend, ledger=ledger, policy=policy, queue_spec=spec,
               queue=PendingQueue(backfill_limit=spec.backfill_limit),
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
            _, kind, _, payload = heapq.heappop(events)
            processed += 1
            if kind == _COMPLETE:
                run.complete(payload)  # type: ignore[arg-type]
            else:
                run.arrive(payload)  # type: ignore[arg-type]
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
        pending_at_end=run.queue.waiting, unplaceable=tuple(run.unplaceable),
        gpu_seconds=run.gpu_seconds, member_gpus=dict(ledger.member_total),
        samples=tuple(samples), gated=len(run.gated),
        placement_calls=run.placement_calls, events=processed)


def _sample(run: _Run, t: float) -> Sample:
    ledger = run.ledger
    wanted = {shape: (workload.demand, workload.rules)
              for _, workload, shape in run.waiting.values()}
    usable: set[str] = set()
    for shape, (demand, rules) in wanted.items():
        since = run.failed.get(shape)
        if since is not None and not any(at > since for at in run.freed_at.values()):
            continue  # known to fit nowhere since the last completion
        usable |= run.backend.fitting(demand, rules=rules)
    shapes = [pod for demand, _ in wanted.values() for gang in demand.gangs
              for pod in gang.pod_shapes]
    stranded, free = ledger.fragmentation(shapes, members=usable)
    return Sample(
        t=t,
        utilization={m: (ledger.member_used[m] / total if total else 0.0)
                     for m, total in ledger.member_total.items()},
        stranded=stranded if run.waiting else None, free=free, pending=len(run.waiting))
