"""Gangs on Kubernetes 1.37 members, each spoken to in the API it serves (``v137_fleet``:
a 1.37 hub and two real 1.37 members with the JobSet operator built on k8s.io/api v0.36).

member-2 serves ``scheduling.k8s.io/v1beta1`` PodGroups (GenericWorkload on): the copy of
a 4-pod JobSet gang gets one PodGroup (``schedulingPolicy.gang.minCount: 4``) and its pod
templates ``spec.schedulingGroup``; with a local Job holding 2 of the node's 4 GPUs no pod
of the gang binds (1.37's GangScheduling plugin, enabled by GenericWorkload alone), and the
whole gang binds once the local Job ends. member-1 has the gate off, as 1.37 ships: it
serves no gang API, so the copy carries no gang field, no gang object is made, and the
member's status says why (``gangScheduling.note``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dispatcher.control.core.gangsched import MECHANISM_ANNOTATION
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import status as statusmod
from dispatcher.fleet.health import initial
from dispatcher.kube.resources import ResourceRef
from tests.integration.harness import eventually, get_or_none, running
from tests.integration.test_gangs_real import _all_bound, _bound, _cleanup, _contend, _held
from tests.integration.test_real_members import pods
from tests.integration.test_real_operators import JOBSETS

pytestmark = pytest.mark.integration

PODGROUPS = ResourceRef(group="scheduling.k8s.io", version="v1beta1", kind="PodGroup",
                        plural="podgroups", namespaced=True)
ON, OFF = "member-2", "member-1"


async def test_a_1_37_member_holds_a_gang_through_a_v1beta1_pod_group(
        v137_fleet: FleetState) -> None:
    async with running(v137_fleet) as h:
        member = h.members[ON]

        async def discovered() -> bool:
            snapshot = h.controller.reconciler.fleet.snapshot(ON)
            return snapshot is not None and snapshot.gang_mechanism == "podgroup-v1beta1"

        await eventually(discovered, what="member-2's v1beta1 PodGroup API discovered",
                         within=30.0)
        fleet = h.controller.fleet.fleet  # type: ignore[attr-defined]
        version = fleet.connection(ON).kubernetes_version
        assert version is not None and version.startswith("v1.37."), version
        local_ns, gang_ns, selector = await _contend(h, name="gang", cluster=ON)
        try:
            group = await member.request("GET", PODGROUPS.item("jobset-gang-gang", gang_ns))
            assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
            copy = await member.request("GET", JOBSETS.item("gang", gang_ns))
            assert copy["metadata"]["annotations"][MECHANISM_ANNOTATION] == "podgroup-v1beta1"
            assert group["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
            # JobSet v0.12.0 kept the field in its templates (its CRD schema knows it)
            assert all(r["template"]["spec"]["template"]["spec"]["schedulingGroup"] == {
                "podGroupName": "jobset-gang-gang"} for r in copy["spec"]["replicatedJobs"])

            gang = await _held(member, local_ns, gang_ns, selector)
            assert all(p["spec"]["schedulingGroup"] == {"podGroupName": "jobset-gang-gang"}
                       for p in gang)  # JobSet -> Job -> Pod carried it
            await eventually(lambda: _all_bound(member, gang_ns, selector,
                                                node=f"{ON}-l40s-0"),
                             what="the whole gang bound once the local Job finished",
                             within=90.0)

            async def scheduled() -> bool:
                current = await member.request("GET", PODGROUPS.item("jobset-gang-gang",
                                                                     gang_ns))
                return any(c.get("type") == "PodGroupInitiallyScheduled"
                           and c.get("status") == "True"
                           for c in (current.get("status") or {}).get("conditions") or ())

            # the member's scheduler, not only its apiserver, treated it as a gang
            await eventually(scheduled, what="PodGroupInitiallyScheduled=True", within=30.0)
        finally:
            await _cleanup(h, local_ns, gang_ns, cluster=ON)


async def test_a_1_37_member_with_the_gate_off_gets_no_gang_object_and_says_why(
        v137_fleet: FleetState) -> None:
    async with running(v137_fleet) as h:
        member = h.members[OFF]
        conn = h.controller.fleet.fleet.connection(OFF)  # type: ignore[attr-defined]

        async def discovered() -> bool:
            return conn.gang_discovered is not None and conn.kubernetes_version is not None

        await eventually(discovered, what="member-1's discovery", within=30.0)
        assert conn.gang_discovered == "none"
        assert await get_or_none(member, "/apis/scheduling.k8s.io/v1beta1") is None
        status = statusmod.member_status(health=initial(), capacity=None,
                                         version=conn.kubernetes_version, kinds=None,
                                         previous={}, now=datetime.now(UTC),
                                         gang=(conn.gang_mechanism, conn.gang_discovered))
        note = status["gangScheduling"]["note"]
        assert "scheduling.k8s.io/v1beta1 PodGroup" in note and "GenericWorkload" in note
        row = statusmod.row({"metadata": {"name": OFF}, "status": status}, now=datetime.now(UTC),
                            wide=True)
        assert "none (API off)" in row
        local_ns, gang_ns, selector = await _contend(h, name="loose", cluster=OFF)
        try:
            copy = await member.request("GET", JOBSETS.item("loose", gang_ns))
            assert MECHANISM_ANNOTATION not in copy["metadata"]["annotations"]
            assert all("schedulingGroup" not in r["template"]["spec"]["template"]["spec"]
                       for r in copy["spec"]["replicatedJobs"])

            async def half_bound() -> bool:  # what a gang API would have prevented
                if not _bound(await pods(member, local_ns, "job-name=local")):
                    pytest.fail("the local Job finished before the gang was split")
                items = await pods(member, gang_ns, selector)
                return len(items) == 4 and len(_bound(items)) == 2

            await eventually(half_bound, what="2 of the gang's 4 pods bound, 2 Pending",
                             within=25.0)
        finally:
            await _cleanup(h, local_ns, gang_ns, cluster=OFF)
