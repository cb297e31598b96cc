"""MemberCluster status on the hub: written when it changed, at a bounded rate.

``fleet/status.py`` says what the status is (pure); this writes it. A pass runs after
each fleet change (coalesced) or heartbeat, at most once per ``status_min_interval_s``;
a member's status is written only when it differs from what this writer last wrote (or
its heartbeat is due). Static members have no object, so no status is written for them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

import structlog

from dispatcher.aiotasks import Pulse
from dispatcher.fleet import health as healthmod
from dispatcher.fleet import status as statusmod
from dispatcher.fleet.connection import Clock, MemberConnection
from dispatcher.fleet.health import Health
from dispatcher.fleet.membership import Membership
from dispatcher.fleet.settings import FleetSettings
from dispatcher.kube import errors
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import MEMBER_CLUSTERS

__all__ = ["StatusWriter"]

log = structlog.get_logger(__name__)


class StatusWriter:
    """Writes the MemberCluster statuses of ``membership``'s members; ``health(name)`` is
    the fleet's view of a member's health (spec and duplicate checks included)."""

    def __init__(self, *, hub: KubeClient, settings: FleetSettings, clock: Clock,
                 membership: Membership, health: Callable[[str], Health]) -> None:
        self._hub = hub
        self._settings = settings
        self._clock = clock
        self._membership = membership
        self._health = health
        self._written: dict[str, tuple[dict[str, Any], datetime]] = {}

    def forget(self, name: str) -> None:
        """The member's object is gone: what was written for it no longer counts."""
        self._written.pop(name, None)

    async def run(self, pulse: Pulse, stopping: Callable[[], bool]) -> None:
        """Write changed statuses after each ``pulse`` (or heartbeat), at most once per
        ``status_min_interval``, until ``stopping``."""
        seen = -1
        while not stopping():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._settings.status_heartbeat_s):
                    seen = await pulse.wait(seen)
            await self.write_once()
            await asyncio.sleep(self._settings.status_min_interval_s)
        raise asyncio.CancelledError  # stopped (the cancellation itself was lost)

    async def write_once(self) -> int:
        """One pass over all MemberCluster members; returns the number of writes."""
        members = self._membership
        writes = 0
        for name in sorted({*members.connections, *members.invalid}):
            conn = members.connections.get(name)
            if (conn is not None and conn.spec.static) or name not in members.objects:
                continue
            now = self._clock()
            written = self._written.get(name)
            desired = self._desired(name, conn, written, now)
            if desired is None or not await self._write(name, desired):
                continue
            self._written[name] = (desired, now)
            writes += 1
        return writes

    def _desired(self, name: str, conn: MemberConnection | None,
                 written: tuple[dict[str, Any], datetime] | None, now: datetime
                 ) -> dict[str, Any] | None:
        """The status to write for ``name`` now, or None when nothing is due."""
        members = self._membership
        settings = self._settings
        previous = written[0] if written else (members.objects[name].get("status") or {})
        if conn is None:  # an invalid spec, never connected
            desired = statusmod.member_status(
                health=healthmod.spec_invalid(healthmod.initial(),
                                              message=members.invalid[name], running=False),
                capacity=None, version=None, kinds=None, previous=previous, now=now)
        else:
            conn.expire()
            desired = statusmod.member_status(
                health=self._health(name), capacity=conn.capacity if conn.synced else None,
                version=conn.kubernetes_version, kinds=conn.served, previous=previous,
                now=now, insecure=conn.insecure_transport,
                gang=(conn.gang_mechanism, conn.gang_discovered),
                queueing=(conn.queueing.system, conn.kueue_discovered))
        if not statusmod.needs_write(
                desired, written=written[0] if written else None,
                written_at=written[1] if written else None, now=now,
                min_interval=timedelta(seconds=settings.status_min_interval_s),
                heartbeat=timedelta(seconds=settings.status_heartbeat_s)):
            return None
        return desired

    async def _write(self, name: str, desired: dict[str, Any]) -> bool:
        """PATCH the status; False when the object is gone or the write failed."""
        try:
            await self._hub.request("PATCH", MEMBER_CLUSTERS.item(name, subresource="status"),
                                    body={"status": desired}, content_type=JSON_MERGE_PATCH)
        except errors.NotFound:
            return False
        except errors.KubeError as exc:
            log.warning("member.status_write_failed", member=name,
                        error=type(exc).__name__, message=str(exc)[:300])
            return False
        return True
