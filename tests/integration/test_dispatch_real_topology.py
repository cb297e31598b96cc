"""Topology domains end to end on a real member: kube-scheduler keeps the gang in its rack.

member-2's four A100 nodes (4 GPUs each) sit in two racks of two (``example.com/rack``,
tests/integration/fleet.yaml); the controller runs with the fleet-wide level ``rack``.

- A Job of 4 pods x 2 GPUs with ``dispatcher.io/topology: rack`` is placed in one rack:
  the Dispatch records the rack, the copy's pod template requires it, and the member's
  real kube-scheduler binds every pod to a node of that rack. Without the affinity the
  scheduler's least-allocated scoring would spread the four pods over the four empty
  nodes, so a copy that lost the affinity fails the test.
- A Job of 3 pods x 4 GPUs with the same annotation fits member-2's 16 free GPUs but no
  rack (8 GPUs each): it is parked ``Unplaceable`` with the numbers (best rack 2 of 3
  pods), on the Dispatch condition and in a Pending Event, and nothing reaches a member.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.topology import TopologyLevel
from dispatcher.kube.resources import DISPATCHES, EVENTS, NODES, ResourceRef
from tests.integration.harness import eventually, get_or_none, running
from tests.integration.test_real_members import condition, container, pods

pytestmark = pytest.mark.integration

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
RACK = "example.com/rack"
A100 = "NVIDIA-A100-SXM4-80GB"
LEVELS = (TopologyLevel(name="rack", node_label=RACK),)
MEMBER = "member-2"


def job(name: str, *, pods_: int, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "annotations": {"dispatcher.io/topology": "rack"}},
            "spec": {"parallelism": pods_, "completions": pods_, "backoffLimit": 0,
                     "template": {
                         "metadata": {"annotations": {
                             "pod-complete.stage.kwok.x-k8s.io/delay": "300s"}},
                         "spec": {"restartPolicy": "Never",
                                  "nodeSelector": {"nvidia.com/gpu.product": A100},
                                  "containers": [container(gpus)]}}}}


async def test_a_gang_lands_in_one_rack_and_one_no_rack_holds_is_parked(
        real_fleet: FleetState) -> None:
    async with running(real_fleet, topology_levels=LEVELS) as h:
        member = h.members[MEMBER]
        racks = {n["metadata"]["name"]: n["metadata"]["labels"].get(RACK)
                 for n in (await member.request("GET", NODES.collection()))["items"]}
        assert sorted(v for v in racks.values() if v) == ["r1", "r1", "r2", "r2"]

        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=job("train", pods_=4, gpus=2))

        async def bound() -> list[dict[str, Any]] | None:
            found = await pods(member, h.namespace, "job-name=train")
            return found if len(found) == 4 and all(
                p["spec"].get("nodeName") for p in found) else None

        placed = await eventually(bound, what="4 pods bound on member-2", within=90.0)
        record = await h.hub.request("GET", DISPATCHES.item("job-train", h.namespace))
        decision = record["status"]["decision"]
        assert decision["cluster"] == MEMBER
        (domain,) = decision["domains"]
        assert domain["level"] == "rack" and domain["nodeLabel"] == RACK
        assert f"in rack {domain['value']}" in decision["summary"]
        assert {racks[p["spec"]["nodeName"]] for p in placed} == {domain["value"]}
        copy = await member.request("GET", JOBS.item("train", h.namespace))
        terms = copy["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert terms == [{"matchExpressions": [
            {"key": RACK, "operator": "In", "values": [domain["value"]]}]}]

        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=job("wide", pods_=3, gpus=4))

        async def parked() -> dict[str, Any] | None:
            found = await get_or_none(h.hub, DISPATCHES.item("job-wide", h.namespace))
            placed_condition = condition(found or {}, "Placed")
            return placed_condition if (placed_condition or {}).get(
                "reason") == "Unplaceable" else None

        reason = await eventually(parked, what="job wide parked Unplaceable", within=30.0)
        message = reason["message"]
        # a Job's parallel pods are independent (definitions/batch-job.yaml): the
        # annotation keeps them in one rack all the same
        assert "member-2: no rack holds pods job (3 pods, 12 GPUs): best rack r1 holds " \
               "2 of 3 pods (8 GPUs free there)" in message, message
        # 16 A100 GPUs free (and 8 tainted H100s): enough for 12, but not in one rack
        assert "then r2 2 of 3; 2 racks, 24 GPUs free on the member" in message, message
        assert f"member-1: no nodes with product {A100}" in message, message

        async def pending_event() -> dict[str, Any] | None:
            events = (await h.hub.request("GET", EVENTS.collection(h.namespace)))["items"]
            return next((e for e in events if e.get("reason") == "Pending"
                         and e.get("involvedObject", {}).get("name") == "wide"), None)

        event = await eventually(pending_event, what="the Pending Event of job wide")
        assert "no rack holds pods job (3 pods, 12 GPUs)" in event["message"]
        assert await get_or_none(member, JOBS.item("wide", h.namespace)) is None
        for name in ("train", "wide"):
            await h.hub.request("DELETE", JOBS.item(name, h.namespace),
                                body={"propagationPolicy": "Background"})
