"""Kubernetes Events on hub workloads, one per Dispatch transition, written in the background.

``kubectl describe`` on a hub workload shows where it went and why. Events are advisory:
they are queued (bounded; the oldest are dropped under a burst) and written by one task,
so an Event never delays a dispatch and a failed write is only logged.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.control.core.record import format_time
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import EVENTS

__all__ = ["EventRecorder", "event_body"]

log = structlog.get_logger("dispatcher.events")

COMPONENT = "dispatcher"


def event_body(*, workload: Mapping[str, Any], reason: str, message: str, warning: bool,
               now: float) -> dict[str, Any]:
    """A core/v1 Event about ``workload``."""
    meta = workload.get("metadata") or {}
    namespace = meta.get("namespace") or "default"
    stamp = format_time(now)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta.get('name', 'workload')}.{secrets.token_hex(8)}",
                     "namespace": namespace},
        "involvedObject": {"apiVersion": workload.get("apiVersion"),
                           "kind": workload.get("kind"), "name": meta.get("name"),
                           "namespace": namespace, "uid": meta.get("uid"),
                           "resourceVersion": meta.get("resourceVersion")},
        "reason": reason, "message": message[:1000],
        "type": "Warning" if warning else "Normal",
        "source": {"component": COMPONENT}, "reportingComponent": COMPONENT,
        "reportingInstance": COMPONENT,
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
    }


class EventRecorder:
    """Queue Events and write them from one background task (``run``)."""

    def __init__(self, *, client: KubeClient, limit: int = 10_000,
                 clock: Callable[[], float] = time.time) -> None:
        self._client = client
        self._queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=limit)
        self._clock = clock

    def record(self, *, workload: Mapping[str, Any], reason: str, message: str,
               warning: bool = False) -> None:
        body = event_body(workload=workload, reason=reason, message=message, warning=warning,
                          now=self._clock())
        if self._queue.full():
            self._queue.get_nowait()
        self._queue.put_nowait(body)

    async def run(self) -> None:
        while True:
            body = await self._queue.get()
            namespace = body["metadata"]["namespace"]
            try:
                await self._client.request("POST", EVENTS.collection(namespace), body=body)
            except KubeError as exc:
                log.warning("event.failed", reason=body["reason"], error=type(exc).__name__)
