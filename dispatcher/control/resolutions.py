"""Each workload resolved once per generation and catalog, before it is placed.

Resolving may run a tenant's definition in the bounded worker pool (an ``await``), while
placing must not ``await`` between its decision and its reservation; so the shell resolves
first (``prepare``) and placing only reads the result (``get``). The result is logged once
(``workload.resolved``, the trace format ``dispatcher simulate --trace`` replays) and is
what the Dispatch's ``status.demand`` shows.

A result is kept per generation, except two: an object quarantined by a bound
(``ObjectQuarantined``) is kept only while its ``resourceVersion`` is the same (an edit of
its annotations or labels, which leaves the generation, may be what fixes it), and an
evaluation that could not run (``EvaluationUnavailable``: a busy host) is not kept at all:
``prepare`` raises it, and the worker retries with its back-off.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import record as records
from dispatcher.control.core.priority import InvalidPriority, PriorityPolicy
from dispatcher.workloads.bounded import (
    DefinitionQuarantined,
    EvaluationUnavailable,
    ObjectQuarantined,
)
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.resolve import Resolution
from dispatcher.workloads.trace import resolved_event

__all__ = ["Resolutions"]

log = structlog.get_logger("dispatcher")


def _generation(workload: Mapping[str, Any]) -> int:
    return int(workload["metadata"].get("generation") or 0)


def _version(workload: Mapping[str, Any]) -> str:
    return str(workload["metadata"].get("resourceVersion") or "")


Cached = tuple[int, int, str | None, "Resolution | WorkloadError"]


class Resolutions:
    """Resolutions (or the error) per workload uid, keyed by generation and catalog version."""

    def __init__(self, *, live: LiveCatalog, priority: PriorityPolicy,
                 clock: Callable[[], float]) -> None:
        self.live = live
        self.priority = priority
        self.clock = clock
        self._by_uid: dict[str, Cached] = {}

    def _current(self, uid: str, workload: Mapping[str, Any]) -> Cached | None:
        cached = self._by_uid.get(uid)
        if cached is None or cached[:2] != (_generation(workload), self.live.version):
            return None
        if cached[2] is not None and cached[2] != _version(workload):
            return None  # quarantined at another version: the object changed
        return cached

    async def prepare(self, uid: str, workload: Mapping[str, Any]) -> None:
        """Resolve ``workload`` unless it already is for this generation and catalog.
        A definition quarantined meanwhile is reported to the live catalog;
        ``EvaluationUnavailable`` is raised (transient, kept nowhere)."""
        if self._current(uid, workload) is not None:
            return
        key = (_generation(workload), self.live.version)
        version: str | None = None
        try:
            resolution: Resolution | WorkloadError = \
                await self.live.evaluator.resolve_async(workload)
        except EvaluationUnavailable:
            self._by_uid.pop(uid, None)
            raise
        except WorkloadError as exc:
            resolution = exc
            if isinstance(exc, DefinitionQuarantined):
                self.live.notify_quarantine()
            elif isinstance(exc, ObjectQuarantined):
                version = _version(workload)
        self._by_uid[uid] = (*key, version, resolution)
        if isinstance(resolution, Resolution):
            self._log(uid, workload, resolution)

    def get(self, uid: str, workload: Mapping[str, Any]) -> Resolution | WorkloadError:
        """What ``prepare`` found, or the error saying why there is nothing current."""
        cached = self._current(uid, workload)
        if cached is None:
            try:
                self.live.current.require(workload)  # NoDefinitionError naming what is loaded
            except WorkloadError as exc:
                return exc
            return WorkloadError("not resolved yet (the definition changed meanwhile)")
        return cached[3]

    def forget(self, uid: str) -> None:
        self._by_uid.pop(uid, None)

    def clear(self) -> None:
        """The catalog changed: every result is of the old one (``LiveCatalog.version``
        already keeps them from being read; this frees them)."""
        self._by_uid.clear()

    def _log(self, uid: str, workload: Mapping[str, Any], resolution: Resolution) -> None:
        meta = workload["metadata"]
        namespace = str(meta.get("namespace") or "")
        try:  # the effective priority (placing parks a junk one before it resolves)
            priority = self.priority.of(meta.get("annotations"), namespace)
        except InvalidPriority:
            priority = self.priority.of(None, namespace)
        event = resolved_event(ts=records.format_time(self.clock()), uid=uid,
                               namespace=namespace, name=str(meta["name"]),
                               api_version=resolution.api_version, kind=resolution.kind,
                               definition=resolution.definition_name,
                               demand=resolution.demand, priority=priority)
        event.pop("ts")
        log.info(event.pop("event"), **event)
