"""Which members the fleet has: one connection per member, kept in step with the hub.

Static members (settings) are added once; MemberCluster objects are followed by a hub
watch (``on_member_clusters``). A MemberCluster whose credentials source changes (Secret
reference, context) gets a new connection; one whose labels, cordon or allowed namespaces
change keeps its connection. A MemberCluster whose spec cannot be used is remembered in
``invalid`` (its status says why) and keeps a connection made from its last valid spec.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import structlog

from dispatcher.fleet import credentials
from dispatcher.fleet import members as membersmod
from dispatcher.fleet.connection import Clock, MemberConnection
from dispatcher.fleet.members import MemberSpec
from dispatcher.fleet.settings import FleetSettings
from dispatcher.fleet.signals import Change, FleetSignals
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import GroupVersionKind

__all__ = ["Membership"]

log = structlog.get_logger(__name__)


class Membership:
    """The member connections by name, the MemberCluster objects they come from, and the
    MemberClusters whose spec is invalid; ``forget(name)`` is called when a member's
    object is gone (its last written status with it)."""

    def __init__(self, *, hub: KubeClient | None, settings: FleetSettings, clock: Clock,
                 signals: FleetSignals, kinds: Callable[[], Sequence[GroupVersionKind]],
                 forget: Callable[[str], None]) -> None:
        self._hub = hub
        self._settings = settings
        self._clock = clock
        self._signals = signals
        self._kinds = kinds
        self._forget = forget
        self.connections: dict[str, MemberConnection] = {}
        self.objects: dict[str, Mapping[str, Any]] = {}
        """The MemberCluster object of each member (and of each invalid one)."""
        self.invalid: dict[str, str] = {}
        """MemberClusters whose spec is invalid: name -> why (``Ready=False SpecInvalid``)."""

    def add(self, spec: MemberSpec) -> None:
        conn = MemberConnection(spec=spec, load=credentials.loader(spec, self._hub),
                                settings=self._settings, clock=self._clock,
                                kinds=tuple(self._kinds()),
                                on_change=functools.partial(self._signals.changed, spec.name))
        self.connections[spec.name] = conn
        conn.start()
        log.info("member.added", member=spec.name, static=spec.static)
        self._signals.joined_or_left(spec.name)

    async def remove(self, name: str) -> None:
        conn = self.connections.pop(name, None)
        self.objects.pop(name, None)
        self._forget(name)
        self.invalid.pop(name, None)
        if conn is not None:
            await conn.stop()
            log.info("member.removed", member=name)
            self._signals.joined_or_left(name)

    async def stop(self) -> None:
        """Stop every connection (bounded, see ``MemberConnection.stop``)."""
        connections = list(self.connections.values())
        self.connections.clear()
        await asyncio.gather(*(c.stop() for c in connections))

    async def upsert(self, obj: Mapping[str, Any]) -> None:
        try:
            spec = membersmod.from_member_cluster(
                obj, default_namespace=self._settings.secret_namespace)
        except ValueError as exc:
            self._spec_invalid(obj, str(exc))
            return
        if self.invalid.pop(spec.name, None) is not None:
            log.info("member.spec_valid", member=spec.name)
            self._signals.changed(spec.name, Change.STATE)
        self.objects[spec.name] = obj
        current = self.connections.get(spec.name)
        if current is not None and current.spec.static:
            log.warning("member.name_conflict", member=spec.name,
                        hint="a static member of that name exists; the MemberCluster is "
                             "ignored")
            return
        if current is None:
            self.add(spec)
        elif not current.spec.same_source(spec):
            await self.remove(spec.name)
            self.objects[spec.name] = obj
            self.add(spec)
        elif current.spec != spec:
            current.update_spec(spec)

    def _spec_invalid(self, obj: Mapping[str, Any], message: str) -> None:
        """A MemberCluster whose spec cannot be used: ``Ready=False`` with reason
        SpecInvalid and the message on its status (written by the status writer).
        A connection made from its last valid spec is kept but not Ready
        (``Fleet.health``): nothing new is placed there, and its copies are not failed
        over for an edit."""
        name = str((obj.get("metadata") or {}).get("name") or "")
        log.warning("member.invalid_spec", member=name, message=message)
        if not name:
            return  # nothing to write a status to
        self.invalid[name] = message
        self.objects[name] = obj
        self._signals.changed(name, Change.STATE)

    async def on_member_clusters(self, item: watch.Listed | watch.Changed) -> None:
        """One item of the hub's MemberCluster watch."""
        if isinstance(item, watch.Listed):
            listed = {str(o["metadata"]["name"]) for o in item.objects}
            for name in [n for n, c in self.connections.items()
                         if not c.spec.static and n not in listed]:
                await self.remove(name)
            for name in [n for n in self.invalid if n not in listed]:
                self._forget_invalid(name)
            for obj in item.objects:
                await self.upsert(obj)
        elif item.type == "DELETED":
            name = str(item.object["metadata"]["name"])
            conn = self.connections.get(name)
            if conn is not None and not conn.spec.static:
                await self.remove(name)
            self._forget_invalid(name)
        else:
            await self.upsert(item.object)

    def _forget_invalid(self, name: str) -> None:
        """An invalid MemberCluster without a connection is gone from the hub."""
        if self.invalid.pop(name, None) is not None and name not in self.connections:
            self.objects.pop(name, None)
            self._forget(name)
