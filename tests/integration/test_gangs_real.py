"""Gangs the member cannot break, on real members (kube-scheduler with the Workload API's
GangScheduling plugin, kube-controller-manager, the JobSet operator, kwok).

Contention, made deterministic: a *local* Job submitted straight to the member takes 2 of
the 4 GPUs of its L40S node first; then the 4-pod JobSet gang (1 GPU per pod) is
submitted to that member through the controller's own submit path (the copy planned by
``CopyPlanner.submit``, sent by ``MemberWrites.create_copy``: what SUBMIT runs after a
decision), as when the dispatcher
decided while the node was still free. With the member's mechanism (discovered:
``workload-api``) no pod of the gang is bound while the local Job runs (so no GPU is held
by half a gang), and the whole gang binds once it finishes. With the member set to
``none`` the same sequence leaves the gang half bound: two pods on the node holding two
GPUs, two Pending. Bindings are read from the pods' ``spec.nodeName``.

A second test dispatches a JobSet normally: the Dispatch records the mechanism
(``status.remote.gangMechanism``), the member's Workload is owned by the copy and stamped,
and deleting the hub object removes it through the member's garbage collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import pytest

from dispatcher.commands.explain import explain_objects
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.gangsched import GANG_OF_ANNOTATION, MECHANISM_ANNOTATION
from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.control.writer import Sent
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_real_members import JOBS, MEMBER, new_namespace, pods
from tests.integration.test_real_operators import JOBSETS, gpu_pod_spec

pytestmark = pytest.mark.integration

WORKLOADS = ResourceRef(group="scheduling.k8s.io", version="v1alpha1", kind="Workload",
                        plural="workloads", namespaced=True)
L40S = "NVIDIA-L40S"  # member-1's one L40S node, 4 GPUs (tests/integration/fleet.yaml)
NODE = f"{MEMBER}-l40s-0"
LOCAL_S = 25  # how long the local Job's pods run (kwok)


def _delay(seconds: int) -> dict[str, str]:
    return {"pod-complete.stage.kwok.x-k8s.io/delay": f"{seconds}s"}


def local_job(pods_: int) -> dict[str, Any]:
    """A user's Job submitted directly to the member: ``pods_`` L40S GPUs for LOCAL_S."""
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "local"},
            "spec": {"parallelism": pods_, "completions": pods_, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": _delay(LOCAL_S)},
                                  "spec": gpu_pod_spec(L40S)}}}


def gang_jobset(name: str, *, pin: bool = False) -> dict[str, Any]:
    """One gang of 4 pods, 1 L40S GPU each: a leader Job of 1 pod, a workers Job of 3."""
    def rjob(rname: str, count: int) -> dict[str, Any]:
        return {"name": rname, "replicas": 1, "template": {"spec": {
            "parallelism": count, "completions": count, "backoffLimit": 0, "template": {
                "metadata": {"annotations": _delay(5)}, "spec": gpu_pod_spec(L40S)}}}}
    meta: dict[str, Any] = {"name": name}
    if pin:
        meta["annotations"] = {"dispatcher.io/cluster": MEMBER}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [rjob("leader", 1), rjob("workers", 3)]}}


def _bound(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in items if p["spec"].get("nodeName")
            and p["status"].get("phase") not in ("Succeeded", "Failed")]


async def _hub_namespace(hub: KubeClient) -> str:
    """A hub namespace the harness's controller does not watch (the copy is submitted by
    hand through its submit path, not by its loop)."""
    name = f"gang-{uuid.uuid4().hex[:8]}"
    await hub.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


async def _submit(h: Harness, hub_obj: dict[str, Any], *, cluster: str = MEMBER
                  ) -> Sent | Rejection:
    """SUBMIT's two steps on ``cluster``: the copy planned, then sent."""
    reconciler = h.controller.reconciler
    plan = await reconciler.planner.submit(hub_obj["metadata"]["uid"], cluster=cluster,
                                           workload=hub_obj)
    if isinstance(plan, Rejection):
        return plan
    return await reconciler.ports.members.create_copy(plan)


