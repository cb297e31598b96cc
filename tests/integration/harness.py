"""The in-process controller harness for integration tests on the dev fleet.

``running(fleet)`` starts a controller with its own hub id on one fresh hub namespace,
watching the members ``member-1`` and ``member-2`` of that fleet; ``eventually`` polls with
a deadline (never a sleep-and-hope).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.controller import Controller
from dispatcher.control.core.decide import Rules
from dispatcher.control.fleetview import LiveFleet
from dispatcher.control.settings import ControlSettings, LeaderSettings, ServerSettings
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.queueing import Queueing
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.fleet.topology import TopologyLevel
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.resources import DISPATCHES, NAMESPACES
from dispatcher.workloads.catalog import Catalog

__all__ = ["Harness", "eventually", "get_or_none", "kubectl", "running"]

HUB_ID = f"it-{uuid.uuid4().hex[:6]}"
TIMEOUT_S = 20.0


@dataclass
class Harness:
    hub: KubeClient
    members: dict[str, KubeClient]
    controller: Controller
    namespace: str
    others: tuple[str, ...] = ()
    """Further watched hub namespaces (``running(tenants=N)``): other teams."""


async def _client(state: FleetState, name: str) -> KubeClient:
    kubeconfig = yaml.safe_load(Path(state.cluster(name).kubeconfig).read_text())
    return await KubeClient.from_kubeconfig(kubeconfig, name=name)


@contextlib.asynccontextmanager
async def running(dev_fleet: FleetState, *, rules: Rules | None = None,
                  catalog: Catalog | None = None, tenants: int = 0,
                  changes: dict[str, Any] | Callable[[str], dict[str, Any]] | None = None,
                  aliases: dict[str, str] | None = None,
                  create_namespaces: bool = True, namespace: str | None = None,
                  hub_kubeconfig: dict[str, Any] | None = None,
                  kubeconfigs: dict[str, str] | None = None,
                  topology_levels: tuple[TopologyLevel, ...] = (),
                  gangs: dict[str, str] | None = None,
                  queueing: dict[str, Queueing] | None = None) -> AsyncIterator[Harness]:
    """A controller (own hub id) watching one fresh hub namespace (plus ``tenants`` more),
    with ``changes`` to its ControlSettings (or a function of the namespace giving them,
    for settings that name it), stopped on exit.

    ``aliases`` registers more members under other names (alias -> fleet cluster name):
    the same cluster twice, as an operator's mistake would. ``create_namespaces`` is on:
    the test namespaces exist on the hub only. ``namespace``: watch that hub namespace
    (created when missing) instead of a fresh one. The controller reaches the hub as
    ``hub_kubeconfig`` (default: the admin; e.g. a token of the shipped RBAC) and a member
    through ``kubeconfigs[name]`` (default: its admin kubeconfig); the harness's own
    clients stay the admin ones. ``topology_levels``: the fleet-wide topology levels
    (``fleet.topologyLevels``). ``gangs`` sets a member's gang mechanism (name ->
    ``gangScheduling``; default auto), ``queueing`` how it queues (name -> ``queueing``;
    default auto)."""
    namespace = namespace or f"ctl-{uuid.uuid4().hex[:8]}"
    others = tuple(f"{namespace}-t{i}" for i in range(tenants))
    hub = await _client(dev_fleet, "hub")
    members = {name: await _client(dev_fleet, name) for name in ("member-1", "member-2")}
    for name in (namespace, *others):
        with contextlib.suppress(Conflict):
            await hub.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    catalog = catalog or Catalog.builtin()
    paths = {n: dev_fleet.cluster(n).kubeconfig for n in members} | (kubeconfigs or {})
    statics = tuple(StaticMember(name=n, kubeconfig=paths[n],
                                 gang_scheduling=(gangs or {}).get(n, "auto"),
                                 queueing=(queueing or {}).get(n, Queueing()))
                    for n in members) + tuple(
        StaticMember(name=alias, kubeconfig=dev_fleet.cluster(n).kubeconfig)
        for alias, n in (aliases or {}).items())
    fleet = LiveFleet(Fleet(hub=None, settings=FleetSettings(
        static_members=statics, watch_member_clusters=False, probe_interval_s=1.0,
        unreachable_after_s=2.0, reconnect_max_s=2.0, discovery_interval_s=1.0,
        topology_levels=topology_levels),
        kinds=[d.gvk for d in catalog.definitions]))
    settings = ControlSettings(hub_id=f"{HUB_ID}-{namespace}",
                               namespaces=(namespace, *others),
                               create_namespaces=create_namespaces,
                               sweep_interval_s=3600, rules=rules or Rules(),
                               leader=LeaderSettings(enabled=False),
                               server=ServerSettings(port=0),
                               **(changes(namespace) if callable(changes) else changes or {}))
    own_hub = hub if hub_kubeconfig is None else await KubeClient.from_kubeconfig(
        hub_kubeconfig, name="hub (controller)")
    controller = Controller(settings=settings, catalog=catalog, hub=own_hub, fleet=fleet)
    stop = asyncio.Event()
    await fleet.start()
    task = asyncio.create_task(controller.run(stop))
    await eventually(_ready(controller), what="the controller to sync")
    try:
        yield Harness(hub=hub, members=members, controller=controller, namespace=namespace,
                      others=others)
    finally:
        stop.set()
        try:
            await task  # a controller that failed to stop fails the test, after the clean-up
        finally:
            await asyncio.wait_for(fleet.stop(), 10)
            # Its Dispatches hold reservations that other suites' live views would count.
            for name in (namespace, *others):
                with contextlib.suppress(KubeError):
                    await hub.request("DELETE", DISPATCHES.collection(name))
            for client in {hub, own_hub, *members.values()}:
                await client.close()


def _ready(controller: Controller) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return controller.ready()
    return check


async def eventually(check: Callable[[], Awaitable[Any]], *, what: str,
                     within: float = TIMEOUT_S) -> Any:
    """Poll ``check`` until it returns something truthy (fails after ``within`` s)."""
    deadline = asyncio.get_running_loop().time() + within
    while True:
        value = await check()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def get_or_none(client: KubeClient, path: str) -> Any:
    try:
        return await client.request("GET", path)
    except NotFound:
        return None


def kubectl(state: FleetState, *args: str, cluster: str = "hub", stdin: str | None = None,
            check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the fleet's own kubectl against ``cluster`` (as a user would); with ``check``,
    a failure fails the test with kubectl's stderr."""
    from dispatcher.devfleet.binaries import ensure_binaries
    cmd = [str(ensure_binaries().kubectl), "--kubeconfig", state.cluster(cluster).kubeconfig,
           *args]
    done = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=60,
                          check=False)
    if check and done.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)}: {done.stderr.strip()}")
    return done
