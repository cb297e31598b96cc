"""What the control loop needs from the fleet, and a small runtime over static members.

``FleetView`` is the seam: placement snapshots, a client per connected member, its
reservations, its health and a change pulse. ``StaticFleet`` implements it for members
listed in the config file (``fleet.static_members``): one client per member, Node and Pod
informers feeding a ``ClusterCapacity``, a ``/version`` probe, and a first-loss time kept
across failed reconnects. The full fleet runtime (MemberCluster objects, Secrets,
MemberCluster status) lives in ``dispatcher.fleet``; ``run`` uses this adapter when that
runtime is not available.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
import yaml

from dispatcher.control.decide import MemberHealth
from dispatcher.fleet.aiokit import Pulse, cancel_all, guarded
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import NODES, PODS
from dispatcher.placement.model import MemberSnapshot

__all__ = ["FleetView", "StaticFleet"]

log = structlog.get_logger("dispatcher.fleet")

Clock = Callable[[], float]


class FleetView(Protocol):
    """The fleet as the control loop sees it. All reads are synchronous and cheap."""

    pulse: Pulse
    """Bumped whenever capacity, health or the member set changed."""

    def names(self) -> tuple[str, ...]:
        """Every known member."""
        ...

    def snapshots(self) -> Sequence[MemberSnapshot]:
        """One snapshot per member for placement (live capacity, net of reservations)."""
        ...

    def client(self, member: str) -> KubeClient | None:
        """The member's client when it is connected, else None."""
        ...

    def reservations(self, member: str) -> MemberReservations | None:
        """The member's live reservations (None for an unknown member)."""
        ...

    def health(self, member: str) -> MemberHealth:
        """Reachability, with the first-loss time kept across failed reconnects."""
        ...


@dataclass
class _Member:
    spec: StaticMember
    capacity: ClusterCapacity
    reservations: MemberReservations
    client: KubeClient | None = None
    synced: set[str] | None = None
    lost_since: float | None = None
    failing_since: float | None = None
    served: frozenset[tuple[str, str]] | None = None


def _read_yaml(path: str) -> dict[str, Any]:
    data = yaml.safe_load(Path(path).read_text())
    if not isinstance(data, dict):
        raise OSError(f"{path}: not a kubeconfig mapping")
    return data


