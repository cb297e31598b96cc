"""Real members: kube-controller-manager, kube-scheduler and kwok behave like a real cluster.

Covers, on the ``real_fleet`` (hub + the members of tests/integration/fleet.yaml, each member
with its own controller-manager, scheduler and kwok): a GPU Job's pods created by the Job
controller, bound by the scheduler to nodes of the selected GPU product only, Running, then
Succeeded with the Job Complete; a pod asking for more GPUs than any node has stays Pending
with PodScheduled=False/Unschedulable; a Deployment's ReplicaSet and Running pods, removed by
the garbage collector when the Deployment is deleted; Nodes Ready with their GPU allocatable
and a renewed Lease; a real member stopped and started again as a whole.
Not covered here: the dispatcher itself on real members (its own suites), timings.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from dispatcher.devfleet import provision
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import KWOK_NODE_ANNOTATION, ControlPlanes, is_alive
from dispatcher.fleet.fleetfile import FleetSpec, NodePool
from dispatcher.fleet.fleetfile import MemberSpec as Member
from dispatcher.kube import errors, resources, watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL, GPU_RESOURCE

Connect = Callable[[str], Coroutine[Any, Any, KubeClient]]
T = TypeVar("T")

pytestmark = pytest.mark.integration

MEMBER = "member-1"
DEADLINE_S = 60.0
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
DEPLOYMENTS = ResourceRef(group="apps", version="v1", kind="Deployment", plural="deployments",
                          namespaced=True)
REPLICASETS = ResourceRef(group="apps", version="v1", kind="ReplicaSet", plural="replicasets",
                          namespaced=True)
SERVICEACCOUNTS = ResourceRef(group="", version="v1", kind="ServiceAccount",
                              plural="serviceaccounts", namespaced=True)
NODE_LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


async def eventually(probe: Callable[[], Awaitable[T | None]], *, what: str,
                     within: float = DEADLINE_S) -> T:
    """Poll ``probe`` until it returns something other than None; fail after ``within`` s."""
    deadline = time.monotonic() + within
    last: T | None = None
    while True:
        last = await probe()
        if last is not None:
            return last
        if time.monotonic() > deadline:
            pytest.fail(f"not within {within:.0f}s: {what}")
        await asyncio.sleep(0.2)


async def new_namespace(client: KubeClient) -> str:
    """A fresh namespace, returned once the ServiceAccount controller made its ``default``
    ServiceAccount (pods are admitted only from then on)."""
    name = f"real-{uuid.uuid4().hex[:8]}"
    await client.request("POST", resources.NAMESPACES.collection(),
                         body={"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name}})

    async def default_sa() -> bool | None:
        try:
            await client.request("GET", SERVICEACCOUNTS.item("default", name))
            return True
        except errors.NotFound:
            return None

    await eventually(default_sa, what=f"ServiceAccount {name}/default")
    return name


async def pods(client: KubeClient, namespace: str, selector: str) -> list[dict[str, Any]]:
    """The pods of ``namespace`` matching the label ``selector``."""
    listed = await client.request("GET", resources.PODS.collection(namespace),
                                  query=[("labelSelector", selector)])
    items: list[dict[str, Any]] = listed["items"]
    return items


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status condition of type ``kind``, or None."""
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def container(gpus: int) -> dict[str, Any]:
    return {"name": "main", "image": "registry.invalid/train:1",
            "resources": {"limits": {GPU_RESOURCE: str(gpus)}}}


def smallest_product_pool(member: Member) -> NodePool:
    """The pool with a GPU product and the fewest nodes: a nodeSelector on its product
    leaves the scheduler a real choice to get wrong."""
    pools = [p for p in member.node_pools if p.gpu_product]
    return min(pools, key=lambda p: p.count)


