"""Failover on the real fleet with ``failover.policy: always``: only unfinished work moves,
and the hub accepts every status of the new copy.

Short Jobs complete on a member, then a long Job runs there; the member is stopped (its
apiserver, controllers, scheduler, kwok and operators). After ``memberLostAfter`` the long
Job is placed on the other member, its new copy runs and completes, and the hub Job's
status follows it through the hub apiserver's Job status rules (counters never decrease,
``startTime`` never changes on a running Job): no ``StatusMirrored=False``, and
``kubectl wait --for=condition=Complete`` succeeds. The completed Jobs are not run again.

The fleet is of mixed minors (hub and member-2 on 1.37, member-1 on 1.35), and the move
goes from the new minor to the old one: a local Job on member-1 holds its H100s first, so
most-free puts the Jobs on member-2, and member-2 is the one stopped.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import DISPATCHES

from .conftest import ControllerProcess, _controller
from .conftest import eventually as shared_eventually
from .test_real_fleet import clients, copies, job, kubectl, pod_spec, start

pytestmark = pytest.mark.e2e
__all__ = ["clients"]  # the fixture, shared with test_real_fleet

eventually = functools.partial(shared_eventually, within=120.0, interval=0.3)
LOST_AFTER_S = 3


@pytest.fixture
def failover_controller(real_fleet: FleetState, tmp_path: Path, request: pytest.FixtureRequest
                        ) -> Iterator[ControllerProcess]:
    def extra(_: str) -> dict[str, Any]:
        return {"failover": {"policy": "always", "memberLostAfter": LOST_AFTER_S,
                             "maxAttempts": 3}}
    yield from _controller(real_fleet, tmp_path, request, extra=extra)


async def record(hub: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = await hub.request("GET", DISPATCHES.item(name, namespace))
    return body


async def test_a_running_job_moves_finished_ones_stay_and_the_hub_takes_each_status(
        real_fleet: FleetState, failover_controller: ControllerProcess,
        clients: dict[str, KubeClient]) -> None:
    filler_ns = await _fill_member_1(clients["member-1"])
    try:
        await _fail_over(real_fleet, failover_controller, clients)
    finally:
        await clients["member-1"].request("DELETE", f"/api/v1/namespaces/{filler_ns}")


async def _fill_member_1(member: KubeClient) -> str:
    """A member-1 user's own Job on both H100 nodes (16 GPUs, for 10 minutes), bound before
    the hub's Jobs are placed: member-2 (16 A100s free) is then the most free."""
    namespace = f"filler-{uuid.uuid4().hex[:6]}"
    await member.request("POST", "/api/v1/namespaces", body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    filler = job("filler", pods=2, gpus=8, run_s=600)
    filler["spec"]["template"]["spec"] = pod_spec(8, "NVIDIA-H100-80GB-HBM3")
    await member.request("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", body=filler)

    async def bound() -> bool:
        pods = (await member.request("GET", f"/api/v1/namespaces/{namespace}/pods"))["items"]
        return len([p for p in pods if p["spec"].get("nodeName")]) == 2

    await eventually(bound, what="member-1's own Job on both H100 nodes")
    return namespace


async def _fail_over(real_fleet: FleetState, failover_controller: ControllerProcess,
                     clients: dict[str, KubeClient]) -> None:
    hub = clients["hub"]
    ns, hub_id = failover_controller.namespace, failover_controller.hub_id
    kubectl(real_fleet, "create", "namespace", ns)
    await start(failover_controller)
    short = [job(f"done-{i}", pods=1, gpus=1, run_s=1) for i in range(3)]
    await asyncio.to_thread(kubectl, real_fleet, "create", "-n", ns, "-f", "-",
                            stdin=yaml.safe_dump_all(short))
    for body in short:
        await asyncio.to_thread(kubectl, real_fleet, "wait", "-n", ns,
                                "--for=condition=Complete", f"job/{body['metadata']['name']}",
                                "--timeout=120s", timeout=130)
    await asyncio.to_thread(kubectl, real_fleet, "create", "-n", ns, "-f", "-",
                            stdin=yaml.safe_dump(job("long", pods=1, gpus=1, run_s=40)))

    async def long_running() -> str | None:
        status = (await record(hub, ns, "job-long")).get("status") or {}
        return (status.get("decision") or {}).get("cluster") \
            if status.get("genericStatus") == "running" else None

    lost = await eventually(long_running, what="the long Job running")
    assert lost == "member-2", lost  # the 1.37 member: the move goes to 1.35
    first = (await hub.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/long"))["status"]
    assert first.get("startTime") and first.get("active") == 1
    done_there = [b["metadata"]["name"] for b in short
                  if (await record(hub, ns, f"job-{b['metadata']['name']}"))
                  ["status"]["decision"]["cluster"] == lost]
    assert done_there, "most-free put no finished Job on the member that is stopped"

    planes = ControlPlanes(root=Path(real_fleet.root), binaries=ensure_binaries(members=True))
    await asyncio.to_thread(planes.stop_cluster, lost)
    try:
        async def moved() -> str | None:
            status = (await record(hub, ns, "job-long")).get("status") or {}
            cluster = (status.get("decision") or {}).get("cluster")
            return cluster if cluster not in (None, lost) else None

        other = await eventually(moved, what="the long Job placed on the other member")
        assert other == "member-1", other
        await asyncio.to_thread(kubectl, real_fleet, "wait", "-n", ns,
                                "--for=condition=Complete", "job/long", "--timeout=150s",
                                timeout=160)
        final = (await hub.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/long"))
        assert final["status"]["startTime"] == first["startTime"]  # the first copy's
        assert final["status"]["succeeded"] == 1
        long_record = (await record(hub, ns, "job-long"))["status"]
        assert long_record["decision"]["cluster"] == other
        assert long_record["decision"]["attempt"] == 2
        refused = [c for c in long_record.get("conditions") or ()
                   if c["type"] == "StatusMirrored" and c["status"] == "False"]
        assert refused == [], refused
        for name in done_there:  # finished before the loss: never placed again
            status = (await record(hub, ns, f"job-{name}"))["status"]
            assert status["decision"]["cluster"] == lost, status
            assert status["decision"]["attempt"] == 1 and status["genericStatus"] == "completed"
    finally:
        await asyncio.to_thread(planes.start_cluster, lost)
    # the member is back: its stale copy of the long Job is swept; one copy is left
    async def one_copy() -> bool:
        found = [c for c in await copies(clients, ns, hub_id) if c[1] == "long"]
        return found == [("Job", "long", other)]
    await eventually(one_copy, what="the stale copy removed from the returned member")
