"""Live capacity through the fleet runtime, on real apiservers.

Covers: a pod bound to a GPU node lowers that node's and the cluster's free GPUs; deleting
it, or its phase turning Succeeded or Failed (status subresource), restores them; cordoned,
NotReady and NoSchedule-tainted nodes do not count as free for pods that do not tolerate
them (checked through placement on the fleet's own snapshots); the member's version and
served kinds are discovered. The member is a static member of the shared dev fleet; each
test adds its own node with a unique GPU product and deletes it at the end.
Not covered here: health and registration (test_fleet_health.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.runtime import Fleet
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.kube import errors, resources
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import GroupVersionKind
from dispatcher.placement.engine import decide
from dispatcher.placement.model import PlacementRequest
from dispatcher.workloads.demand import Demand, Gang, PodShape, Toleration

pytestmark = pytest.mark.integration

MEMBER = "member-1"
FAST = {"probe_interval_s": 0.5, "unreachable_after_s": 3.0, "request_timeout_s": 2.0,
        "reconnect_initial_s": 0.2, "reconnect_max_s": 1.0, "status_min_interval_s": 0.2}
KINDS = (GroupVersionKind.of("jobset.x-k8s.io/v1alpha2", "JobSet"),
         GroupVersionKind.of("example.invalid/v1", "Nothing"))


async def until(fleet: Fleet, check: Callable[[], bool], *, within: float = 30.0) -> None:
    """Wait (event-driven, on the fleet's change pulse) until ``check()`` holds."""
    async with asyncio.timeout(within):
        seen = fleet.version
        while not check():
            seen = await fleet.wait_changed(seen)


@pytest.fixture
async def fleet(dev_fleet: FleetState) -> AsyncIterator[Fleet]:
    settings = FleetSettings(
        static_members=(StaticMember(name=MEMBER, kubeconfig=dev_fleet.cluster(MEMBER).kubeconfig,
                                     labels={"region": "us-east"}),),
        watch_member_clusters=False, **FAST)  # type: ignore[arg-type]
    async with Fleet(hub=None, settings=settings, kinds=KINDS) as running:
        await until(running, lambda: running.health(MEMBER).ready)
        yield running


@pytest.fixture
async def test_node(fleet: Fleet) -> AsyncIterator[tuple[str, str]]:
    """(node name, GPU product) of an 8-GPU node only this test uses; deleted afterwards."""
    client = fleet.client(MEMBER)
    tag = uuid.uuid4().hex[:8]
    name, product = f"fleet-test-{tag}", f"TEST-GPU-{tag}"
    await client.request("POST", resources.NODES.collection(), body=_node(name, product))
    await until(fleet, lambda: fleet.connection(MEMBER).capacity.node(name) is not None)
    try:
        yield name, product
    finally:
        await client.request("DELETE", resources.NODES.item(name))


@pytest.fixture
async def namespace(fleet: Fleet) -> AsyncIterator[str]:
    client = fleet.client(MEMBER)
    name = f"fleet-{uuid.uuid4().hex[:8]}"
    await client.request("POST", resources.NAMESPACES.collection(),
                         body={"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name}})
    yield name
    # No namespace controller runs here: delete the pods, then the namespace.
    listed = await client.request("GET", resources.PODS.collection(name))
    for item in listed.get("items", []):
        await client.request("DELETE", resources.PODS.item(item["metadata"]["name"], name),
                             query=[("gracePeriodSeconds", "0")])
    await client.request("DELETE", resources.NAMESPACES.item(name))


def _node(name: str, product: str) -> dict[str, Any]:
    gpus = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"}
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  "nvidia.com/gpu.product": product}},
            "spec": {},
            "status": {"capacity": gpus, "allocatable": dict(gpus),
                       "conditions": [{"type": "Ready", "status": "True",
                                       "reason": "KubeletReady", "message": "test node"}]}}


