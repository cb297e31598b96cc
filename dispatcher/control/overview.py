"""What the controller knows right now, as plain read-only rows: the fleet view's data.

``overview(controller)`` reads only in-memory state, synchronously (no request, so a page
view costs the hub and the members nothing): the fleet snapshots placement decides over
(free GPUs net of reservations, per product, and the free-GPU blocks of single nodes), the
pending queue in the order it is tried (then the parked workloads) with each workload's
reason from its Dispatch, and the recent decisions with every member's verdict
(``control.recent``). Nothing here is a credential: member names, labels, capacity,
health reasons (free of credentials by ``fleet.health``), workload names and messages.
The rows are rendered by ``shell.fleetpage``; tenants wrote some of these strings, so
whoever renders them must escape them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dispatcher.control.core import record as records
from dispatcher.control.core.names import PendingReason
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.placement.model import Decision

if TYPE_CHECKING:
    from dispatcher.control.controller import Controller

__all__ = ["Block", "DecisionRow", "MemberRow", "Overview", "ProductRow", "QueueRow",
           "VerdictRow", "member_row", "overview"]


@dataclass(frozen=True, kw_only=True)
class Block:
    """``nodes`` schedulable nodes with exactly ``gpus`` free GPUs each (``taints``: the
    hard taints a pod must tolerate there, ``key=value:Effect``)."""

    gpus: int
    nodes: int
    taints: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ProductRow:
    product: str  # "" for nodes without the product label
    nodes: int
    allocatable: int
    free: int
    blocks: tuple[Block, ...]  # largest first


@dataclass(frozen=True, kw_only=True)
class MemberRow:
    name: str
    ready: bool
    reason: str  # why not ready ("" when ready)
    reachable: bool
    cordoned: bool
    labels: Mapping[str, str]
    nodes: int
    allocatable: int
    reserved: int
    free: int
    products: tuple[ProductRow, ...]


@dataclass(frozen=True, kw_only=True)
class QueueRow:
    position: int | None  # 1 = tried first; None: parked (waits outside the queue)
    namespace: str
    name: str
    kind: str
    reason: str
    message: str
    gpus: int | None
    priority: int
    since: float | None  # when it began waiting (Unix seconds)


@dataclass(frozen=True, kw_only=True)
class VerdictRow:
    member: str
    verdict: str  # chosen, fits, no, or "-" (not evaluated)
    free: int
    fits: int | None
    reason: str


@dataclass(frozen=True, kw_only=True)
class DecisionRow:
    at: float
    namespace: str
    name: str
    kind: str
    chosen: str | None
    policy: str
    pods: int
    gpus: int
    summary: str
    verdicts: tuple[VerdictRow, ...]


@dataclass(frozen=True, kw_only=True)
class Overview:
    at: float
    hub_id: str
    ready: bool
    members: tuple[MemberRow, ...]
    queue: tuple[QueueRow, ...]
    decisions: tuple[DecisionRow, ...]
    waiting: int | None = None  # all that wait in the queue and all parked (None: the
    parked: int | None = None  # rows'); ``queue`` holds at most ``limit`` rows of them


def _taint(taint: tuple[str, str, str]) -> str:
    key, value, effect = taint
    return f"{key}={value}:{effect}" if value else f"{key}:{effect}"


def member_row(snap: MemberSnapshot, *, reachable: bool) -> MemberRow:
    """One member from its placement snapshot: totals, then per product its free GPUs and
    the free blocks of single nodes (what a pod of N GPUs can land on)."""
    capacity = snap.capacity
    summary = capacity.summary()
    blocks: dict[str | None, dict[tuple[int, tuple[str, ...]], int]] = defaultdict(dict)
    for cls in capacity.classes():
        taints = tuple(_taint(t) for t in cls.hard_taints)
        into = blocks[cls.product]
        for gpus, nodes in cls.histogram().items():
            into[(gpus, taints)] = into.get((gpus, taints), 0) + nodes
    products = tuple(
        ProductRow(product=p.product or "", nodes=p.nodes, allocatable=p.allocatable,
                   free=p.free,
                   blocks=tuple(Block(gpus=g, nodes=n, taints=t) for (g, t), n in sorted(
                       blocks.get(p.product, {}).items(), key=lambda i: (-i[0][0], i[0][1]))))
        for p in summary.products)
    return MemberRow(name=snap.name, ready=snap.ready, reason=snap.not_ready_reason,
                     reachable=reachable, cordoned=snap.cordoned, labels=dict(snap.labels),
                     nodes=summary.nodes, allocatable=summary.allocatable,
                     reserved=summary.reserved, free=summary.free, products=products)


def _waiting_since(raw: Mapping[str, Any] | None) -> float | None:
    for condition in ((raw or {}).get("status") or {}).get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Placed" \
                and condition.get("status") == "False":
            return records.parse_time(condition.get("lastTransitionTime"))
    return None


def _gpus(raw: Mapping[str, Any] | None) -> int | None:
    value = (((raw or {}).get("status") or {}).get("demand") or {}).get("gpus")
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _decision_row(at: float, workload: Mapping[str, str], decision: Decision) -> DecisionRow:
    return DecisionRow(
        at=at, namespace=workload.get("namespace", ""), name=workload.get("name", ""),
        kind=workload.get("kind", ""), chosen=decision.chosen, policy=decision.policy,
        pods=decision.pods, gpus=decision.gpus, summary=decision.summary,
        verdicts=tuple(VerdictRow(
            member=v.member,
            verdict=("chosen" if v.member == decision.chosen else "-" if v.feasible is None
                     else "fits" if v.feasible else "no"),
            free=v.free, fits=v.fits, reason=v.reason) for v in decision.verdicts))


QUEUE_ROWS = 200
"""Rows of the queue an overview holds (the counts are of all): a tenant's 10,000 waiting
Jobs must not make every look at the page build and render 10,000 rows (issue 35)."""


def overview(controller: Controller, *, now: float, limit: int = QUEUE_ROWS) -> Overview:
    """The controller's state now (see the module docstring); the first ``limit`` rows of
    the queue (waiting first, then parked)."""
    fleet, queue, cache = controller.fleet, controller.queue, controller.cache
    reconciler = controller.reconciler
    members = tuple(member_row(s, reachable=fleet.health(s.name).reachable)
                    for s in sorted(fleet.snapshots(), key=lambda s: s.name))
    rows = []
    ordered, parked_entries = queue.ordered(), list(queue.parked())
    waiting = [(i, e, "") for i, e in enumerate(ordered[:limit], start=1)]
    parked = [(None, e, why) for e, why in parked_entries[:max(limit - len(waiting), 0)]]
    for position, entry, why in waiting + parked:
        raw = cache.record(entry.uid)
        record = records.read(raw) if raw is not None else None
        fields = reconciler.workload_fields(entry.uid)
        reason = (record.pending_reason if record is not None and record.pending_reason
                  else PendingReason.NO_FEASIBLE_MEMBER.value if position else "")
        message = (record.pending_message if record is not None and record.pending_message
                   else why)
        rows.append(QueueRow(position=position, namespace=entry.namespace,
                             name=fields["name"] or entry.name, kind=fields["kind"],
                             reason=reason, message=message, gpus=_gpus(raw),
                             priority=entry.priority, since=_waiting_since(raw)))
    decisions = tuple(_decision_row(d.at, d.workload, d.decision)
                      for d in reconciler.recent.newest_first())
    return Overview(at=now, hub_id=controller.settings.hub_id, ready=controller.ready(),
                    members=members, queue=tuple(rows), decisions=decisions,
                    waiting=len(ordered), parked=len(parked_entries))
