"""Leader election on a real Lease: two replicas never lead at once, and a dead leader is
replaced once its lease lapses.

Covered: two electors racing for one Lease (exactly one wins); the loser takes over once
the winner stops renewing; a clean release hands over at
once. Left out: the controller acting on leadership loss (tests/e2e).
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import yaml

from dispatcher.control.leader import LeaderElector
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient

pytestmark = pytest.mark.integration


async def test_one_leader_then_takeover_after_the_duration(dev_fleet: FleetState) -> None:
    kubeconfig = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    async with await KubeClient.from_kubeconfig(kubeconfig, name="hub") as hub:
        name = f"lease-{uuid.uuid4().hex[:6]}"
        a, b = (LeaderElector(client=hub, namespace="dispatcher-system", name=name,
                              identity=who, lease_duration=2.0, renew_every=0.5)
                for who in ("a", "b"))
        results = await asyncio.gather(a.try_once(), b.try_once())
        assert sorted(results) == [False, True]
        leader, other = (a, b) if results[0] else (b, a)
        assert await leader.try_once()
        assert not await other.try_once()
        # The leader stops renewing (a crash): the other takes over once the lease lapses.
        await asyncio.wait_for(other.acquire(), timeout=30)
        assert not await leader.try_once()
        lease = await hub.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/"
                                         f"dispatcher-system/leases/{name}")
        assert lease["spec"]["holderIdentity"] == other.identity
        assert lease["spec"]["leaseTransitions"] == 1
        await other.release()
        assert await leader.try_once()
