"""The chaos environment: its own control planes, controller replicas, and the faults.

Everything here is private to the chaos suite (its own etcd, hub and two members under one
directory), so restarting the hub or a member never disturbs the shared session fleet.
Faults are the real thing, not mocks: SIGKILL of the leading controller process, SIGTERM
and restart of a member apiserver, restart of the hub apiserver with an etcd compaction
in between (so every watch resumes from a compacted resourceVersion and gets 410 Gone), a
second replica competing for the Lease, and SIGSTOP/SIGCONT of a member apiserver (a
member that answers late, without a proxy).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import devfleet
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState, compact_etcd, free_port
from dispatcher.fleet.fleetfile import load_fleet
from dispatcher.fleet.registration import register
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError, NotFound
from dispatcher.kube.resources import LEASES
from dispatcher.shell.webhook import WEBHOOK_CONFIGURATIONS

from .replicas import Instance, Supervisor

__all__ = ["HUB_ID", "MEMBERS", "ChaosEnv", "controller_config"]

FLEET_FILE = Path(__file__).resolve().parents[1] / "integration" / "fleet.yaml"
HUB_ID = "chaos-hub"
WEBHOOK_CONFIGURATION = f"dispatcher-{HUB_ID}"
MEMBERS = ("member-1", "member-2")
LEASE = ("dispatcher-system", "dispatcher")
LONG_LEASE_S = 40.0


def controller_config(state: FleetState, *, lease_s: float = 12.0,
                      members: str = "static", webhook_port: int | None = None
                      ) -> dict[str, Any]:
    """The controller's config: short timeouts so faults resolve within a round.

    The leader gives up after ``lease_s`` - renewEvery without renewal, and failover after
    kill -9 takes up to ``lease_s``. Hub-restart rounds use ``LONG_LEASE_S``, longer than a
    hub outage on a loaded machine, so the leader rides through it and its watches resume
    from a compacted resourceVersion (410 Gone, re-list) instead of starting afresh.
    ``members``: "static" (from this file) or "membercluster" (MemberCluster objects and
    kubeconfig Secrets on the hub, as ``dispatcher clusters add`` registers them).
    ``webhook_port``: a shared hub, the controller's webhook served on that loopback port.
    """
    static = members == "static"
    shared = {} if webhook_port is None else {
        "hub": {"kubeconfig": state.cluster("hub").kubeconfig, "mode": "shared"},
        "webhook": {"address": "127.0.0.1", "port": webhook_port,
                    "url": f"https://127.0.0.1:{webhook_port}",
                    "configurationName": WEBHOOK_CONFIGURATION,
                    "secretName": f"{WEBHOOK_CONFIGURATION}-cert"}}
    return {
        "hubId": HUB_ID,
        "hub": {"kubeconfig": state.cluster("hub").kubeconfig},
        "leaderElection": {"leaseDuration": lease_s, "renewEvery": 2},
        "submit": {"createNamespaces": True},
        "failover": {"policy": "if-not-started", "memberLostAfter": 6},
        "sweep": {"interval": 3},
        "reservations": {"ttl": 120},
        "server": {"port": 0},
        "log": {"level": "info"},
        "fleet": {
            "watchMemberClusters": not static, "probeInterval": 1, "unreachableAfter": 3,
            "requestTimeout": 2, "reconnectInitial": 0.5, "reconnectMax": 2,
            "staticMembers": [{"name": m, "kubeconfig": state.cluster(m).kubeconfig}
                              for m in MEMBERS] if static else []},
        **shared,
    }


async def _client(state: FleetState, name: str) -> KubeClient:
    kubeconfig = yaml.safe_load(Path(state.cluster(name).kubeconfig).read_text())
    return await KubeClient.from_kubeconfig(kubeconfig, name=name)


@dataclass
class ChaosEnv:
    """A started chaos fleet with its controller supervisor and admin clients."""

    root: Path
    planes: ControlPlanes
    state: FleetState
    supervisor: Supervisor
    hub: KubeClient
    members: dict[str, KubeClient]
    mode: str = "static"
    """How the controller learns its members: "static" or "membercluster"."""
    real: bool = False
    shared: bool = False  # a shared hub: its own controllers run, the webhook holds workloads
    """Members run kube-scheduler, kube-controller-manager, kwok and the operators."""
    owns_fleet: bool = True
    """``close()`` stops the fleet (False: a fleet someone else started, see ``attach``)."""
    faults: Counter[str] = field(default_factory=Counter)
    hub_outages: list[float] = field(default_factory=list)
    """Seconds from kill -9 of the hub apiserver until it answered again, per restart."""

    @classmethod
    async def start(cls, root: Path, *, members: str = "static", real: bool = False
                    ) -> ChaosEnv:
        """Start the fleet (``real``: members with scheduler, controller-manager, kwok and
        operators) and one controller replica; ``members`` as in ``controller_config``."""
        root.mkdir(parents=True, exist_ok=True)
        fleet_root = root / "fleet"
        try:
            state = await asyncio.to_thread(devfleet.up, root=fleet_root,
                                            fleet=load_fleet(FLEET_FILE), real=real)
        except BaseException:
            await asyncio.to_thread(devfleet.down, root=fleet_root)
            raise
        return await cls._with_fleet(root, state, members=members, real=real, owns=True)

    @classmethod
    async def attach(cls, root: Path, state: FleetState, *, real: bool,
                     shared: bool = False) -> ChaosEnv:
        """One controller replica on a running fleet of FLEET_FILE's members that someone
        else started and stops (the test session's ``real_fleet``): ``close()`` stops the
        replicas only. Only faults that leave the fleet alone belong here (a controller
        kill: the other suites share that fleet). ``shared``: the fleet's hub is shared
        (``shared_hub_fleet``): the replicas serve the webhook that holds workloads there,
        and ``close()`` removes its configuration."""
        root.mkdir(parents=True, exist_ok=True)
        return await cls._with_fleet(root, state, members="static", real=real, owns=False,
                                     shared=shared)

    @classmethod
    async def _with_fleet(cls, root: Path, state: FleetState, *, members: str, real: bool,
                          owns: bool, shared: bool = False) -> ChaosEnv:
        spec = load_fleet(FLEET_FILE)
        planes = ControlPlanes(root=Path(state.root), binaries=ensure_binaries())
        config = root / "controller.yaml"
        port = free_port() if shared else None
        config.write_text(yaml.safe_dump(controller_config(state, members=members,
                                                           webhook_port=port)))
        (root / "controller-long-lease.yaml").write_text(yaml.safe_dump(
            controller_config(state, lease_s=LONG_LEASE_S, members=members,
                              webhook_port=port)))
        logs = root / "logs"
        logs.mkdir(exist_ok=True)
        supervisor = Supervisor(config=config, logs=logs)
        env = cls(root=root, planes=planes, state=state, supervisor=supervisor,
                  hub=await _client(state, "hub"),
                  members={m: await _client(state, m) for m in MEMBERS}, mode=members,
                  real=real, owns_fleet=owns, shared=shared)
        if members == "membercluster":
            for member in spec.members:
                kubeconfig = yaml.safe_load(Path(state.cluster(member.name).kubeconfig)
                                            .read_text())
                await register(env.hub, member=member.name, kubeconfig=kubeconfig,
                               labels=dict(member.labels), cordoned=False)
        await supervisor.start()
        return env

    async def close(self) -> None:
        await self.supervisor.stop()
        if self.shared:  # failurePolicy Fail: left behind, it would refuse every create
            with contextlib.suppress(NotFound):
                await self.hub.request("DELETE", WEBHOOK_CONFIGURATIONS.item(
                    WEBHOOK_CONFIGURATION))
        for client in (self.hub, *self.members.values()):
            await client.close()
        if self.owns_fleet:
            await asyncio.to_thread(self.planes.down)

    def secrets(self) -> dict[str, str]:
        """Credential material of the fleet that must never appear in a log or Event."""
        out = {f"{c.name} token": c.token for c in self.state.clusters}
        for cluster in self.state.clusters:
            home = Path(cluster.kubeconfig).parent
            for name in ("serving.key", "sa.key"):
                key = (home / name).read_text().strip().splitlines()
                if len(key) > 2:
                    out[f"{cluster.name} {name}"] = key[1]  # a line of the key body
        return out

    # -- leader ----------------------------------------------------------------------

    async def leader(self) -> Instance | None:
        """The replica holding the Lease right now (None between leaders)."""
        try:
            lease = await self.hub.request("GET", LEASES.item(LEASE[1], LEASE[0]),
                                           request_timeout=3)
        except (NotFound, KubeError):
            return None
        holder = str((lease.get("spec") or {}).get("holderIdentity") or "")
        parts = holder.rsplit("-", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        return self.supervisor.by_pid(int(parts[1]))

    async def wait_leading(self, *, within: float = 60.0) -> Instance:
        """Wait until a live replica holds the Lease and has synced its caches."""
        deadline = asyncio.get_running_loop().time() + within
        while True:
            inst = await self.leader()
            if inst is not None and any(line.get("event") == "controller.started"
                                        for line in inst.lines()):
                return inst
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError("no controller replica leads and is started")
            await asyncio.sleep(0.2)

    async def long_lease(self, on: bool) -> None:
        """Switch every replica to the long-lease config (or back): a rolling restart."""
        config = self.root / ("controller-long-lease.yaml" if on else "controller.yaml")
        if self.supervisor.config == config:
            return
        self.supervisor.config = config
        for inst in self.supervisor.running():
            self.supervisor.kill(inst, signal.SIGTERM)  # releases the Lease on the way out
        deadline = time.monotonic() + 20
        while self.supervisor.running() and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        await self.wait_leading()

    # -- faults ----------------------------------------------------------------------

    async def kill_leader(self) -> None:
        """kill -9 of the leading replica (any replica when none leads right now)."""
        inst = await self.leader()
        if inst is None:
            running = self.supervisor.running()
            inst = running[0] if running else None
        if inst is not None:
            self.supervisor.kill(inst)
            self.faults["controller-kill"] += 1

    async def member_outage(self, member: str, seconds: float) -> None:
        """Stop a member apiserver, wait, start it again (same port, data and tokens)."""
        self.faults["member-restart"] += 1
        await asyncio.to_thread(self.planes.stop_cluster, member)
        await asyncio.sleep(seconds)
        await asyncio.to_thread(self.planes.start_cluster, member)

    async def hub_restart(self) -> None:
        """Stop the hub apiserver, compact etcd, start the hub: watches must see 410."""
        self.faults["hub-restart"] += 1
        started = time.monotonic()
        await asyncio.to_thread(self.planes.stop_cluster, "hub")
        await asyncio.to_thread(compact_etcd, self.planes.state() or self.state)
        await asyncio.to_thread(self.planes.start_cluster, "hub")
        self.hub_outages.append(time.monotonic() - started)

    async def slow_member(self, member: str, seconds: float) -> None:
        """SIGSTOP a member apiserver for ``seconds``: connections hang, then answer late."""
        self.faults["slow-member"] += 1
        state = self.planes.state() or self.state
        pid = state.cluster(member).process.pid
        os.kill(pid, signal.SIGSTOP)
        try:
            await asyncio.sleep(seconds)
        finally:
            os.kill(pid, signal.SIGCONT)

    async def second_replica(self, seconds: float, *, kill_leader_after: float) -> None:
        """Run two replicas; kill -9 the leader while both run; back to one after."""
        self.faults["two-replicas"] += 1
        self.supervisor.desired = 2
        await asyncio.sleep(kill_leader_after)
        await self.kill_leader()
        await asyncio.sleep(max(seconds - kill_leader_after, 0.0))
        self.supervisor.desired = 1
        running = self.supervisor.running()
        leading = await self.leader()
        for inst in running:
            if len(self.supervisor.running()) <= 1:
                break
            if inst is not leading:
                self.supervisor.kill(inst, signal.SIGTERM)
