"""The gauges read at scrape time from the running controller, and placement's metric edge.

State the controller already holds (the pending queue, the fleet's snapshots, the
workers) is turned into gauges when Prometheus scrapes, never copied into gauges as it
changes: a copy drifts (a deleted workload, a removed member's series left behind
forever), a read cannot. One scrape costs O(members x GPU products + pending workloads),
read synchronously on the event loop, so it sees one consistent state.

``placed`` maps a ``Placement`` to the bounded labels of
``dispatcher_placement_attempts_total`` and keeps, per waiting workload, the reason it
waits with and since when (``Metrics.waiting_since``): the queue itself keeps a parked
workload's message, not its ``PendingReason``, and no wait time at all.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.placing import Placement, QueueStep
from dispatcher.control.core.queue import PendingQueue
from dispatcher.control.fleetview import FleetView
from dispatcher.control.observe import ADOPTED, PLACED, Metrics

__all__ = ["ControllerProbe", "placed", "result_of"]

_LABEL_MAX = 63  # a Kubernetes label value's limit; a GPU product comes from a node label


def result_of(placement: Placement) -> tuple[str, str | None]:
    """(the attempt's result label, the PendingReason it now waits with or None)."""
    if placement.queue is QueueStep.PLACED:
        return PLACED, None
    if placement.queue is QueueStep.LEAVE:
        return ADOPTED, None
    reason = str(placement.reason or PendingReason.NO_FEASIBLE_MEMBER)
    return reason, reason


def placed(metrics: Metrics, placement: Placement, seconds: float,
           queue: PendingQueue) -> None:
    """The edge call of ``Reconciler._apply``: one attempt, ``seconds`` its decision."""
    result, waiting = result_of(placement)
    metrics.placement(uid=placement.entry.uid, result=result, waiting=waiting,
                      seconds=seconds, queue=queue)


class ControllerProbe(Collector):
    """The controller's state as gauges, read at every scrape (see the module docstring)."""

    def __init__(self, *, metrics: Metrics, queue: PendingQueue, fleet: FleetView,
                 running: Callable[[], int], workers: int,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        """``running()``: workloads with a worker task (busy or waiting for a slot, the
        ``Workers`` length); ``workers``: the configured concurrency."""
        self._metrics = metrics
        self._queue = queue
        self._fleet = fleet
        self._running = running
        self._workers = workers
        self._monotonic = monotonic

    def describe(self) -> list[GaugeMetricFamily]:
        return []  # collected at scrape only: registering must not read the fleet

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield from self._fleet_gauges()
        yield from self._queue_gauges()
        busy = self._metrics.busy
        yield GaugeMetricFamily("dispatcher_workers_max", "Workers configured (workers).",
                                value=self._workers)
        yield GaugeMetricFamily(
            "dispatcher_workers_waiting",
            "Workloads kicked and waiting for a free worker (the work queue's depth).",
            value=max(self._running() - busy, 0))

    def _fleet_gauges(self) -> Iterator[GaugeMetricFamily]:
        ready = GaugeMetricFamily("dispatcher_member_ready",
                                  "1 while the member is Ready (connected and healthy; a "
                                  "cordoned member can be Ready), else 0.", labels=["member"])
        reachable = GaugeMetricFamily("dispatcher_member_reachable",
                                      "0 once the member has not answered for "
                                      "fleet.unreachableAfter, else 1.", labels=["member"])
        allocatable = GaugeMetricFamily("dispatcher_member_allocatable_gpus",
                                        "Allocatable GPUs per member and GPU product.",
                                        labels=["member", "product"])
        free = GaugeMetricFamily("dispatcher_member_free_gpus",
                                 "Free GPUs (Ready, schedulable nodes, net of reservations) "
                                 "per member and GPU product.", labels=["member", "product"])
        quota_labels = ["member", "cluster_queue", "flavor"]
        nominal = GaugeMetricFamily("dispatcher_member_quota_nominal_gpus",
                                    "A Kueue member's GPU nominal quota per ClusterQueue and "
                                    "flavor.", labels=quota_labels)
        room = GaugeMetricFamily("dispatcher_member_quota_free_gpus",
                                 "GPUs a Kueue member's ClusterQueue can still reserve per "
                                 "flavor (cohort borrowing included): the quota bound "
                                 "placement uses.", labels=quota_labels)
        for snap in self._fleet.snapshots():
            for queue, flavor, quota, free_now in (snap.quota.rooms() if snap.quota else ()):
                labels = [snap.name, queue[:_LABEL_MAX], flavor[:_LABEL_MAX]]
                nominal.add_metric(labels, float(quota))
                room.add_metric(labels, float(free_now))
            ready.add_metric([snap.name], 1.0 if snap.ready else 0.0)
            reachable.add_metric([snap.name],
                                 1.0 if self._fleet.health(snap.name).reachable else 0.0)
            for product in snap.capacity.summary().products:
                labels = [snap.name, (product.product or "")[:_LABEL_MAX]]
                allocatable.add_metric(labels, float(product.allocatable))
                free.add_metric(labels, float(product.free))
        yield from (ready, reachable, allocatable, free, nominal, room)

    def _queue_gauges(self) -> Iterator[GaugeMetricFamily]:
        metrics, queue = self._metrics, self._queue
        metrics.prune(queue)
        depth = GaugeMetricFamily("dispatcher_queue_depth",
                                  "Pending workloads by the PendingReason they wait with.",
                                  labels=["reason"])
        oldest = GaugeMetricFamily("dispatcher_queue_oldest_wait_seconds",
                                   "How long the longest-waiting workload of each "
                                   "PendingReason has waited.", labels=["reason"])
        counts: dict[str, int] = {}
        since: dict[str, float] = {}
        for reason, first in metrics.waiting_since.values():
            counts[reason] = counts.get(reason, 0) + 1
            since[reason] = min(since.get(reason, first), first)
        now = self._monotonic()
        for reason in PendingReason:  # every reason, so an alert's series always exists
            depth.add_metric([reason.value], float(counts.get(reason.value, 0)))
            oldest.add_metric([reason.value], max(now - since[reason.value], 0.0)
                              if reason.value in since else 0.0)
        yield from (depth, oldest)