def _pod(name: str, *, node: str, gpus: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{
                "name": "main", "image": "trainer",
                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def free(fleet: Fleet, node: str) -> tuple[int, int]:
    """(free GPUs on ``node``, free GPUs of the member)."""
    capacity = fleet.connection(MEMBER).capacity
    state = capacity.node(node)
    assert state is not None
    return state.free, capacity.free


async def test_version_kinds_and_labels_are_reported(fleet: Fleet) -> None:
    state = fleet.members()[MEMBER]
    assert state.kubernetes_version and state.kubernetes_version.startswith("v1.")
    assert state.served_kinds == frozenset({GroupVersionKind.of("jobset.x-k8s.io/v1alpha2",
                                                                "JobSet")})
    assert dict(state.labels) == {"region": "us-east"}
    assert state.client is not None
    snapshot = fleet.snapshots()[0]
    assert snapshot.served_kinds == state.served_kinds
    assert snapshot.ready


@pytest.mark.parametrize("ending", ["delete", "Succeeded", "Failed"])
async def test_bound_pod_holds_gpus_until_deleted_or_finished(
        fleet: Fleet, test_node: tuple[str, str], namespace: str, ending: str) -> None:
    node, _ = test_node
    client = fleet.client(MEMBER)
    node_free, member_free = free(fleet, node)
    assert node_free == 8
    await client.request("POST", resources.PODS.collection(namespace),
                         body=_pod("train-0", node=node, gpus=3))
    await until(fleet, lambda: free(fleet, node) == (5, member_free - 3))
    if ending == "delete":
        await client.request("DELETE", resources.PODS.item("train-0", namespace),
                             query=[("gracePeriodSeconds", "0")])
    else:
        await client.request("PATCH", resources.PODS.item("train-0", namespace, "status"),
                             body={"status": {"phase": ending}}, content_type=JSON_MERGE_PATCH)
    await until(fleet, lambda: free(fleet, node) == (8, member_free))


async def _patch_node(client: KubeClient, name: str, body: dict[str, Any], *,
                      status: bool = False) -> None:
    await client.request("PATCH", resources.NODES.item(name, subresource="status" if status
                                                       else ""),
                         body=body, content_type=JSON_MERGE_PATCH)


def _fits(fleet: Fleet, product: str, *, tolerate: bool = False) -> bool | None:
    """Whether one 8-GPU pod of ``product`` fits on the member, as placement decides."""
    toleration = (Toleration(key="dedicated", operator="Equal", value="test",
                             effect="NoSchedule"),) if tolerate else ()
    demand = Demand(gangs=(Gang(name="g", pods=1, min_pods=1, pod_shapes=(
        PodShape(count=1, gpus=8, gpu_product=product, tolerations=toleration),)),))
    decision = decide(fleet.snapshots(), PlacementRequest(demand=demand, exhaustive=True))
    return decision.verdict(MEMBER).feasible


async def test_cordoned_not_ready_and_tainted_nodes_are_not_free(
        fleet: Fleet, test_node: tuple[str, str]) -> None:
    node, product = test_node
    client = fleet.client(MEMBER)
    capacity = fleet.connection(MEMBER).capacity
    base = capacity.free
    assert _fits(fleet, product) is True

    await _patch_node(client, node, {"spec": {"unschedulable": True}})
    await until(fleet, lambda: capacity.free == base - 8)
    assert _fits(fleet, product) is False
    await _patch_node(client, node, {"spec": {"unschedulable": None}})
    await until(fleet, lambda: capacity.free == base)

    await _patch_node(client, node, {"status": {"conditions": [
        {"type": "Ready", "status": "False", "reason": "KubeletNotReady", "message": "t"}]}},
        status=True)
    await until(fleet, lambda: capacity.free == base - 8)
    assert _fits(fleet, product) is False
    await _patch_node(client, node, {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "t"}]}},
        status=True)
    await until(fleet, lambda: capacity.free == base)

    await _patch_node(client, node, {"spec": {"taints": [
        {"key": "dedicated", "value": "test", "effect": "NoSchedule"}]}})
    await until(fleet, lambda: (s := capacity.node(node)) is not None and bool(s.taints))
    assert _fits(fleet, product) is False
    assert _fits(fleet, product, tolerate=True) is True


async def test_client_of_unknown_member_is_an_error(fleet: Fleet) -> None:
    from dispatcher.fleet.runtime import UnknownMember

    with pytest.raises(UnknownMember):
        fleet.client("nope")
    assert fleet.client_or_none("nope") is None
    with pytest.raises(errors.NotFound):
        await fleet.client(MEMBER).request("GET", resources.NODES.item("no-such-node"))
