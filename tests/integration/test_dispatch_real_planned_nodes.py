"""Planned nodes on a real member: the copy carries the plan, kube-scheduler follows it.

member-2's four A100 nodes have 4 GPUs each (tests/integration/fleet.yaml). A Job of one
2-GPU pod runs there; a second one is packed (best fit) onto the node that already holds
a pod while another A100 node is empty. The default scheduler profile scores nodes by CPU
and memory, blind to GPUs: left to itself it may bind the second pod anywhere it fits,
the scattering that left pieces no 8-GPU pod could use in ``benchmarks/peers.py``. The
copy's pod template carries one preferred node-affinity term per planned node
(``control.core.topology``), checked as the real member stores it (the apiserver refuses a
node field requirement of two values: the bug this test would have caught), and the real
scheduler binds the pod to the planned node. Without the term the test fails (the copy's
affinity is missing; measured: with the term off, the scheduler happened to pick the
planned node that time, so the binding alone would not prove it).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.resources import DISPATCHES, NODES, PODS, ResourceRef
from tests.integration.harness import eventually, running
from tests.integration.test_real_members import container, pods

pytestmark = pytest.mark.integration

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
A100 = "NVIDIA-A100-SXM4-80GB"
MEMBER = "member-2"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {
                         "metadata": {"annotations": {
                             "pod-complete.stage.kwok.x-k8s.io/delay": "300s"}},
                         "spec": {"restartPolicy": "Never",
                                  "nodeSelector": {"nvidia.com/gpu.product": A100},
                                  "containers": [container(2)]}}}}


async def test_the_member_scheduler_binds_the_pod_to_the_planned_node(
        real_fleet: FleetState) -> None:
    async with running(real_fleet) as h:
        member = h.members[MEMBER]
        a100 = {n["metadata"]["name"] for n in (await member.request(
            "GET", NODES.collection(), query=[(
                "labelSelector", f"nvidia.com/gpu.product={A100}")]))["items"]}
        assert len(a100) == 4

        async def bound(name: str) -> dict[str, Any]:
            async def one() -> dict[str, Any] | None:
                found = await pods(member, h.namespace, f"job-name={name}")
                return found[0] if len(found) == 1 and found[0]["spec"].get("nodeName") \
                    else None
            pod: dict[str, Any] = await eventually(one, what=f"the pod of {name} bound",
                                                   within=90.0)
            return pod

        async def planned(name: str) -> list[dict[str, Any]]:
            record = await h.hub.request("GET", DISPATCHES.item(f"job-{name}", h.namespace))
            decision = record["status"]["decision"]
            assert decision["cluster"] == MEMBER, decision
            nodes: list[dict[str, Any]] = decision["reservation"]["nodes"]
            return nodes

        await h.hub.request("POST", JOBS.collection(h.namespace), body=job("first"))
        first = await bound("first")
        await h.hub.request("POST", JOBS.collection(h.namespace), body=job("second"))
        second = await bound("second")

        (plan,) = await planned("second")
        assert plan["gpus"] == 2
        assert second["spec"]["nodeName"] == plan["node"]
        everywhere = (await member.request("GET", PODS.collection()))["items"]
        busy = {p["spec"].get("nodeName") for p in everywhere
                if p["metadata"].get("uid") != second["metadata"]["uid"]
                and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")}
        # best fit put it beside another pod while an A100 node stood empty
        assert plan["node"] in busy, (plan, busy)
        assert a100 - busy, f"no empty A100 node left: {busy}"
        assert first["spec"]["nodeName"] == (await planned("first"))[0]["node"]

        copy = await member.request("GET", JOBS.item("second", h.namespace))
        terms = copy["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][PREFERRED]
        assert terms == [{"weight": 100, "preference": {"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [plan["node"]]}]}}]
        for name in ("first", "second"):
            await h.hub.request("DELETE", JOBS.item(name, h.namespace),
                                body={"propagationPolicy": "Background"})
