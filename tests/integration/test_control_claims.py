"""A workload at its backfill limit holds one member for its namespace, on real apiservers.

The controller runs with ``queue.backfillLimit`` 1 and two watched hub namespaces. member-1's
two H100 nodes each have a GPU taken (a bound pod: the light fleet has no kubelet), so team
a's gang of 2 x 8 H100 GPUs, which only member-1 could ever hold (member-2's H100 is
tainted), waits. One small Job of team a is placed past it (one bypass: the limit), and the
gang claims member-1 against its namespace. Checked: its Dispatch says so at once; a small
Job of team a still dispatches, to member-2 (before this, it was ``Queued`` behind the
gang); team b's Job pinned to member-1 dispatches there (a narrow claim is not theirs);
team a's Job pinned to member-1 waits with member-1 "held for" the gang. Left out: the
wide claim (``queue.claimAfter``; unit and simulator tests) and figures
(``benchmarks/peers.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from dispatcher.control.core.record import decision_of
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, NODES, PODS
from tests.builders import jobset
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_control_dispatch import JOBSETS
from tests.integration.test_pending_writes import H100, fillers_on, placed

pytestmark = pytest.mark.integration

PIN = "dispatcher.io/cluster"


async def dispatch_of(h: Harness, namespace: str, name: str) -> dict[str, Any] | None:
    found: dict[str, Any] | None = await get_or_none(
        h.hub, DISPATCHES.item(f"jobset-{name}", namespace))
    return found


async def placed_on(h: Harness, namespace: str, name: str) -> str | None:
    record = await dispatch_of(h, namespace, name)
    cluster = decision_of(record or {}).get("cluster")
    return str(cluster) if cluster else None


async def test_a_saturated_gang_holds_one_member_and_its_namespace_goes_on_elsewhere(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet, tenants=1, changes={"backfill_limit": 1}) as h:
        team_a, team_b = h.namespace, h.others[0]
        member = h.members["member-1"]
        listed = await member.request("GET", NODES.collection(), query=[
            ("labelSelector", f"nvidia.com/gpu.product={H100}")])
        nodes = sorted(n["metadata"]["name"] for n in listed["items"])
        assert len(nodes) == 2  # the integration fleet's member-1
        with contextlib.suppress(KubeError):
            await member.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": team_a}})
        try:
            await fillers_on(member, team_a, nodes, len(nodes))  # 7 free on each

            async def seen_taken() -> bool:
                snapshot = h.controller.fleet.snapshot("member-1")
                return snapshot is not None and [
                    node.free if (node := snapshot.capacity.node(n)) else None
                    for n in nodes] == [7, 7]

            await eventually(seen_taken, what="member-1's H100 nodes with 7 GPUs free")
            big = await h.hub.request("POST", JOBSETS.collection(team_a), body=jobset(
                "big", namespace=team_a, replicas=2, gpus=8, product=H100))

            async def waiting() -> dict[str, Any] | None:
                record = await dispatch_of(h, team_a, "big")
                return record if placed(record).get("reason") == "NoFeasibleMember" else None

            await eventually(waiting, what="the gang waiting, NoFeasibleMember")
            # creation times have one-second resolution, and within a second the queue
            # orders by uid: what follows must be younger than the gang
            await asyncio.sleep(1.1)
            await h.hub.request("POST", JOBSETS.collection(team_a),
                                body=jobset("small-0", namespace=team_a, gpus=1))
            await eventually(lambda: placed_on(h, team_a, "small-0"), what="small-0 placed")

            held = f"member-1 is held for it (nothing behind it in {team_a} is placed there"

            async def claimed() -> dict[str, Any] | None:
                record = await dispatch_of(h, team_a, "big")
                return record if held in placed(record).get("message", "") else None

            # the next round after the bypass (the reservation small-0 took changed the
            # fleet): the gang claims member-1, and its Dispatch says so without waiting
            # for the numbers' refresh (a claim is part of what the reason means)
            record = await eventually(claimed, what="the gang's claim on its Dispatch")
            assert placed(record)["reason"] == "NoFeasibleMember"
            assert h.controller.queue.claimed_by(big["metadata"]["uid"]) == "member-1"
            assert not h.controller.queue.claims_widely(big["metadata"]["uid"])

            await h.hub.request("POST", JOBSETS.collection(team_a),
                                body=jobset("elsewhere", namespace=team_a, gpus=1))
            await h.hub.request("POST", JOBSETS.collection(team_b), body=jobset(
                "theirs", namespace=team_b, gpus=1, annotations={PIN: "member-1"}))
            assert await eventually(lambda: placed_on(h, team_a, "elsewhere"),
                                    what="team a's next Job placed") == "member-2"
            assert await eventually(lambda: placed_on(h, team_b, "theirs"),
                                    what="team b's Job placed") == "member-1"

            await h.hub.request("POST", JOBSETS.collection(team_a), body=jobset(
                "mine", namespace=team_a, gpus=1, annotations={PIN: "member-1"}))

            async def kept_off() -> dict[str, Any] | None:
                record = await dispatch_of(h, team_a, "mine")
                return record if placed(record).get("reason") == "NoFeasibleMember" else None

            record = await eventually(kept_off, what="team a's pinned Job waiting")
            assert f"member-1: not ready: held for {team_a}/big" in placed(record)["message"]
            assert await placed_on(h, team_a, "big") is None
        finally:
            found = await member.request("GET", PODS.collection(team_a))
            for item in found.get("items", []):
                await member.request("DELETE", PODS.item(item["metadata"]["name"], team_a),
                                     query=[("gracePeriodSeconds", "0")])
