"""What one policy run produced: the figures of the report, as plain frozen data.

``RunResult.summary()`` is the JSON shape ``dispatcher simulate -o json`` prints per policy
(and ``--report DIR`` writes); the engine fills these, the command and the charts read them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunResult", "Sample", "SimDispatch", "SimWorkload", "Unplaceable", "percentile"]

from dispatcher.workloads.demand import Demand


@dataclass(frozen=True, kw_only=True)
class SimWorkload:
    """One workload of the stream, resolved: when it arrives, how long it runs, what it needs.

    ``annotations`` are its ``dispatcher.io/*`` annotations, sorted (hashable: the loop
    keys its memo of failed shapes on them); placing reads its rules from them as it does
    a hub object's (``control.core.placing.request_of``)."""

    uid: str
    namespace: str
    name: str
    kind: str
    api_version: str
    template: str
    arrival: float
    run_time: float | None
    priority: int
    demand: Demand
    annotations: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, kw_only=True)
class SimDispatch:
    """A dispatch: which member, which nodes, when, after how long in the queue."""

    uid: str
    name: str
    member: str
    start: float
    wait: float
    nodes: tuple[tuple[str, int], ...]
    template: str = ""
    kind: str = ""
    gpus: int = 0
    namespace: str = ""


@dataclass(frozen=True, kw_only=True)
class Unplaceable:
    """A workload no member of the bare fleet can ever run, with the placement's reasons."""

    uid: str
    name: str
    kind: str
    template: str
    gpus: int
    reason: str
    reasons: Mapping[str, str] = field(default_factory=dict)
    parked: str = ""  # the controller's reason (``PendingReason``): Unplaceable, InvalidAnnotation


@dataclass(frozen=True, kw_only=True)
class Sample:
    """The fleet at one instant: per-member GPU utilization, stranded and free GPUs."""

    t: float
    utilization: Mapping[str, float]
    stranded: int | None
    free: int
    pending: int


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) by linear interpolation of sorted values; None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """Everything measured while replaying one stream under one policy."""

    policy: str
    duration: float
    submitted: int
    decisions: tuple[SimDispatch, ...]
    completed: int
    pending_at_end: int
    unplaceable: tuple[Unplaceable, ...]
    gpu_seconds: Mapping[str, float]
    member_gpus: Mapping[str, int]
    samples: tuple[Sample, ...]
    gated: int
    """Workloads that held their namespace's backfill gate at some point."""
    placement_calls: int
    events: int
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def waits(self) -> list[float]:
        """Queue wait of every dispatched workload, in seconds."""
        return [d.wait for d in self.decisions]

    @property
    def utilization(self) -> float:
        """GPU-seconds used over GPU-seconds available, the whole fleet over the whole run."""
        total = sum(self.member_gpus.values()) * self.duration
        return sum(self.gpu_seconds.values()) / total if total else 0.0

    def member_utilization(self) -> dict[str, float]:
        """The same ratio per member."""
        return {m: (self.gpu_seconds[m] / (gpus * self.duration) if gpus else 0.0)
                for m, gpus in self.member_gpus.items()}

    def fragmentation(self) -> tuple[float | None, float | None]:
        """Mean stranded GPUs and mean stranded share of free GPUs, over samples where some
        workload was waiting (with an empty queue nothing is stranded by definition)."""
        waiting = [s for s in self.samples if s.stranded is not None]
        if not waiting:
            return None, None
        mean = sum(s.stranded or 0 for s in waiting) / len(waiting)
        shares = [(s.stranded or 0) / s.free for s in waiting if s.free]
        return mean, (sum(shares) / len(shares) if shares else 0.0)

    def summary(self) -> dict[str, Any]:
        """The JSON figures for this policy (seconds for times, 0..1 for ratios)."""
        waits = self.waits
        stranded, share = self.fragmentation()
        per_member = {m: {"gpus": self.member_gpus[m], "utilization": round(u, 4),
                          "dispatched": sum(1 for d in self.decisions if d.member == m)}
                      for m, u in self.member_utilization().items()}
        unplaceable: dict[str, dict[str, Any]] = {}
        for item in self.unplaceable:
            entry = unplaceable.setdefault(item.template, {
                "template": item.template, "kind": item.kind, "gpus": item.gpus,
                "count": 0, "reason": item.reason, "reasons": dict(item.reasons)})
            entry["count"] += 1

        def rounded(value: float | None) -> float | None:
            return None if value is None else round(value, 3)

        by_template: dict[str, list[SimDispatch]] = {}
        for decision in self.decisions:
            by_template.setdefault(decision.template, []).append(decision)
        templates = [{"template": name, "kind": group[0].kind, "gpus": group[0].gpus,
                      "dispatched": len(group),
                      "waitP50": rounded(percentile([d.wait for d in group], 50)),
                      "waitP95": rounded(percentile([d.wait for d in group], 95))}
                     for name, group in sorted(by_template.items())]
        by_namespace: dict[str, list[float]] = {}
        for decision in self.decisions:
            by_namespace.setdefault(decision.namespace, []).append(decision.wait)
        namespaces = [{"namespace": name, "dispatched": len(group),
                       "waitP50": rounded(percentile(group, 50)),
                       "waitP99": rounded(percentile(group, 99)),
                       "waitMax": rounded(max(group))}
                      for name, group in sorted(by_namespace.items())]

        return {
            "policy": self.policy,
            "submitted": self.submitted,
            "dispatched": len(self.decisions),
            "completed": self.completed,
            "pendingAtEnd": self.pending_at_end,
            "neverPlaceable": len(self.unplaceable),
            "waitSeconds": {"p50": rounded(percentile(waits, 50)),
                            "p95": rounded(percentile(waits, 95)),
                            "p99": rounded(percentile(waits, 99)),
                            "mean": rounded(sum(waits) / len(waits)) if waits else None,
                            "max": rounded(max(waits)) if waits else None},
            "gpuUtilization": round(self.utilization, 4),
            "members": per_member,
            "fragmentation": {"strandedGpusMean": rounded(stranded),
                              "strandedShareOfFree": rounded(share)},
            "workloads": templates,
            "namespaces": namespaces,
            "gated": self.gated,
            "unplaceable": list(unplaceable.values()),
            "placementCalls": self.placement_calls,
            "events": self.events,
            **self.extra,
        }