async def test_gpu_job_is_scheduled_on_its_product_runs_and_completes(
        connect_real: Connect, fleet_spec: FleetSpec) -> None:
    """Job (2 pods x 1 GPU, nodeSelector on a product) -> pods bound to that product's nodes
    by the scheduler -> Running (kwok) -> Succeeded -> Job Complete."""
    member = await connect_real(MEMBER)
    pool = smallest_product_pool(fleet_spec.member(MEMBER))
    product_nodes = {f"{MEMBER}-{pool.name}-{i}" for i in range(pool.count)}
    namespace = await new_namespace(member)
    job = {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
        "spec": {
            "parallelism": 2, "completions": 2, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "8s"}},
                "spec": {"restartPolicy": "Never",
                         "nodeSelector": {GPU_PRODUCT_LABEL: pool.gpu_product},
                         "containers": [container(1)]}},
        },
    }
    await member.request("POST", JOBS.collection(namespace), body=job)
    selector = "batch.kubernetes.io/job-name=train"
    seen_running: set[str] = set()

    async def all_running_once() -> bool | None:
        current = await pods(member, namespace, selector)
        seen_running.update(p["metadata"]["name"] for p in current
                            if p["status"].get("phase") == "Running")
        done = {p["metadata"]["name"] for p in current
                if p["status"].get("phase") == "Succeeded"}
        assert not (done - seen_running), f"pods {done - seen_running} never seen Running"
        return True if len(current) == 2 and seen_running >= {
            p["metadata"]["name"] for p in current} else None

    await eventually(all_running_once, what="2 pods of the Job Running")

    async def succeeded() -> list[dict[str, Any]] | None:
        current = await pods(member, namespace, selector)
        phases = [p["status"].get("phase") for p in current]
        return current if phases == ["Succeeded", "Succeeded"] else None

    finished = await eventually(succeeded, what="both pods Succeeded")
    for pod in finished:
        assert pod["spec"]["nodeName"] in product_nodes, pod["spec"]["nodeName"]
        scheduled = condition(pod, "PodScheduled")
        assert scheduled is not None and scheduled["status"] == "True"
        assert pod["spec"]["serviceAccountName"] == "default"  # ServiceAccount admission on
    assert {p["metadata"]["name"] for p in finished} == seen_running

    async def complete() -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET", JOBS.item("train", namespace))
        cond = condition(current, "Complete")
        return current if cond is not None and cond["status"] == "True" else None

    done = await eventually(complete, what="Job condition Complete=True")
    assert done["status"]["succeeded"] == 2
    assert condition(done, "Failed") is None


async def test_pod_asking_more_gpus_than_any_node_stays_unschedulable(
        connect_real: Connect, fleet_spec: FleetSpec) -> None:
    """The scheduler reports PodScheduled=False/Unschedulable and never binds the pod."""
    member = await connect_real(MEMBER)
    too_many = max(p.gpus for p in fleet_spec.member(MEMBER).node_pools) + 1
    namespace = await new_namespace(member)
    await member.request("POST", resources.PODS.collection(namespace), body={
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "huge"},
        "spec": {"restartPolicy": "Never", "containers": [container(too_many)]}})

    async def unschedulable() -> dict[str, Any] | None:
        pod: dict[str, Any] = await member.request(
            "GET", resources.PODS.item("huge", namespace))
        cond = condition(pod, "PodScheduled")
        return pod if cond and cond["status"] == "False" else None

    pod = await eventually(unschedulable, what="PodScheduled=False on the pod")
    cond = condition(pod, "PodScheduled")
    assert cond is not None and cond["reason"] == "Unschedulable"
    assert GPU_RESOURCE in cond.get("message", ""), cond
    assert pod["status"]["phase"] == "Pending"
    assert not pod["spec"].get("nodeName")


async def test_deployment_runs_pods_and_its_deletion_removes_them(
        connect_real: Connect) -> None:
    """Deployment -> ReplicaSet -> 2 Running, Ready pods; deleting the Deployment lets the
    garbage collector remove the ReplicaSet and kwok finish the pods' deletion."""
    member = await connect_real(MEMBER)
    namespace = await new_namespace(member)
    labels = {"app": "serve"}
    await member.request("POST", DEPLOYMENTS.collection(namespace), body={
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "serve"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [container(1)]}}}})

    async def running() -> list[dict[str, Any]] | None:
        current = await pods(member, namespace, "app=serve")
        ready = [p for p in current if p["status"].get("phase") == "Running"
                 and (condition(p, "Ready") or {}).get("status") == "True"]
        return current if len(current) == 2 and len(ready) == 2 else None

    serving = await eventually(running, what="2 Running, Ready pods of the Deployment")
    owners = {ref["kind"] for p in serving for ref in p["metadata"]["ownerReferences"]}
    assert owners == {"ReplicaSet"}
    replicasets = (await member.request("GET", REPLICASETS.collection(namespace)))["items"]
    assert [rs["metadata"]["ownerReferences"][0]["name"] for rs in replicasets] == ["serve"]

    await member.request("DELETE", DEPLOYMENTS.item("serve", namespace),
                         body={"apiVersion": "v1", "kind": "DeleteOptions",
                               "propagationPolicy": "Background"})

    async def gone() -> bool | None:
        left = await pods(member, namespace, "app=serve")
        sets = (await member.request("GET", REPLICASETS.collection(namespace)))["items"]
        return True if not left and not sets else None

    await eventually(gone, what="ReplicaSet and pods removed after the Deployment")


