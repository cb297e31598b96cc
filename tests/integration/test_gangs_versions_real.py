"""Gangs on Kubernetes 1.37 members, each spoken to in the API it serves (``v137_fleet``:
a 1.37 hub and two real 1.37 members with the JobSet operator built on k8s.io/api v0.36).

member-2 serves ``scheduling.k8s.io/v1beta1`` PodGroups (GenericWorkload on) and, with the
alpha ``CompositePodGroup`` gate, ``v1alpha3`` CompositePodGroups: the copy of a 4-pod
JobSet gang gets one PodGroup (``schedulingPolicy.gang.minCount: 4``) and its pod
templates ``spec.schedulingGroup``; with a local Job holding 2 of the node's 4 GPUs no pod
of the gang binds (1.37's GangScheduling plugin, enabled by GenericWorkload alone), and the
whole gang binds once the local Job ends. A definition whose ``podGroup`` has two
``subGroups`` (a prefill role of 1 pod, a decode role of 2) gets a CompositePodGroup over
a PodGroup per role: with 2 GPUs free, either role alone would fit, and neither binds.
member-1 has the gate off, as 1.37 ships: it serves no gang API, so the copy carries no
gang field, no gang object is made, and the member's status says why
(``gangScheduling.note``)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from dispatcher.control.core.gangsched import MECHANISM_ANNOTATION
from dispatcher.control.writer import Sent
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import minting
from dispatcher.fleet import status as statusmod
from dispatcher.fleet.health import initial
from dispatcher.kube.gangapis import COMPOSITE_V1ALPHA3 as COMPOSITE
from dispatcher.kube.resources import NAMESPACES, ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from tests.builders.disagg import DISAGG_DEFINITION, disagg_jobset
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_gangs_real import (
    L40S,
    _all_bound,
    _bound,
    _cleanup,
    _contend,
    _delay,
    _held,
    _submit,
    local_job,
)
from tests.integration.test_rbac_member import admin_kubeconfig
from tests.integration.test_real_members import JOBS, new_namespace, pods
from tests.integration.test_real_operators import JOBSETS

pytestmark = pytest.mark.integration

PODGROUPS = ResourceRef(group="scheduling.k8s.io", version="v1beta1", kind="PodGroup",
                        plural="podgroups", namespaced=True)
COMPOSITES = ResourceRef(group="scheduling.k8s.io", version="v1alpha3",
                         kind="CompositePodGroup", plural="compositepodgroups", namespaced=True)
SCHED_WORKLOADS = ResourceRef(group="scheduling.k8s.io", version="v1beta1", kind="Workload",
                              plural="workloads", namespaced=True)
ON, OFF = "member-2", "member-1"


async def _discovered(h: Harness) -> None:
    """Until the controller has discovered member-2's v1beta1 and v1alpha3 gang APIs."""
    async def found() -> bool:
        snapshot = h.controller.reconciler.fleet.snapshot(ON)
        return snapshot is not None and snapshot.gang_mechanism == COMPOSITE

    await eventually(found, what="member-2's CompositePodGroup API discovered", within=30.0)


async def test_a_1_37_member_holds_a_gang_through_a_v1beta1_pod_group(
        v137_fleet: FleetState) -> None:
    async with running(v137_fleet) as h:
        member = h.members[ON]
        await _discovered(h)
        fleet = h.controller.fleet.fleet  # type: ignore[attr-defined]
        version = fleet.connection(ON).kubernetes_version
        assert version is not None and version.startswith("v1.37."), version
        local_ns, gang_ns, selector = await _contend(h, name="gang", cluster=ON)
        try:
            group = await member.request("GET", PODGROUPS.item("jobset-gang-gang", gang_ns))
            assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
            copy = await member.request("GET", JOBSETS.item("gang", gang_ns))
            assert copy["metadata"]["annotations"][MECHANISM_ANNOTATION] == COMPOSITE
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


def _disagg_catalog() -> Catalog:
    """The built-in catalog with a tenant's JobSet definition of two roles in place of
    the built-in JobSet one."""
    (definition,) = load_text(DISAGG_DEFINITION, source="test")
    return Catalog([*(d for d in Catalog.builtin().definitions if d.name != "jobset"),
                    definition])


