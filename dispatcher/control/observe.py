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
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["EVENTS", "FIELD_LIMIT", "Handler", "Metrics", "cap_fields", "configure_logging",
           "serve"]

EVENTS = ("workload.pending", "workload.resolved", "placement.decided", "workload.submitted",
          "status.mirrored", "member.lost", "workload.requeued", "workload.deleted",
          "workload.failed", "workload.conflict", "workload.updated", "workload.finished",
          "copy.deleted", "copy.swept", "workload.rejected", "workload.retry",
          "workload.update_refused")

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


@dataclass(frozen=True)
class Metrics:
    """The controller's Prometheus metrics, in their own registry."""

    registry: CollectorRegistry
    dispatch_latency: Histogram
    pending: Gauge
    dispatches: Counter
    mirror_lag: Histogram
    free_gpus: Gauge
    rejections: Counter

    @classmethod
    def create(cls) -> Metrics:
        registry = CollectorRegistry()
        return cls(
            registry=registry,
            dispatch_latency=Histogram(
                "dispatcher_dispatch_latency_seconds",
                "Hub object creation to copy created on the member.",
                buckets=_LATENCY_BUCKETS, registry=registry),
            pending=Gauge("dispatcher_pending_workloads",
                          "Hub workloads waiting for a feasible member.", registry=registry),
            dispatches=Counter("dispatcher_dispatches_total",
                               "Dispatch outcomes by member and result.",
                               ["member", "result"], registry=registry),
            mirror_lag=Histogram(
                "dispatcher_mirror_lag_seconds",
                "Member status change seen to hub status written.",
                buckets=_LATENCY_BUCKETS, registry=registry),
            free_gpus=Gauge("dispatcher_member_free_gpus",
                            "Free GPUs per member (net of reservations).", ["member"],
                            registry=registry),
            rejections=Counter("dispatcher_copies_rejected_total",
                               "Copies a member refused for good, by member and HTTP "
                               "status (0: the copy could not be built).",
                               ["member", "code"], registry=registry),
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


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
