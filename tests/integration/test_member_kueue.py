"""Members that run their own Kueue (the ``--member-kueue`` profile): quota, not free nodes,
decides where a workload can start now.

Each member runs Kueue v0.17.0 with ``manageJobsWithoutQueueName: true``. Each test gives
its namespace a ClusterQueue of its own on each member (the flavors are the fleet file's)
and a LocalQueue ``default`` there, as a platform team would, so tests never share quota:

- member-1 has the most free GPUs on its nodes (40) but its ClusterQueue only ``quota_1``
  GPUs; member-2 (32 on nodes: 16 on 4-GPU A100 nodes, 16 on tainted H100 nodes) has 16
  A100 GPUs of quota, so the tests' pods ask for 4 GPUs;
- a copy lands in the namespace's default LocalQueue (Kueue's defaulting: the copy carries
  no queue label) and is admitted there, and the quota it reserves is read back by watch.

The controller reaches each member as installed: the identity of ``deploy/member`` (its
ClusterRole reads the queues and Workloads), bound in the test's namespace only.
"""

from __future__ import annotations

import re
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import minting
from dispatcher.fleet.queueing import KUEUE, QUEUE_LABEL
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from tests.builders import job, jobset
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_real_operators import JOBSETS

pytestmark = pytest.mark.integration

KUEUE_API = "/apis/kueue.x-k8s.io/v1beta2"
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)


def _cluster_queue(name: str, flavors: dict[str, int], **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": name},
            "spec": {**spec, "namespaceSelector": {}, "resourceGroups": [{
                "coveredResources": ["nvidia.com/gpu"],
                "flavors": [{"name": f, "resources": [{"name": "nvidia.com/gpu",
                                                       "nominalQuota": q}]}
                            for f, q in flavors.items()]}]}}


async def _queues(client: KubeClient, namespace: str, flavors: dict[str, int],
                  **spec: Any) -> None:
    """The namespace's own ClusterQueue (named after it, ``spec`` added) and LocalQueue
    ``default`` (the namespace exists: the member identity was installed there)."""
    await client.request("POST", f"{KUEUE_API}/clusterqueues",
                         body=_cluster_queue(namespace, flavors, **spec))
    await client.request("POST", f"{KUEUE_API}/namespaces/{namespace}/localqueues", body={
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
        "metadata": {"name": "default", "namespace": namespace},
        "spec": {"clusterQueue": namespace}})

    async def active() -> bool:
        cq = await client.request("GET", f"{KUEUE_API}/clusterqueues/{namespace}")
        return any(c.get("type") == "Active" and c.get("status") == "True"
                   for c in (cq.get("status") or {}).get("conditions") or ())
    await eventually(active, what=f"ClusterQueue {namespace} Active")


async def _identity(fleet: FleetState, member: str, namespace: str, home: Path) -> str:
    """The member identity of ``deploy/member`` installed for ``namespace`` (as
    ``dispatcher clusters add --create-identity`` does): its kubeconfig's path."""
    admin = yaml.safe_load(Path(fleet.cluster(member).kubeconfig).read_text())
    minted = await minting.create_identity(admin, namespaces=[namespace],
                                           create_namespaces=True, token_source="auto",
                                           secret_wait_s=0.5, expiration_s=3600)
    path = home / f"{member}.kubeconfig"
    path.write_text(yaml.safe_dump(minted.kubeconfig))
    return str(path)


@asynccontextmanager
async def quota(member_kueue_fleet: FleetState, *, quota_1: int, quota_2: int = 16,
                **spec_1: Any) -> AsyncIterator[Harness]:
    """A controller bound by the shipped member RBAC, with the test's queues on both
    members (removed afterwards); ``spec_1``: more of member-1's ClusterQueue spec."""
    namespace = f"ctl-{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory() as home:
        paths = {m: await _identity(member_kueue_fleet, m, namespace, Path(home))
                 for m in ("member-1", "member-2")}
        async with running(member_kueue_fleet, namespace=namespace, kubeconfigs=paths) as h:
            await _queues(h.members["member-1"], h.namespace, {"h100": quota_1, "l40s": 0},
                          **spec_1)
            await _queues(h.members["member-2"], h.namespace,
                          {"a100": quota_2, "h100-research": 0})
            for member in h.members:  # the controller has read them (its watches)
                await eventually(lambda m=member: _reserved(h, m, 0),  # type: ignore[misc]
                                 what=f"the controller to read {member}'s new queues")
            try:
                yield h
            finally:
                for client in h.members.values():
                    await client.request("DELETE", f"/api/v1/namespaces/{h.namespace}")
                    await client.request("DELETE",
                                         f"{KUEUE_API}/clusterqueues/{h.namespace}")