async def _contend(h: Harness, *, name: str, cluster: str = MEMBER) -> tuple[str, str, str]:
    """Local Job first (2 of the L40S node's 4 GPUs, bound), then the gang's copy through
    the controller's submit path; returns (local namespace, gang namespace, pod selector)."""
    member = h.members[cluster]
    local_ns = await new_namespace(member)
    await member.request("POST", JOBS.collection(local_ns), body=local_job(2))

    async def local_bound() -> bool:
        return len(_bound(await pods(member, local_ns, "job-name=local"))) == 2

    await eventually(local_bound, what="the local Job's 2 pods bound", within=60.0)
    gang_ns = await _hub_namespace(h.hub)
    hub_obj = await h.hub.request("POST", JOBSETS.collection(gang_ns), body=gang_jobset(name))
    created = await _submit(h, hub_obj, cluster=cluster)
    assert created is Sent.EXISTS, created
    return local_ns, gang_ns, f"jobset.sigs.k8s.io/jobset-name={name}"


async def _cleanup(h: Harness, local_ns: str, gang_ns: str, *, cluster: str = MEMBER) -> None:
    member = h.members[cluster]
    for client, ns in ((member, local_ns), (member, gang_ns), (h.hub, gang_ns)):
        with contextlib.suppress(NotFound):
            await client.request("DELETE", NAMESPACES.item(ns))

    async def drained() -> bool:  # the next test gets the whole L40S node
        return not _bound(await pods(member, local_ns, "")) \
            and not _bound(await pods(member, gang_ns, ""))

    await eventually(drained, what="the L40S node drained", within=120.0)


async def _held(member: KubeClient, local_ns: str, gang_ns: str, selector: str, *,
                count: int = 4) -> list[dict[str, Any]]:
    """The gang's ``count`` pods once created, after checking none binds while the local
    Job runs (sampled every 0.2 s, at least 5 times: the gang really waited next to it)."""
    async def created() -> list[dict[str, Any]] | None:
        items = await pods(member, gang_ns, selector)
        return items if len(items) == count else None

    gang: list[dict[str, Any]] = await eventually(
        created, what=f"the gang's {count} pods created", within=60.0)
    samples = 0
    while _bound(await pods(member, local_ns, "job-name=local")):
        bound = _bound(await pods(member, gang_ns, selector))
        assert not bound, f"gang pods bound while the local Job runs: {bound}"
        samples += 1
        await asyncio.sleep(0.2)
    assert samples >= 5
    return gang


async def _all_bound(member: KubeClient, namespace: str, selector: str, *,
                     node: str = NODE) -> bool:
    items = await pods(member, namespace, selector)
    return len(items) == 4 and all(p["spec"].get("nodeName") == node for p in items)


async def test_with_the_workload_api_no_pod_of_a_gang_binds_until_all_can(
        real_fleet: FleetState, fleet_spec: FleetSpec) -> None:
    async with running(real_fleet) as h:
        member = h.members[MEMBER]

        async def discovered() -> bool:
            snapshot = h.controller.reconciler.fleet.snapshot(MEMBER)
            return snapshot is not None and snapshot.gang_mechanism == "workload-api"

        await eventually(discovered, what="member-1's Workload API discovered", within=30.0)
        local_ns, gang_ns, selector = await _contend(h, name="gang")
        try:
            workload = await member.request("GET", WORKLOADS.item("jobset-gang", gang_ns))
            assert workload["spec"]["podGroups"] == [
                {"name": "gang", "policy": {"gang": {"minCount": 4}}}]
            copy = await member.request("GET", JOBSETS.item("gang", gang_ns))
            assert copy["metadata"]["annotations"][MECHANISM_ANNOTATION] == "workload-api"
            assert workload["metadata"]["ownerReferences"][0]["uid"] == \
                copy["metadata"]["uid"]

            gang = await _held(member, local_ns, gang_ns, selector)
            assert all(p["spec"]["workloadRef"] == {"name": "jobset-gang", "podGroup": "gang"}
                       for p in gang)  # JobSet -> Job -> Pod carried it
            await eventually(lambda: _all_bound(member, gang_ns, selector),
                             what="the whole gang bound once the local Job finished",
                             within=90.0)
        finally:
            await _cleanup(h, local_ns, gang_ns)


