"""Observability: JSON log lines, Prometheus metrics, and the /metrics /healthz /readyz server.

Log lines are structlog JSON, one per event, with stable event names (``EVENTS``) and the
workload uid as ``uid``; values come from the control loop's own data, never from
credentials (kubeconfigs and tokens never reach a log call). The ``workload.resolved``
line is built by ``dispatcher.workloads.trace.resolved_event`` so ``dispatcher simulate --trace``
can replay a controller log.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

import structlog
from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

__all__ = ["ADOPTED", "EVENTS", "FIELD_LIMIT", "PLACED", "RECONCILE_RESULTS", "Handler",
           "Metrics", "cap_fields", "configure_logging", "serve"]

EVENTS = ("workload.pending", "workload.resolved", "placement.decided", "workload.submitted",
          "status.mirrored", "member.lost", "workload.requeued", "workload.deleted",
          "workload.failed", "workload.conflict", "workload.updated", "workload.finished",
          "copy.deleted", "copy.swept", "workload.rejected", "workload.retry",
          "workload.update_refused", "workload.blocked", "gang.stalled", "gang.moving",
          "workload.not_held")

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def configure_logging(*, level: str = "info", stream: TextIO | None = None) -> None:
    """One JSON object per line on ``stream`` (stdout), ``ts`` in RFC 3339 UTC."""
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            cap_fields,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping().get(level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(stream or sys.stdout),
        cache_logger_on_first_use=True,
    )


FIELD_LIMIT = 2000
"""The longest string a log field keeps (a tenant's 250 KB annotation must not become a
512 KB log line); longer ones are cut and say by how much."""


def _capped(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        if len(value) <= FIELD_LIMIT:
            return value
        return f"{value[:FIELD_LIMIT]}…(+{len(value) - FIELD_LIMIT} chars)"
    if depth >= 4:
        return value
    if isinstance(value, dict):
        return {k: _capped(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_capped(v, depth + 1) for v in value]
    return value


def cap_fields(_logger: Any, _method: str, event: MutableMapping[str, Any]
               ) -> MutableMapping[str, Any]:
    """structlog processor: every string field (nested too) at most ``FIELD_LIMIT`` long."""
    for key, value in event.items():
        if not isinstance(value, (int, float, bool)) and value is not None:
            event[key] = _capped(value)
    return event


RECONCILE_RESULTS = ("success", "requeue_after", "error")
"""``dispatcher_reconcile_total{result}``: done, done with a recheck asked for, raised."""

PLACED, ADOPTED = "placed", "adopted"
"""``dispatcher_placement_attempts_total{result}`` beside the ``PendingReason`` values."""


class Holding(Protocol):
    """What the queue gauges read of the pending queue: which uids it holds, how many."""

    def __contains__(self, uid: object, /) -> bool: ...

    def __len__(self) -> int: ...


def _code(status: int) -> str:
    """An HTTP status as a bounded label value (0: no answer; any other out-of-range
    number a peer might send is "other")."""
    return str(status) if status == 0 or 100 <= status <= 599 else "other"


@dataclass(kw_only=True)
class Metrics:
    """The controller's Prometheus metrics, in their own registry.

    Counters and histograms are updated where things happen (one call at each edge of the
    control loop); gauges of state that already lives in the controller (queue, fleet,
    workers) are read when scraped (``attach``: ``control.meters``), so they cannot drift
    from it and a removed member's series disappear. Label values are bounded: member
    names, GPU products, HTTP verbs and codes, and the enums above and ``PendingReason``;
    never a workload's name or uid.
    """

    registry: CollectorRegistry
    dispatch_latency: Histogram
    pending: Gauge
    dispatches: Counter
    mirror_lag: Histogram
    rejections: Counter
    reconciles: Counter
    reconcile_errors: Counter
    reconcile_duration: Histogram
    workers_busy: Gauge
    placements: Counter
    placement_duration: Histogram
    queue_wait: Histogram
    member_requests: Counter
    member_request_duration: Histogram
    hub_requests: Counter
    hub_request_duration: Histogram
    leader: Gauge
    busy: int = 0
    waiting_since: dict[str, tuple[str, float]] = field(default_factory=dict)
    """uid -> (the PendingReason it waits with, monotonic time it first waited), for the
    queue gauges and ``dispatcher_queue_wait_seconds``; pruned against the queue."""
    _probe: Collector | None = None

    @classmethod
    def create(cls) -> Metrics:
        """Every series in a fresh registry (process metrics included)."""
        registry = CollectorRegistry()
        ProcessCollector(registry=registry)  # process_cpu_seconds_total, _resident_memory_bytes
        make = _Makers(registry)
        return cls(
            registry=registry, **_dispatch_series(make), **_reconcile_series(make),
            **_placement_series(make), **_request_series(make),
            leader=make.gauge("dispatcher_leader",
                              "1 while this replica leads (holds the Lease, or leader "
                              "election is off and it runs), else 0."))

    def render(self) -> bytes:
        return generate_latest(self.registry)

    def attach(self, probe: Collector) -> None:
        """Read ``probe`` at every scrape (the controller's state gauges); replaces an
        earlier one, so a restarted controller never doubles its series."""
        if self._probe is not None:
            self.registry.unregister(self._probe)
        self._probe = probe
        self.registry.register(probe)

    # -- edges of the control loop -------------------------------------------------------

    def reconciling(self, handler: Callable[[str], Awaitable[float | None]]
                    ) -> Callable[[str], Awaitable[float | None]]:
        """``handler`` (``Reconciler.reconcile``) counted, timed and shown busy; it runs
        only while its worker holds a slot, so ``busy`` is the workers in use."""
        async def metered(uid: str) -> float | None:
            self.busy += 1
            self.workers_busy.inc()
            started = time.perf_counter()
            try:
                after = await handler(uid)
            except Exception:
                self.reconciles.labels(result="error").inc()
                self.reconcile_errors.inc()
                raise
            finally:
                self.reconcile_duration.observe(time.perf_counter() - started)
                self.busy -= 1
                self.workers_busy.dec()
            self.reconciles.labels(result="success" if after is None else "requeue_after").inc()
            return after
        return metered

    def placement(self, *, uid: str, result: str, waiting: str | None, seconds: float,
                  queue: Holding) -> None:
        """One placement attempt of ``uid``: ``result`` (placed, adopted or a
        PendingReason), ``waiting`` the PendingReason it now waits with (None: it left the
        queue). Entries of workloads the queue no longer holds (deleted meanwhile) are
        pruned here too, so the map never outgrows the queue by much, scraped or not."""
        self.placements.labels(result=result).inc()
        self.placement_duration.observe(seconds)
        now = time.monotonic()
        if waiting is not None:
            self.waiting_since[uid] = (waiting, self.waiting_since.get(uid, ("", now))[1])
        else:
            held = self.waiting_since.pop(uid, None)
            if held is not None and result in (PLACED, ADOPTED):
                self.queue_wait.labels(reason=held[0]).observe(now - held[1])
        if len(self.waiting_since) > 2 * len(queue) + 64:
            self.prune(queue)

    def prune(self, queue: Holding) -> None:
        """Forget the waiting workloads ``queue`` no longer holds."""
        for uid in [u for u in self.waiting_since if u not in queue]:
            del self.waiting_since[uid]

    def request_observer(self, hub: object) -> Callable[[Any, str, int, float], None]:
        """What ``kube.client.observe_requests`` calls after each request: ``hub`` (the
        hub's client) is counted as the hub, every other client by its name as a member.
        Label children are cached per (client, verb, code): the per-request cost is a dict
        lookup, an increment and a histogram observe (microseconds against the ~1 ms of
        CPU a request costs)."""
        counted: dict[tuple[str, str, str], Any] = {}
        timed: dict[tuple[str, str], Any] = {}

        def observe(client: Any, verb: str, status: int, seconds: float) -> None:
            name = "" if client is hub else str(client.name)
            code = _code(status)
            child = counted.get((name, verb, code))
            if child is None:
                child = counted[(name, verb, code)] = (
                    self.hub_requests.labels(verb=verb, code=code) if client is hub else
                    self.member_requests.labels(member=name, verb=verb, code=code))
            child.inc()
            timer = timed.get((name, verb))
            if timer is None:
                timer = timed[(name, verb)] = (
                    self.hub_request_duration.labels(verb=verb) if client is hub else
                    self.member_request_duration.labels(member=name, verb=verb))
            timer.observe(seconds)
        return observe

@dataclass(frozen=True)
class _Makers:
    """Counters, histograms (latency buckets) and gauges in one registry."""

    registry: CollectorRegistry

    def counter(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def histogram(self, name: str, doc: str, labels: tuple[str, ...] = ()) -> Histogram:
        return Histogram(name, doc, labels, buckets=_LATENCY_BUCKETS, registry=self.registry)

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, registry=self.registry)


def _dispatch_series(make: _Makers) -> dict[str, Any]:
    """Dispatches, mirroring and refused copies."""
    return {
        "dispatch_latency": make.histogram(
            "dispatcher_dispatch_latency_seconds",
            "Hub object creation to copy created on the member."),
        "pending": make.gauge("dispatcher_pending_workloads",
                              "Hub workloads waiting for a feasible member."),
        "dispatches": make.counter("dispatcher_dispatches_total",
                                   "Dispatch outcomes by member and result.",
                                   ("member", "result")),
        "mirror_lag": make.histogram(
            "dispatcher_mirror_lag_seconds",
            "Member status change seen to hub status written."),
        "rejections": make.counter("dispatcher_copies_rejected_total",
                                   "Copies a member refused for good, by member and HTTP "
                                   "status (0: the copy could not be built).",
                                   ("member", "code")),
    }


def _reconcile_series(make: _Makers) -> dict[str, Any]:
    """Reconciles and the workers that run them."""
    return {
        "reconciles": make.counter("dispatcher_reconcile_total",
                                   "Reconciles of one hub workload, by result (success, "
                                   "requeue_after: a recheck was scheduled, error: it raised "
                                   "and is retried with backoff).", ("result",)),
        "reconcile_errors": make.counter("dispatcher_reconcile_errors_total",
                                         "Reconciles that raised (retried with backoff)."),
        "reconcile_duration": make.histogram("dispatcher_reconcile_duration_seconds",
                                             "Time of one reconcile (all its steps)."),
        "workers_busy": make.gauge("dispatcher_workers_busy",
                                   "Workers reconciling a workload now (of config workers)."),
    }


def _placement_series(make: _Makers) -> dict[str, Any]:
    """Placement attempts and the queue wait."""
    return {
        "placements": make.counter("dispatcher_placement_attempts_total",
                                   "Placement attempts by result: placed, adopted (a copy "
                                   "was already on a member) or the PendingReason it waits "
                                   "with.", ("result",)),
        "placement_duration": make.histogram(
            "dispatcher_placement_duration_seconds",
            "Time of one placement decision (the synchronous step: gates, fit, packing)."),
        "queue_wait": make.histogram(
            "dispatcher_queue_wait_seconds",
            "First waiting to placed on a member, by the PendingReason it waited with "
            "last.", ("reason",)),
    }


def _request_series(make: _Makers) -> dict[str, Any]:
    """Requests to member and hub API servers."""
    return {
        "member_requests": make.counter(
            "dispatcher_member_api_requests_total",
            "Requests to member API servers by member, verb and HTTP status (0: no "
            "answer: connection failed or timed out).", ("member", "verb", "code")),
        "member_request_duration": make.histogram(
            "dispatcher_member_api_request_duration_seconds",
            "Member API request time to the response headers (WATCH: to the stream's "
            "start).", ("member", "verb")),
        "hub_requests": make.counter(
            "dispatcher_hub_api_requests_total",
            "Requests to the hub API server by verb and HTTP status (0: no answer).",
            ("verb", "code")),
        "hub_request_duration": make.histogram(
            "dispatcher_hub_api_request_duration_seconds",
            "Hub API request time to the response headers.", ("verb",)),
    }



Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve(*, metrics: Metrics, address: str, port: int, ready: Callable[[], bool],
                pages: Sequence[tuple[str, Handler]] = ()) -> Callable[[], Awaitable[None]]:
    """Start the HTTP server; returns an async cleanup callable.

    ``/healthz`` answers 200 while the event loop runs; ``/readyz`` 200 once this replica
    leads and its caches are synced (503 otherwise); ``/metrics`` is Prometheus text.
    ``pages`` are more read-only routes (GET and HEAD only), e.g. the fleet view.
    """
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        ok = ready()
        return web.Response(status=200 if ok else 503, text="ok" if ok else "not ready")

    async def metrics_handler(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics_handler)
    for path, handler in pages:
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, address, port).start()
    return runner.cleanup