async def _dispatch(h: Harness, name: str) -> dict[str, Any] | None:
    return await get_or_none(h.hub, DISPATCHES.item(name, h.namespace))  # type: ignore[no-any-return]


async def _placed_on(h: Harness, name: str) -> str | None:
    record = await _dispatch(h, name)
    decision = ((record or {}).get("status") or {}).get("decision") or {}
    return decision.get("cluster") or None


async def _admitted(client: KubeClient, namespace: str, owner: str) -> dict[str, Any] | None:
    """The member's Kueue Workload of the copy named ``owner``, once its quota is reserved."""
    listed = await client.request("GET", f"{KUEUE_API}/namespaces/{namespace}/workloads")
    for wl in listed.get("items") or ():
        owners = [o.get("name") for o in wl["metadata"].get("ownerReferences") or ()]
        reserved = any(c.get("type") == "QuotaReserved" and c.get("status") == "True"
                       for c in (wl.get("status") or {}).get("conditions") or ())
        if owner in owners and reserved:
            return dict(wl)
    return None


async def _reserved(h: Harness, member: str, gpus: int) -> bool:
    """The controller's view of the member's ClusterQueue shows ``gpus`` reserved."""
    snapshot = h.controller.reconciler.fleet.snapshot(member)
    if snapshot is None or snapshot.quota is None:
        return False
    cq = snapshot.quota.cluster_queues.get(h.namespace)
    return cq is not None and sum(f.reserved for f in cq.flavors) == gpus \
        and (h.namespace, "default") in snapshot.quota.local_queues


async def test_a_member_whose_quota_is_taken_is_passed_over_for_one_with_room(
        member_kueue_fleet: FleetState) -> None:
    async with quota(member_kueue_fleet, quota_1=8) as h:
        snapshot = h.controller.reconciler.fleet.snapshot("member-1")
        assert snapshot is not None and snapshot.queueing.system == KUEUE
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("first", namespace=h.namespace, replicas=2, gpus=4))
        assert await eventually(lambda: _placed_on(h, "jobset-first"),
                                what="the first placed") == "member-1"
        first = await eventually(lambda: _admitted(h.members["member-1"], h.namespace,
                                                   "first"), what="member-1's Kueue to admit")
        assert first["status"]["admission"]["clusterQueue"] == h.namespace
        await eventually(lambda: _reserved(h, "member-1", 8),
                         what="the controller to read member-1's quota as taken")
        # member-1's nodes still have 32 free GPUs, more than member-2's: by nodes alone
        # the second would go there too, and wait for quota behind the first
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("second", namespace=h.namespace, replicas=2, gpus=4))
        assert await eventually(lambda: _placed_on(h, "jobset-second"),
                                what="the second placed") == "member-2"
        record = await _dispatch(h, "jobset-second")
        assert record is not None
        summary = record["status"]["decision"]["summary"]
        assert re.search(f"not by quota: member-1: ClusterQueue {h.namespace} \\(LocalQueue "
                         f"{h.namespace}/default\\): 8 of 8 nvidia.com/gpu reserved, 0 free by "
                         r"quota, 8 asked; \d+ free on nodes", summary), summary
        await eventually(lambda: _admitted(h.members["member-2"], h.namespace, "second"),
                         what="member-2's Kueue to admit the second at once")
        copy = await get_or_none(h.members["member-2"], JOBSETS.item("second", h.namespace))
        assert copy is not None and copy["metadata"]["labels"][QUEUE_LABEL] == "default"


async def test_with_no_quota_left_anywhere_it_waits_and_says_both_numbers(
        member_kueue_fleet: FleetState) -> None:
    async with quota(member_kueue_fleet, quota_1=0) as h:
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=job("big", namespace=h.namespace, pods=3, gpus=8))

        async def pending_message() -> str | None:
            record = await _dispatch(h, "job-big")
            conditions = ((record or {}).get("status") or {}).get("conditions") or ()
            placed = next((c for c in conditions if c.get("type") == "Placed"), None)
            return str(placed.get("message")) if placed and "quota" in str(
                placed.get("message")) else None

        message = await eventually(pending_message, what="the Pending reason")
        # the nodes' numbers are whatever the other tests' pods left (they run 10 minutes)
        queue = f"ClusterQueue {h.namespace} (LocalQueue {h.namespace}/default)"
        assert re.search(f"member-1: {re.escape(queue)}: 0 of 0 nvidia.com/gpu reserved, 0 "
                         r"free by quota, 24 asked; \d+ free on nodes", message), message
        assert re.search(f"member-2: {re.escape(queue)}: 0 of 16 nvidia.com/gpu reserved, 16 "
                         r"free by quota, 24 asked; \d+ free on nodes", message), message
        for member in h.members.values():
            assert await get_or_none(member, JOBS.item("big", h.namespace)) is None


