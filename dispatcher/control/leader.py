"""Leader election on a coordination.k8s.io/v1 Lease: two replicas never act at once.

A replica acts only while it holds the Lease. Taking or renewing it is an update with the
Lease's resourceVersion (optimistic concurrency), so of two replicas racing, exactly one
wins. A holder that cannot renew for ``lease_duration`` stops acting (``lost`` is set and
the controller exits) before any other replica may take the Lease, because others wait for
``renewTime + leaseDuration`` to pass. ``is_free`` is the pure rule, tested alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import structlog

from dispatcher.control.core.record import format_time, parse_time
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.resources import LEASES

__all__ = ["HUB_MODE_ANNOTATION", "LeaderElector", "is_free"]

HUB_MODE_ANNOTATION = "dispatcher.io/hub-mode"
"""On the leader Lease: the hub topology the leader runs with (dedicated or shared)."""

log = structlog.get_logger("dispatcher.leader")


def is_free(lease: Mapping[str, Any] | None, *, identity: str, now: float) -> bool:
    """Whether ``identity`` may take (or keep) the Lease at ``now``."""
    if lease is None:
        return True
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    if not holder or holder == identity:
        return True
    renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime")) or 0.0
    return now >= renewed + float(spec.get("leaseDurationSeconds") or 0)


class LeaderElector:
    """Acquire, then keep, one Lease (``namespace/name``) for ``identity``."""

    def __init__(self, *, client: KubeClient, namespace: str, name: str, identity: str,
                 lease_duration: float, renew_every: float,
                 clock: Callable[[], float] = time.time,
                 annotations: Mapping[str, str] | None = None) -> None:
        self._client = client
        self._annotations = dict(annotations or {})
        self._namespace = namespace
        self._name = name
        self.identity = identity
        self._duration = lease_duration
        self._renew_every = renew_every
        self._clock = clock
        self.lost = asyncio.Event()
        self.leading = False

    def _body(self, current: Mapping[str, Any] | None, now: float) -> dict[str, Any]:
        spec = dict((current or {}).get("spec") or {})
        taking = spec.get("holderIdentity") != self.identity
        spec.update({"holderIdentity": self.identity,
                     "leaseDurationSeconds": max(1, round(self._duration)),
                     "renewTime": format_time(now)})
        if taking:
            spec["acquireTime"] = format_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (
                1 if current else 0)
        meta: dict[str, Any] = {"name": self._name, "namespace": self._namespace}
        if self._annotations:  # what the leader runs with (``dispatcher clusters`` reads it)
            meta["annotations"] = {**((current or {}).get("metadata") or {}).get(
                "annotations", {}), **self._annotations}
        if current is not None:
            meta["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta,
                "spec": spec}

    async def try_once(self) -> bool:
        """One attempt to take or renew; True when this replica holds the Lease now."""
        path = LEASES.item(self._name, self._namespace)
        try:
            current = await self._client.request("GET", path)
        except NotFound:
            current = None
        now = self._clock()
        if not is_free(current, identity=self.identity, now=now):
            return False
        try:
            if current is None:
                await self._client.request("POST", LEASES.collection(self._namespace),
                                           body=self._body(None, now))
            else:
                await self._client.request("PUT", path, body=self._body(current, now))
        except Conflict:
            return False
        return True

    async def acquire(self) -> None:
        """Return once this replica leads (polls every ``renew_every``)."""
        while True:
            try:
                if await self.try_once():
                    self.leading = True
                    log.info("leader.acquired", identity=self.identity, lease=self._name)
                    return
            except KubeError as exc:
                log.warning("leader.error", error=type(exc).__name__, message=str(exc)[:300])
            await asyncio.sleep(self._renew_every)

    async def hold(self) -> None:
        """Renew until renewal fails for a whole lease duration; then set ``lost``."""
        last_ok = self._clock()
        while True:
            await asyncio.sleep(self._renew_every)
            try:
                if await self.try_once():
                    last_ok = self._clock()
                    continue
                reason = "taken by another replica"
            except KubeError as exc:
                reason = f"{type(exc).__name__}: {str(exc)[:200]}"
            if self._clock() - last_ok >= self._duration - self._renew_every:
                self.leading = False
                log.error("leader.lost", identity=self.identity, reason=reason)
                self.lost.set()
                return

    async def release(self) -> None:
        """Give the Lease up on a clean shutdown (others take it at once)."""
        if not self.leading:
            return
        path = LEASES.item(self._name, self._namespace)
        try:
            current = await self._client.request("GET", path)
            if (current.get("spec") or {}).get("holderIdentity") == self.identity:
                body = self._body(current, self._clock())
                body["spec"]["holderIdentity"] = ""
                body["spec"]["leaseDurationSeconds"] = 1
                await self._client.request("PUT", path, body=body)
        except KubeError:
            pass
        self.leading = False