async def test_without_a_mechanism_the_member_leaves_the_gang_half_bound(
        real_fleet: FleetState, fleet_spec: FleetSpec) -> None:
    async with running(real_fleet, gangs={MEMBER: "none"}) as h:
        member = h.members[MEMBER]
        local_ns, gang_ns, selector = await _contend(h, name="loose")
        try:
            copy = await member.request("GET", JOBSETS.item("loose", gang_ns))
            assert MECHANISM_ANNOTATION not in copy["metadata"]["annotations"]
            assert await get_or_none(member, WORKLOADS.item("jobset-loose", gang_ns)) is None

            async def half_bound() -> bool:
                if not _bound(await pods(member, local_ns, "job-name=local")):
                    pytest.fail("the local Job finished before the gang was split")
                items = await pods(member, gang_ns, selector)
                bound = _bound(items)
                return len(items) == 4 and len(bound) == 2 \
                    and all(p["spec"]["nodeName"] == NODE for p in bound)

            await eventually(half_bound, what="2 of the gang's 4 pods bound, 2 Pending",
                             within=float(LOCAL_S))
            await eventually(lambda: _all_bound(member, gang_ns, selector),
                             what="the rest bound once the local Job finished", within=90.0)
        finally:
            await _cleanup(h, local_ns, gang_ns)


async def test_a_dispatched_gang_records_its_mechanism_and_its_workload_goes_with_the_copy(
        real_fleet: FleetState, fleet_spec: FleetSpec) -> None:
    async with running(real_fleet) as h:
        member = h.members[MEMBER]
        hub_obj = await h.hub.request("POST", JOBSETS.collection(h.namespace),
                                      body=gang_jobset("train", pin=True))

        async def recorded() -> dict[str, Any] | None:
            record = await get_or_none(h.hub, DISPATCHES.item("jobset-train", h.namespace))
            remote = ((record or {}).get("status") or {}).get("remote") or {}
            return remote if remote.get("gangMechanism") else None

        remote = await eventually(recorded, what="the Dispatch's gang mechanism", within=60.0)
        assert remote["gangMechanism"] == "workload-api"
        workload = await member.request("GET", WORKLOADS.item("jobset-train", h.namespace))
        labels = workload["metadata"]["labels"]
        assert labels[HUB_UID_LABEL] == hub_obj["metadata"]["uid"]
        assert labels[ORIGIN_LABEL] == h.controller.settings.hub_id
        assert workload["metadata"]["annotations"][GANG_OF_ANNOTATION] == \
            "JobSet.jobset.x-k8s.io/train"
        assert workload["metadata"]["ownerReferences"][0]["name"] == "train"
        await eventually(lambda: _all_bound(member, h.namespace,
                                            "jobset.sigs.k8s.io/jobset-name=train"),
                         what="the gang bound", within=90.0)
        await h.hub.request("DELETE", JOBSETS.item("train", h.namespace))

        async def collected() -> bool:
            return await get_or_none(member, WORKLOADS.item("jobset-train",
                                                            h.namespace)) is None

        await eventually(collected, what="the Workload collected with the copy", within=90.0)