async def test_sub_groups_become_a_composite_pod_group_the_scheduler_holds_whole(
        v137_fleet: FleetState, tmp_path: Path) -> None:
    """The controller reaches member-2 as installed: a token of the shipped member RBAC
    (``deploy/member``), namespaced to the workload's namespace."""
    gang_ns = f"gang-{uuid.uuid4().hex[:8]}"
    minted = await minting.create_identity(admin_kubeconfig(v137_fleet, ON),
                                           namespaces=[gang_ns], create_namespaces=True,
                                           token_source="auto", secret_wait_s=0.5,
                                           expiration_s=3600)
    kubeconfig = tmp_path / "member-2.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(minted.kubeconfig))
    async with running(v137_fleet, catalog=_disagg_catalog(),
                       kubeconfigs={ON: str(kubeconfig)}) as h:
        member = h.members[ON]
        await _discovered(h)
        local_ns = await new_namespace(member)
        await member.request("POST", JOBS.collection(local_ns), body=local_job(2))

        async def local_bound() -> bool:
            return len(_bound(await pods(member, local_ns, "job-name=local"))) == 2

        await eventually(local_bound, what="the local Job's 2 pods bound", within=60.0)
        await h.hub.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": gang_ns}})
        body = disagg_jobset("llm", prefill=1, decode=2)
        for role in body["spec"]["replicatedJobs"]:
            spec = role["template"]["spec"]["template"]["spec"]
            spec["nodeSelector"] = {"nvidia.com/gpu.product": L40S}
            role["template"]["spec"]["template"]["metadata"] = {"annotations": _delay(5)}
        hub_obj = await h.hub.request("POST", JOBSETS.collection(gang_ns), body=body)
        try:
            assert await _submit(h, hub_obj, cluster=ON) is Sent.EXISTS
            copy = await member.request("GET", JOBSETS.item("llm", gang_ns))
            assert copy["metadata"]["annotations"][MECHANISM_ANNOTATION] == COMPOSITE
            root = await member.request("GET", COMPOSITES.item("jobset-llm-serve", gang_ns))
            assert root["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
            workload = await member.request("GET", SCHED_WORKLOADS.item("jobset-llm", gang_ns))
            assert [t["name"] for t in workload["spec"]["compositePodGroupTemplates"][0][
                "podGroupTemplates"]] == ["prefill", "decode"]
            for role, count in (("prefill", 1), ("decode", 2)):
                group = await member.request(
                    "GET", PODGROUPS.item(f"jobset-llm-serve-{role}", gang_ns))
                assert group["spec"]["parentCompositePodGroupName"] == "jobset-llm-serve"
                assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": count}}
            for obj in (root, workload):  # collected with the copy
                assert obj["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
            selector = "jobset.sigs.k8s.io/jobset-name=llm"
            # 2 GPUs free: prefill (1) or decode (2) alone would bind; neither does
            created = await _held(member, local_ns, gang_ns, selector, count=3)
            assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in created} == {
                "jobset-llm-serve-prefill", "jobset-llm-serve-decode"}

            async def all_bound() -> bool:
                items = await pods(member, gang_ns, selector)
                return len(items) == 3 and all(p["spec"].get("nodeName") for p in items)

            await eventually(all_bound, what="both roles bound once the local Job ended",
                             within=90.0)

            async def scheduled() -> bool:  # kube-scheduler v1.37.2 writes no composite
                for role in ("prefill", "decode"):  # condition (only documented): its children
                    current = await member.request(
                        "GET", PODGROUPS.item(f"jobset-llm-serve-{role}", gang_ns))
                    if not any(c.get("type") == "PodGroupInitiallyScheduled"
                               and c.get("status") == "True" for c in
                               (current.get("status") or {}).get("conditions") or ()):
                        return False
                return True

            await eventually(scheduled, what="both roles PodGroupInitiallyScheduled=True",
                             within=30.0)
        finally:
            await _cleanup(h, local_ns, gang_ns, cluster=ON)