@pytest.mark.parametrize("name", ["member-1", "member-2"])
async def test_nodes_are_ready_kept_alive_and_keep_their_gpus(
        connect_real: Connect, fleet_spec: FleetSpec, name: str) -> None:
    """Every Node is kwok's, Ready, free of node.kubernetes.io taints, with the pool's GPU
    allocatable and product label, and has a node Lease (its heartbeat)."""
    member = await connect_real(name)
    spec = fleet_spec.member(name)
    listed = await watch.list_objects(member, resources.NODES)
    nodes = {n["metadata"]["name"]: n for n in listed.objects}
    expected = {f"{name}-{p.name}-{i}": p for p in spec.node_pools for i in range(p.count)}
    assert set(nodes) == set(expected)
    key, value = KWOK_NODE_ANNOTATION
    for node_name, pool in expected.items():
        node = nodes[node_name]
        assert node["metadata"]["annotations"][key] == value
        ready = condition(node, "Ready")
        assert ready is not None and ready["status"] == "True", ready
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("kwok-")
        assert node["status"]["allocatable"][GPU_RESOURCE] == str(pool.gpus)
        assert node["status"]["capacity"][GPU_RESOURCE] == str(pool.gpus)
        if pool.gpu_product:
            assert node["metadata"]["labels"][GPU_PRODUCT_LABEL] == pool.gpu_product
        taints = {t["key"] for t in node["spec"].get("taints") or []}
        assert not {t for t in taints if t.startswith("node.kubernetes.io/")}, taints
        assert taints == {t.key for t in pool.taints}

    async def leases() -> set[str] | None:
        items = (await member.request("GET", NODE_LEASES))["items"]
        held = {lease["metadata"]["name"] for lease in items
                if lease["spec"].get("renewTime")}
        return held if held >= set(expected) else None

    await eventually(leases, what=f"a renewed Lease for every node of {name}")


def test_a_real_member_stops_and_starts_again_as_a_whole(tmp_path: Path) -> None:
    """stop_cluster stops the apiserver, controller-manager, scheduler, kwok and the workload
    operators; start_cluster brings them back with the same ports, and the node is Ready again."""
    solo = Member(name="solo", node_pools=(NodePool(name="gpu", count=1, gpus=2),))
    planes = ControlPlanes(root=tmp_path / "solo", binaries=ensure_binaries())
    try:
        state = planes.up(names=["solo"], real=["solo"])
        rest = state.cluster("solo").rest()
        provision.provision_member(rest, solo, real=True)
        provision.wait_nodes_ready(rest, solo, timeout=DEADLINE_S)
        before = state.cluster("solo")
        assert [p.role for p in before.processes()] == [
            "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok",
            *(op.name for op in planes.binaries.operators
              if op.runs_on(planes.binaries.minor))]

        planes.stop_cluster("solo")
        assert not any(is_alive(p) for p in before.processes())

        after = planes.start_cluster("solo")
        assert [p.argv for p in after.processes()] == [p.argv for p in before.processes()]
        saved = planes.state()
        assert saved is not None
        assert [p.pid for p in saved.cluster("solo").processes()] == [
            p.pid for p in after.processes()]
        assert planes.healthy(saved)
        provision.wait_nodes_ready(rest, solo, timeout=DEADLINE_S)
    finally:
        planes.down()
    assert not (tmp_path / "solo").exists()