async def test_a_plain_job_is_queued_and_admitted_on_its_member(
        member_kueue_fleet: FleetState) -> None:
    async with quota(member_kueue_fleet, quota_1=16) as h:
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=job("train", namespace=h.namespace, pods=2, gpus=4))
        member = await eventually(lambda: _placed_on(h, "job-train"), what="placed")
        workload = await eventually(lambda: _admitted(h.members[member], h.namespace,
                                                      "train"), what="admitted")
        assert workload["spec"]["queueName"] == "default"
        copy = await get_or_none(h.members[member], JOBS.item("train", h.namespace))
        assert copy is not None and copy["metadata"]["labels"][QUEUE_LABEL] == "default"

        async def unsuspended() -> bool:
            got = await get_or_none(h.members[member], JOBS.item("train", h.namespace))
            return got is not None and got["spec"].get("suspend") is False
        await eventually(unsuspended, what="Kueue to start the copy")


async def test_a_copy_the_members_kueue_preempts_moves_to_a_member_where_it_runs_once(
        member_kueue_fleet: FleetState) -> None:
    async with quota(member_kueue_fleet, quota_1=8, quota_2=0,
                     preemption={"withinClusterQueue": "LowerPriority"}) as h:
        member_1, member_2 = h.members["member-1"], h.members["member-2"]
        high = f"high-{h.namespace}"
        await member_1.request("POST", f"{KUEUE_API}/workloadpriorityclasses", body={
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass",
            "metadata": {"name": high}, "value": 1000})
        try:
            await h.hub.request("POST", JOBSETS.collection(h.namespace),
                                body=jobset("victim", namespace=h.namespace, replicas=2,
                                            gpus=4))
            assert await eventually(lambda: _placed_on(h, "jobset-victim"),
                                    what="placed") == "member-1"
            await eventually(lambda: _admitted(member_1, h.namespace, "victim"),
                             what="member-1's Kueue to admit the copy")
            # member-2's queue gets room (it had none, so the copy went to member-1)
            path = f"{KUEUE_API}/clusterqueues/{h.namespace}"
            cq = await member_2.request("GET", path)
            cq["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]["nominalQuota"] = 16
            await member_2.request("PUT", path, body=cq)
            # the member's own team starts a higher-priority job in the same queue
            local = job("urgent", namespace=h.namespace, gpus=8)
            local["metadata"]["labels"] = {"kueue.x-k8s.io/priority-class": high}
            await member_1.request("POST", JOBS.collection(h.namespace), body=local)

            async def moved() -> str | None:
                record = await _dispatch(h, "jobset-victim")
                status = (record or {}).get("status") or {}
                if "member-1" not in (status.get("excluded") or ()):
                    return None
                return (status.get("decision") or {}).get("cluster") or None
            assert await eventually(moved, what="the preempted copy moved") == "member-2"
            record = await _dispatch(h, "jobset-victim")
            assert record is not None
            ended = record["status"]["attempts"][0]
            assert ended["cluster"] == "member-1"
            assert "evicted by member-1's Kueue (Preempted: InClusterQueue)" in str(ended)
            await eventually(lambda: _admitted(member_2, h.namespace, "victim"),
                             what="member-2's Kueue to admit the moved copy")
            # once: its copy on member-1 is gone, and the local job runs there
            assert await get_or_none(member_1, JOBSETS.item("victim", h.namespace)) is None
            await eventually(lambda: _admitted(member_1, h.namespace, "urgent"),
                             what="the local job admitted on member-1")

            async def condition() -> dict[str, Any] | None:
                got = await _dispatch(h, "jobset-victim")
                return next((c for c in ((got or {}).get("status") or {}).get(
                    "conditions") or () if c.get("type") == "MemberAdmitted"
                    and c.get("reason") == "Admitted"), None)
            said = await eventually(condition, what="MemberAdmitted=True on member-2")
            assert said["message"] == f"admitted by member-2's Kueue in ClusterQueue " \
                                      f"{h.namespace}"
        finally:
            await member_1.request("DELETE", f"{KUEUE_API}/workloadpriorityclasses/{high}")
