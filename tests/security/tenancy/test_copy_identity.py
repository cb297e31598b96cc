"""A copy is only ever one workload's, and one cluster is only ever one member (finding 3, 4).

On real apiservers: a JobSet whose child-Job template carries another workload's stamps
(origin, hub uid, hub object) is copied with those stamps stripped, so the victim's status
and delete never touch it; the same cluster registered twice (``member-1`` and
``member-1-again``) turns the second not Ready with reason DuplicateCluster, and the orphan
sweep never deletes a live copy through the second name (it used to delete and recreate
every copy every ~2 s).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from dispatcher.control.core.copies import stamped
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running

pytestmark = pytest.mark.integration

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)


def _job(name: str, gpus: int = 1) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [
                {"name": "c", "image": "busybox",
                 "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}}}}


async def _copy(h: Harness, ref: ResourceRef, name: str) -> tuple[str, Any] | None:
    for member, client in h.members.items():
        obj = await get_or_none(client, ref.item(name, h.namespace))
        if obj is not None:
            return member, obj
    return None


@pytest.fixture(scope="module")
async def harness(dev_fleet: FleetState) -> AsyncIterator[Harness]:
    async with running(dev_fleet) as h:
        yield h


async def test_smuggled_stamps_in_a_template_never_reach_the_member(harness: Harness) -> None:
    h = harness
    victim = await h.hub.request("POST", JOBS.collection(h.namespace), body=_job("eval"))
    victim_uid = victim["metadata"]["uid"]
    await eventually(lambda: _copy(h, JOBS, "eval"), what="the victim's copy")
    stamps = {"dispatcher.io/origin": h.controller.settings.hub_id,
              "dispatcher.io/hub-uid": victim_uid}
    attacker = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "eval-attack", "namespace": h.namespace},
                "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                    "metadata": {"labels": stamps, "annotations": {
                        **stamps, "dispatcher.io/hub-object": "Job.batch/eval"}},
                    "spec": {"template": {"metadata": {"labels": stamps}, "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "busybox"}]}}}}}]}}
    await h.hub.request("POST", JOBSETS.collection(h.namespace), body=attacker)
    _, copy = await eventually(lambda: _copy(h, JOBSETS, "eval-attack"),
                               what="the attacker's copy")
    template = copy["spec"]["replicatedJobs"][0]["template"]
    assert not any(k.startswith("dispatcher.io/")
                   for k in (template["metadata"].get("labels") or {}))
    assert not any(k.startswith("dispatcher.io/")
                   for k in (template["metadata"].get("annotations") or {}))
    # what a JobSet controller would create from that template is not the victim's copy
    child = {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "eval-attack-w-0", **template["metadata"]}}
    assert stamped(child, hub_id=h.controller.settings.hub_id) is None
    # and even the raw smuggled stamps would not make a differently named Job a copy
    forged = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": "eval-attack-w-0", "labels": stamps,
        "annotations": {**stamps, "dispatcher.io/hub-object": "Job.batch/eval"}}}
    assert stamped(forged, hub_id=h.controller.settings.hub_id) is None


async def test_one_cluster_registered_twice_is_one_member(dev_fleet: FleetState) -> None:
    async with running(dev_fleet, aliases={"member-1-again": "member-1"}) as h:
        fleet = h.controller.fleet

        async def flagged() -> bool:
            health = fleet.fleet.health("member-1-again")  # type: ignore[attr-defined]
            return str(health.reason) == "DuplicateCluster" and not health.ready

        await eventually(flagged, what="member-1-again flagged as DuplicateCluster")

        async def first_name_ready() -> bool:  # it may still be listing (a loaded machine)
            return bool(fleet.fleet.health("member-1").ready)  # type: ignore[attr-defined]

        await eventually(first_name_ready, what="member-1 Ready")
        assert str(fleet.fleet.health("member-1-again").reason) == "DuplicateCluster"  # type: ignore[attr-defined]
        pinned = _job("pinned")
        pinned["metadata"]["annotations"] = {"dispatcher.io/cluster": "member-1"}
        await h.hub.request("POST", JOBS.collection(h.namespace), body=pinned)
        await eventually(lambda: _copy(h, JOBS, "pinned"), what="the copy on member-1")

        async def submitted() -> bool:
            record = await get_or_none(h.hub, DISPATCHES.item("job-pinned", h.namespace))
            return bool(record and record.get("status", {}).get("phase") == "Submitted")

        await eventually(submitted, what="the Dispatch Submitted")

        async def seen_twice() -> bool:  # both names' copy watches list the same object
            return all(any(c.obj["metadata"]["name"] == "pinned" for _, c in
                           h.controller.copies.items(m)) for m in ("member-1",
                                                                     "member-1-again"))

        await eventually(seen_twice, what="the copy seen through both names")
        for _ in range(3):
            assert await h.controller.sweep() == 0
        found = await _copy(h, JOBS, "pinned")
        assert found is not None