class StaticFleet:
    """``FleetView`` over the config file's static members (see the module docstring)."""

    def __init__(self, *, settings: FleetSettings, kinds: Iterable[tuple[str, str, str]],
                 clock: Clock = time.time) -> None:
        self._settings = settings
        self._kinds = tuple(kinds)  # (group, version, kind) to discover on members
        self._clock = clock
        self._members: dict[str, _Member] = {}
        for spec in settings.static_members:
            capacity = ClusterCapacity()
            self._members[spec.name] = _Member(
                spec=spec, capacity=capacity,
                reservations=MemberReservations(member=spec.name, capacity=capacity))
        self._tasks: list[asyncio.Task[None]] = []
        self.pulse = Pulse()

    # -- FleetView -------------------------------------------------------------------------

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._members))

    def snapshots(self) -> Sequence[MemberSnapshot]:
        out = []
        for name in sorted(self._members):
            m = self._members[name]
            ready = m.client is not None and m.synced == {"nodes", "pods"} \
                and m.failing_since is None
            reason = "" if ready else ("unreachable" if m.lost_since else "not synced")
            out.append(MemberSnapshot(name=name, capacity=m.capacity, labels=m.spec.labels,
                                      ready=ready, not_ready_reason=reason,
                                      cordoned=m.spec.cordoned, served_kinds=m.served))
        return out

    def client(self, member: str) -> KubeClient | None:
        m = self._members.get(member)
        return m.client if m is not None and m.lost_since is None else None

    def reservations(self, member: str) -> MemberReservations | None:
        m = self._members.get(member)
        return m.reservations if m is not None else None

    def health(self, member: str) -> MemberHealth:
        m = self._members.get(member)
        if m is None:
            return MemberHealth(reachable=False, lost_since=0.0)
        return MemberHealth(reachable=m.lost_since is None, lost_since=m.lost_since)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect every member (in the background; failures show up as health)."""
        for name in self._members:
            self._tasks.append(guarded(self._run(name), name=f"fleet:{name}"))

    async def stop(self) -> None:
        await cancel_all(self._tasks)
        for m in self._members.values():
            if m.client is not None:
                await m.client.close()
                m.client = None

    # -- shell -------------------------------------------------------------------------------

    def _failed(self, m: _Member, error: BaseException) -> None:
        now = self._clock()
        if m.failing_since is None:
            m.failing_since = now
            log.warning("member.unreachable", member=m.spec.name, error=type(error).__name__,
                        message=str(error)[:300])
            self.pulse.bump()
        if m.lost_since is None and now - m.failing_since >= self._settings.unreachable_after_s:
            m.lost_since = m.failing_since
            log.warning("member.lost", member=m.spec.name, since=m.lost_since)
            self.pulse.bump()

    def _answered(self, m: _Member) -> None:
        if m.failing_since is not None or m.lost_since is not None:
            log.info("member.reachable", member=m.spec.name)
            m.failing_since = None
            m.lost_since = None
            self.pulse.bump()

    async def _run(self, name: str) -> None:
        m = self._members[name]
        delay = self._settings.reconnect_initial_s
        while m.client is None:
            try:
                kubeconfig = await asyncio.to_thread(_read_yaml, m.spec.kubeconfig)
                m.client = await KubeClient.from_kubeconfig(kubeconfig, name=name,
                                                            context=m.spec.context)
            except (OSError, yaml.YAMLError, KubeError) as exc:
                self._failed(m, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._settings.reconnect_max_s)
        m.synced = set()
        tasks = [guarded(self._probe(m), name=f"probe:{name}"),
                 guarded(self._inform(m, "nodes"), name=f"nodes:{name}"),
                 guarded(self._inform(m, "pods"), name=f"pods:{name}")]
        try:
            await asyncio.gather(*tasks)
        finally:
            await cancel_all(tasks)

    async def _discover(self, m: _Member, client: KubeClient) -> None:
        client.discovery.forget()
        served = set()
        for group, version, kind in self._kinds:
            api_version = f"{group}/{version}" if group else version
            if await client.discovery.resource(api_version, kind) is not None:
                served.add((group, kind))
        if frozenset(served) != m.served:
            m.served = frozenset(served)
            self.pulse.bump()

    async def _probe(self, m: _Member) -> None:
        assert m.client is not None
        last_discovery = 0.0
        while True:
            try:
                await m.client.request("GET", "/version",
                                       request_timeout=self._settings.request_timeout_s)
                if self._clock() - last_discovery >= self._settings.discovery_interval_s \
                        or m.served is None:
                    await self._discover(m, m.client)
                    last_discovery = self._clock()
                self._answered(m)
            except KubeError as exc:
                self._failed(m, exc)
            await asyncio.sleep(self._settings.probe_interval_s
                                if m.failing_since is None else
                                min(self._settings.probe_interval_s, 0.5))

    async def _inform(self, m: _Member, what: str) -> None:
        assert m.client is not None and m.synced is not None
        ref = NODES if what == "nodes" else PODS
        delay = self._settings.reconnect_initial_s
        while True:
            try:
                async for item in watch.informer(m.client, ref,
                                                 timeout_seconds=self._settings.watch_timeout_s):
                    delay = self._settings.reconnect_initial_s
                    self._apply(m, what, item)
                    self._answered(m)
            except KubeError as exc:
                m.synced.discard(what)
                self._failed(m, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, self._settings.reconnect_max_s)

    def _apply(self, m: _Member, what: str, item: watch.Listed | watch.Changed) -> None:
        cap = m.capacity
        if isinstance(item, watch.Listed):
            if what == "nodes":
                known = {n.name for n in cap.nodes()}
                seen = {o["metadata"]["name"] for o in item.objects}
                for gone in known - seen:
                    cap.delete_node(gone)
                for obj in item.objects:
                    cap.upsert_node(obj)
            else:
                for obj in item.objects:
                    cap.upsert_pod(obj)
            assert m.synced is not None
            m.synced.add(what)
        elif what == "nodes":
            if item.type == "DELETED":
                cap.delete_node(item.object["metadata"]["name"])
            else:
                cap.upsert_node(item.object)
        elif item.type == "DELETED":
            cap.delete_pod(item.object)
        else:
            cap.upsert_pod(item.object)
        self.pulse.bump()
