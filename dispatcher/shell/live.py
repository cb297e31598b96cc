"""The controller's view of the fleet, for one-shot commands (``dispatcher explain`` live).

``live_snapshots`` builds exactly what the control loop decides over: the fleet runtime
with the config's members (static and MemberCluster objects), Nodes and Pods listed on each
member, and the reservations recorded on Dispatch objects (decisions whose pods are not
visible yet) applied, so an explanation counts in-flight dispatches like the controller.
``hub_workload`` reads one hub object by ``KIND/NAME`` through the catalog's kinds;
``kueue_view`` what Kueue on the hub and the MultiKueue dispatcher say of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.config import Config
from dispatcher.control.core import record as records
from dispatcher.control.nominator import CHECKS, CONFIGS, WORKLOADS, multikueue_checks
from dispatcher.fleet import reservations
from dispatcher.fleet.queueing import KUEUE
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.fleet.runtime import Fleet
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError, NotFound
from dispatcher.kube.resources import DISPATCHES, EVENTS
from dispatcher.placement.model import MemberSnapshot
from dispatcher.shell.app import hub_kubeconfig_path
from dispatcher.workloads.catalog import Catalog

__all__ = ["KueueView", "dispatch_of", "hub_client", "hub_workload", "kueue_view",
           "live_snapshots"]


async def hub_client(config: Config) -> KubeClient:
    """A client for the config's hub."""
    path = hub_kubeconfig_path(config)
    data: Any = await asyncio.to_thread(lambda: yaml.safe_load(Path(path).read_text()))
    return await KubeClient.from_kubeconfig(data, name="hub", context=config.hub_context)


async def hub_workload(hub: KubeClient, catalog: Catalog, *, namespace: str, ref: str
                       ) -> dict[str, Any]:
    """The hub object ``KIND/NAME``, with KIND spelled as kubectl takes it: the kind or its
    plural, any case, optionally qualified by its group (``jobset``, ``jobsets``,
    ``JobSet.jobset.x-k8s.io``), among the catalog's kinds.

    Raises ValueError naming the known kinds when the kind is not in the catalog, and the
    kube errors (NotFound, ...) of the read.
    """
    kind, sep, name = ref.partition("/")
    if not sep or not kind or not name:
        raise ValueError(f"{ref!r}: expected KIND/NAME, e.g. jobset/train")
    word, _, group = kind.lower().partition(".")
    candidates = [d for d in catalog.definitions if not group or d.gvk.group == group]
    matches = [d for d in candidates if d.kind.lower() == word]
    for definition in matches or candidates:  # no kind of that name: try it as a plural
        resource = await hub.discovery.resource(definition.api_version, definition.kind)
        if resource is None or (not matches and resource.plural != word):
            continue
        obj: dict[str, Any] = await hub.request("GET", resource.item(name, namespace))
        obj.setdefault("apiVersion", resource.api_version)
        obj.setdefault("kind", resource.kind)
        return obj
    if matches:
        raise ValueError(f"the hub does not serve {matches[0].kind} "
                         f"({matches[0].api_version})")
    known = ", ".join(sorted({d.kind for d in catalog.definitions}))
    raise ValueError(f"kind {kind!r} is not in the definition catalog (known: {known})")


async def dispatch_of(hub: KubeClient, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The Dispatch of hub object ``obj`` (by the names tried in order, the workload uid
    checked: a same-named kind of another group may hold one), or None."""
    meta = obj.get("metadata") or {}
    uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
    for name in records.dispatch_names(obj):
        try:
            found: dict[str, Any] = await hub.request("GET", DISPATCHES.item(name, namespace))
        except NotFound:
            continue
        if ((found.get("spec") or {}).get("workload") or {}).get("uid") == uid:
            return found
    return None


@dataclass(frozen=True)
class KueueView:
    """A job's hub Kueue Workload, the MultiKueue checks with their workers (check ->
    workers; empty when they could not be read) and the Events on the Workload."""

    workload: dict[str, Any]
    checks: dict[str, tuple[str, ...]]
    events: list[dict[str, Any]]


async def kueue_view(hub: KubeClient, obj: dict[str, Any]) -> KueueView | None:
    """The Kueue Workload on the hub that admits ``obj`` (its controller owner is
    ``obj``), with its MultiKueue checks and Events; None when the hub serves no Kueue
    Workloads or none belongs to ``obj``."""
    meta = obj.get("metadata") or {}
    uid, namespace = str(meta.get("uid") or ""), str(meta.get("namespace") or "")
    if await hub.discovery.resource(WORKLOADS.api_version, WORKLOADS.kind) is None:
        return None
    listed = await watch.list_objects(hub, WORKLOADS, namespace=namespace)
    found = next((w for w in listed.objects if any(
        r.get("uid") == uid and r.get("controller") is True
        for r in (w.get("metadata") or {}).get("ownerReferences") or ())), None)
    if found is None:
        return None
    try:  # cluster-scoped: a tenant may not read them; the Workload still says a lot
        checks = multikueue_checks((await watch.list_objects(hub, CHECKS)).objects,
                                   (await watch.list_objects(hub, CONFIGS)).objects)
    except KubeError:
        checks = {}
    wl_uid = str(found["metadata"].get("uid") or "")
    try:  # without the right to read Events the stage still reads; only our words are lost
        events = (await watch.list_objects(
            hub, EVENTS, namespace=namespace,
            field_selector=f"involvedObject.uid={wl_uid}")).objects
    except KubeError:
        events = []
    return KueueView(workload=found, checks=checks, events=events)


def _book(fleet: Fleet) -> Callable[[str], MemberReservations | None]:
    """A member's reservations, None for a name the fleet does not have (any more)."""
    def book(member: str) -> MemberReservations | None:
        return fleet.reservations(member) if member in fleet.names() else None
    return book


async def live_snapshots(config: Config, *, hub: KubeClient, catalog: Catalog,
                         wait_ready_s: float = 15.0, exclude_uid: str = ""
                         ) -> list[MemberSnapshot]:
    """Member snapshots as the controller sees them now (see the module docstring).

    Waits until every member is Ready (a Kueue member: with its queues read) or
    ``wait_ready_s`` passes; members still not Ready are
    returned as such (placement reports them "not ready" with the reason). The reservation
    of ``exclude_uid`` (the workload being explained, if already placed) is left out.
    """
    fleet = Fleet(hub=hub, settings=config.fleet,
                  kinds=[d.gvk for d in catalog.definitions])
    await fleet.start()
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ready_s
        seen = fleet.version
        while loop.time() < deadline:
            members = fleet.snapshots()
            if members and all(m.ready and (m.queueing.system != KUEUE or m.quota is not None)
                               for m in members):
                break
            try:
                seen = await asyncio.wait_for(fleet.wait_changed(seen),
                                              max(deadline - loop.time(), 0.01))
            except TimeoutError:
                break
        listed = await watch.list_objects(hub, DISPATCHES)
        held = [(rec.reservation, rec.cluster or "")
                for rec in map(records.read, listed.objects)
                if rec.reservation is not None and rec.workload_uid != exclude_uid]
        reservations.restore(held, _book(fleet), now=time.time())
        # the controller's own snapshots (allow-lists and all), with capacity copies that
        # outlive the fleet
        return [replace(m, capacity=m.capacity.snapshot()) for m in fleet.snapshots()]
    finally:
        await fleet.stop()