async def test_a_copy_the_member_refuses_leaves_no_gang_object_behind(
        real_fleet: FleetState) -> None:
    """The member's JobSet webhook refuses a name whose Job names would pass 63
    characters (the hub, with no operator, stored it): the Workload created just before
    the copy is deleted with the refusal, not left unowned."""
    async with running(real_fleet) as h:
        gang_ns = await _hub_namespace(h.hub)
        name = "g" * 56
        hub_obj = await h.hub.request("POST", JOBSETS.collection(gang_ns),
                                      body=gang_jobset(name))
        refused = await _submit(h, hub_obj)
        assert isinstance(refused, Rejection) and "too long" in refused.message, refused
        member = h.members[MEMBER]
        assert await get_or_none(member, JOBSETS.item(name, gang_ns)) is None
        assert await get_or_none(member, WORKLOADS.item(f"jobset-{name}", gang_ns)) is None
        for client in (member, h.hub):
            with contextlib.suppress(NotFound):
                await client.request("DELETE", NAMESPACES.item(gang_ns))


def _differences(planned: Any, actual: Any, path: str = "") -> list[str]:
    """Where ``actual`` (the member's object) does not hold ``planned``: every planned
    field present and equal; the member may add (its defaulting, its controllers)."""
    if isinstance(planned, dict):
        if not isinstance(actual, dict):
            return [f"{path}: {actual!r} is not an object"]
        return [d for k, v in planned.items()
                for d in (_differences(v, actual[k], f"{path}.{k}") if k in actual
                          else [f"{path}.{k}: missing"])]
    if isinstance(planned, list):
        if not isinstance(actual, list) or len(actual) != len(planned):
            return [f"{path}: {actual!r} is not {planned!r}"]
        return [d for i, (p, a) in enumerate(zip(planned, actual, strict=True))
                for d in _differences(p, a, f"{path}[{i}]")]
    return [] if planned == actual else [f"{path}: {actual!r} != {planned!r}"]


async def test_explain_shows_the_copy_and_gang_objects_the_controller_creates(
        real_fleet: FleetState) -> None:
    """``dispatcher explain --show-copy`` (its report, from the members as the controller
    sees them and its settings) holds what the controller's dispatch created on the real
    member: the JobSet copy and its Workload, field for field (the member only adds)."""
    h100 = "NVIDIA-H100-80GB-HBM3"
    async with running(real_fleet) as h:
        member = h.members[MEMBER]
        body = gang_jobset("planned", pin=True)
        for rjob in body["spec"]["replicatedJobs"]:
            rjob["template"]["spec"]["template"]["spec"] = gpu_pod_spec(h100)
        await h.hub.request("POST", JOBSETS.collection(h.namespace), body=body)

        async def copy_created() -> dict[str, Any] | None:
            record = await get_or_none(h.hub, DISPATCHES.item("jobset-planned", h.namespace))
            remote = ((record or {}).get("status") or {}).get("remote") or {}
            return remote if remote.get("gangMechanism") else None

        await eventually(copy_created, what="the copy submitted", within=60.0)
        hub_obj = await h.hub.request("GET", JOBSETS.item("planned", h.namespace))
        controller = h.controller
        (report,), code = explain_objects(
            [hub_obj], members=list(controller.reconciler.fleet.snapshots()),
            catalog=controller.live.current, policy=None,
            default_policy=controller.settings.default_policy, source="hub",
            control=controller.settings, show_copy=True)
        assert code == 0, report["decision"]["summary"]
        planned = report["copy"]
        assert planned["member"] == MEMBER and planned["gangMechanism"] == "workload-api"
        copy = await member.request("GET", JOBSETS.item("planned", h.namespace))
        assert _differences(planned["object"], copy) == []
        (gang_object,) = planned["gangObjects"]
        workload = await member.request("GET", WORKLOADS.item(
            gang_object["metadata"]["name"], h.namespace))
        assert _differences(gang_object, workload) == []
        # and the comparison can fail: a field the plan holds that the member lacks
        assert _differences({**planned["object"], "extra": 1}, copy) == [".extra: missing"]
