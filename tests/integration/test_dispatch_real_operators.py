"""The dispatcher end to end on real members with the frameworks' own operators.

A JobSet, a PyTorchJob and an MPIJob are created on the real fleet's hub (its real CRDs,
no operator there) and pinned to one member: the controller copies each, the member's
operator defaults it (webhooks) and creates the pods, kube-scheduler binds them to nodes of
the requested GPU product, kwok runs and finishes them, and the hub shows ``running`` then
``completed`` with the statuses the operators really wrote (mirrored onto the hub object).
A LeaderWorkerSet and a RayCluster (services: they never complete) go the same way up to
``running`` (LWS ``Available``, RayCluster ``state: ready``). A RayService goes as far as
KubeRay takes it without a Ray dashboard to ask (``Ready=False, Initializing``): its
RayCluster and every pod the catalog counted. Deleting each on the hub removes the copy
and, through the member's garbage collector, its pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_real_members import MEMBER, condition, pods
from tests.integration.test_real_operators import (
    JOBSETS,
    LWS,
    MPIJOBS,
    PYTORCHJOBS,
    RAYCLUSTERS,
    gpu_pod_spec,
    product_nodes,
    ray_cluster_spec,
)

pytestmark = pytest.mark.integration

DELAY = {"pod-complete.stage.kwok.x-k8s.io/delay": "10s"}
PIN = {"dispatcher.io/cluster": MEMBER}


def jobset(product: str) -> dict[str, Any]:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "annotations": PIN},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": 2, "template": {
                "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
                    "metadata": {"annotations": DELAY}, "spec": gpu_pod_spec(product)}}}}]}}


def pytorchjob(product: str) -> dict[str, Any]:
    def replica(count: int) -> dict[str, Any]:
        spec = gpu_pod_spec(product)
        spec["containers"] = [{**spec["containers"][0], "name": "pytorch"}]
        return {"replicas": count, "restartPolicy": "Never",
                "template": {"metadata": {"annotations": DELAY}, "spec": spec}}
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
            "metadata": {"name": "train", "annotations": PIN},
            "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(1)}}}


def mpijob(product: str) -> dict[str, Any]:
    worker = gpu_pod_spec(product)
    worker["containers"] = [{**worker["containers"][0], "name": "worker"}]
    worker.pop("restartPolicy")
    return {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "train", "annotations": PIN},
            "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
                "Launcher": {"replicas": 1, "template": {
                    "metadata": {"annotations": DELAY},
                    "spec": {"containers": [{"name": "launcher", "image": "mpi:1",
                                             "command": ["mpirun", "-n", "2", "train"]}]}}},
                "Worker": {"replicas": 2, "template": {"spec": worker}}}}}


CASES = {"jobset": (JOBSETS, jobset, "jobset.sigs.k8s.io/jobset-name=train"),
         "pytorchjob": (PYTORCHJOBS, pytorchjob, "training.kubeflow.org/job-name=train"),
         "mpijob": (MPIJOBS, mpijob, "training.kubeflow.org/job-name=train")}


async def _generic(h: Harness, kind: str) -> str:
    record = await get_or_none(h.hub, DISPATCHES.item(f"{kind.lower()}-train", h.namespace))
    return str(((record or {}).get("status") or {}).get("genericStatus") or "")


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_hub_workload_runs_through_its_operator_on_a_real_member(
        real_fleet: FleetState, fleet_spec: FleetSpec, case: str) -> None:
    ref, build, selector = CASES[case]
    product, nodes = product_nodes(fleet_spec)
    async with running(real_fleet) as h:
        body = build(product)
        await h.hub.request("POST", ref.collection(h.namespace), body=body)
        member = h.members[MEMBER]

        async def seen(wanted: str) -> bool:
            return await _generic(h, body["kind"]) == wanted

        await eventually(lambda: seen("running"), what=f"{case} running on the hub",
                         within=120.0)
        bound = await pods(member, h.namespace, selector)
        gpu_pods = [p for p in bound if p["spec"].get("nodeSelector")]
        assert gpu_pods and all(p["spec"]["nodeName"] in nodes for p in gpu_pods)

        async def mirrored_completed() -> dict[str, Any] | None:
            # The operator may still write the copy's status after it finished (counts,
            # completion time): wait for the hub to hold the copy's latest words.
            if not await seen("completed"):
                return None
            hub_obj = await h.hub.request("GET", ref.item("train", h.namespace))
            copy = await member.request("GET", ref.item("train", h.namespace))
            return dict(hub_obj) if hub_obj.get("status") == copy.get("status") else None

        # the hub status is the operator's own words
        hub_obj = await eventually(mirrored_completed,
                                   what=f"{case} completed on the hub, its status the copy's",
                                   within=120.0)
        if case == "jobset":
            assert hub_obj["status"]["terminalState"] == "Completed"
        # deleting on the hub removes the copy and its pods (and frees the shared product
        # pool for the next tests: a finished MPIJob's workers may still hold GPUs)
        await _delete_everywhere(h, member, ref, selector)


async def _delete_everywhere(h: Harness, member: KubeClient, ref: ResourceRef,
                             selector: str) -> None:
    """Delete the hub object ``train``, then wait for its member copy and pods to go."""
    await h.hub.request("DELETE", ref.item("train", h.namespace))

    async def gone() -> bool:
        try:
            await member.request("GET", ref.item("train", h.namespace))
        except NotFound:
            return not await pods(member, h.namespace, selector)
        return False

    await eventually(gone, what="the copy and its pods gone", within=120.0)


def leaderworkerset(product: str) -> dict[str, Any]:
    """2 groups of a leader + 1 worker, 1 GPU each: 4 pods, the whole product pool."""
    template = {"spec": {**gpu_pod_spec(product), "restartPolicy": "Always"}}
    return {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
            "metadata": {"name": "train", "annotations": PIN},
            "spec": {"replicas": 2, "leaderWorkerTemplate": {
                "size": 2, "leaderTemplate": template, "workerTemplate": template}}}


def raycluster(product: str) -> dict[str, Any]:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": "train", "annotations": PIN},
            "spec": ray_cluster_spec(product)}


def _lws_available(status: dict[str, Any]) -> bool:
    cond = condition({"status": status}, "Available")
    return cond is not None and cond["status"] == "True" and status.get("readyReplicas") == 2


def _ray_ready(status: dict[str, Any]) -> bool:
    cond = condition({"status": status}, "HeadPodReady")
    return (status.get("state") == "ready" and status.get("readyWorkerReplicas") == 2
            and cond is not None and cond["status"] == "True")


SERVICES = {
    # kind, build, selector of its pods, selector of its GPU pods, pods, the operator's
    # words for "up"
    "leaderworkerset": (LWS, leaderworkerset, "leaderworkerset.sigs.k8s.io/name=train",
                        "leaderworkerset.sigs.k8s.io/name=train", 4, _lws_available),
    "raycluster": (RAYCLUSTERS, raycluster, "ray.io/cluster=train",
                   "ray.io/cluster=train,ray.io/node-type=worker", 3, _ray_ready),
}


@pytest.mark.parametrize("case", sorted(SERVICES))
async def test_a_hub_service_comes_up_through_its_operator_on_a_real_member(
        real_fleet: FleetState, fleet_spec: FleetSpec, case: str) -> None:
    """A LeaderWorkerSet or RayCluster on the hub: the member's webhook defaults the copy,
    the operator makes its pods, every GPU pod lands on the product's nodes, and once the
    operator calls it up (LWS Available, RayCluster ready) the hub Dispatch says
    ``running`` and the hub object's status is the copy's, word for word."""
    ref, build, selector, gpu_selector, count, up = SERVICES[case]
    product, nodes = product_nodes(fleet_spec)
    async with running(real_fleet) as h:
        body = build(product)
        await h.hub.request("POST", ref.collection(h.namespace), body=body)
        member = h.members[MEMBER]

        async def mirrored_up() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
            if await _generic(h, body["kind"]) != "running":
                return None
            hub_obj = await h.hub.request("GET", ref.item("train", h.namespace))
            copy = await member.request("GET", ref.item("train", h.namespace))
            status = copy.get("status") or {}
            if not up(status) or hub_obj.get("status") != status:
                return None
            # The operator's counts can run ahead of a pod's own phase: wait for both.
            found = await pods(member, h.namespace, selector)
            if len(found) < count or any(p["status"].get("phase") != "Running"
                                         for p in found):
                return None
            return dict(copy), found

        copy, everything = await eventually(mirrored_up,
                                            what=f"{case} up and mirrored on the hub, "
                                                 "its pods Running", within=120.0)
        if case == "leaderworkerset":  # LWS's mutating webhook defaulted the copy
            assert copy["spec"]["rolloutStrategy"]["type"] == "RollingUpdate"
        hub_uid = (await h.hub.request("GET", ref.item("train", h.namespace)))["metadata"]["uid"]
        assert copy["metadata"]["labels"][HUB_UID_LABEL] == hub_uid
        assert len(everything) == count, [p["metadata"]["name"] for p in everything]
        for pod in everything:  # through the operator, the stamped templates reach the pods
            assert pod["status"]["phase"] == "Running", pod["status"]
            assert pod["metadata"]["labels"][HUB_UID_LABEL] == hub_uid, pod["metadata"]
        gpu_pods = await pods(member, h.namespace, gpu_selector)
        assert gpu_pods and all(p["spec"]["nodeName"] in nodes for p in gpu_pods)
        await _delete_everywhere(h, member, ref, selector)


RAYSERVICES = ResourceRef(group="ray.io", version="v1", kind="RayService",
                          plural="rayservices", namespaced=True)
SERVE = "applications:\n- name: app\n  import_path: app:entrypoint\n  route_prefix: /\n"


async def test_a_hub_rayservice_gets_its_raycluster_and_the_pods_the_catalog_counted(
        real_fleet: FleetState, fleet_spec: FleetSpec) -> None:
    """RayService on the hub -> copy on the member -> KubeRay makes a RayCluster (labelled
    with the service's name) and its head and GPU workers: as many pods as the hub's
    Dispatch says the workload needs, the GPU ones on the product's nodes. Without a Ray
    dashboard to report the serve applications, KubeRay stops at Ready=False
    (Initializing), and the hub Dispatch mirrors that as ``initializing``."""
    product, nodes = product_nodes(fleet_spec)
    async with running(real_fleet) as h:
        await h.hub.request("POST", RAYSERVICES.collection(h.namespace), body={
            "apiVersion": "ray.io/v1", "kind": "RayService",
            "metadata": {"name": "train", "annotations": PIN},
            "spec": {"serveConfigV2": SERVE, "rayClusterConfig": ray_cluster_spec(product)}})
        member = h.members[MEMBER]

        async def cluster_pods() -> list[dict[str, Any]] | None:
            clusters = await member.request("GET", RAYCLUSTERS.collection(h.namespace),
                                            query=[("labelSelector",
                                                    "ray.io/originated-from-cr-name=train")])
            names = [c["metadata"]["name"] for c in clusters.get("items", [])]
            if len(names) != 1:
                return None
            found = await pods(member, h.namespace, f"ray.io/cluster={names[0]}")
            running_ = [p for p in found if p["status"].get("phase") == "Running"]
            return found if found and len(running_) == len(found) == 3 else None

        made = await eventually(cluster_pods, what="the RayService's RayCluster pods running",
                                within=120.0)
        await eventually(lambda: _initializing(h), what="the hub Dispatch initializing",
                         within=120.0)
        record = await h.hub.request("GET", DISPATCHES.item("rayservice-train", h.namespace))
        demand = record["status"]["demand"]
        assert demand["pods"] == len(made) == 3  # the catalog counted what KubeRay made
        gpu_pods = [p for p in made if p["spec"].get("nodeSelector")]
        assert demand["gpus"] == sum(
            int(c["resources"]["limits"]["nvidia.com/gpu"])
            for p in gpu_pods for c in p["spec"]["containers"]) == 2
        assert all(p["spec"]["nodeName"] in nodes for p in gpu_pods)
        cluster = made[0]["metadata"]["labels"]["ray.io/cluster"]
        await _delete_everywhere(h, member, RAYSERVICES, f"ray.io/cluster={cluster}")


async def _initializing(h: Harness) -> bool:
    hub_obj = await h.hub.request("GET", RAYSERVICES.item("train", h.namespace))
    ready = condition(hub_obj, "Ready")
    return (await _generic(h, "RayService") == "initializing" and ready is not None
            and ready["status"] == "False" and ready.get("reason") == "Initializing")


HOLD_GATE = "dispatcher.io/test-hold"


def jobset_with_pods_waiting(product: str, *, pods_each: int,
                             in_order: bool = False) -> dict[str, Any]:
    """Two replicated jobs of ``pods_each`` 1-GPU pods; the ``waiting`` pods carry a
    scheduling gate, so kube-scheduler leaves them Pending (unbound) until the test lifts
    it. Their Job is active all the same (a pod pending counts, jobset_types.go): the
    JobSet is under way. The pods run for ten minutes (kwok), longer than the test.
    ``in_order``: the JobSet controller creates ``waiting`` only once ``workers`` is ready
    (startupPolicy InOrder: two creation stages, one member gang each)."""
    def rjob(name: str, gated: bool) -> dict[str, Any]:
        spec = gpu_pod_spec(product)
        if gated:
            spec["schedulingGates"] = [{"name": HOLD_GATE}]
        return {"name": name, "replicas": 1, "template": {"spec": {
            "parallelism": pods_each, "completions": pods_each, "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "600s"}},
                "spec": spec}}}}
    spec: dict[str, Any] = {"replicatedJobs": [rjob("workers", False), rjob("waiting", True)]}
    if in_order:
        spec["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "annotations": PIN}, "spec": spec}


@pytest.mark.parametrize("gang", ["none", "workload-api"])
async def test_a_running_jobset_keeps_its_unbound_pods_gpus_reserved(
        real_fleet: FleetState, fleet_spec: FleetSpec, gang: str) -> None:
    """Issue 41: the JobSet reads ``running`` as its operator says while some of its pods
    are still unbound, and their GPUs stay reserved on the member (the next placement
    cannot count them as free): the reservation follows the pods, not the status word.
    Once they bind, the reservation is gone without any status change. Without a member
    gang mechanism (``none``): one pod per replicated job, independent. With the Workload
    API the JobSet is one gang unless its replicated jobs start in order (then one gang
    per creation stage): two pods per stage, InOrder, so ``waiting`` is created once
    ``workers`` is ready and its gang holds while its pods are gated."""
    from dispatcher.fleet.connection import MemberConnection

    product, nodes = product_nodes(fleet_spec)
    each = 1 if gang == "none" else 2
    selector = "jobset.sigs.k8s.io/jobset-name=train"
    async with running(real_fleet, gangs={MEMBER: gang}) as h:
        conn = h.controller.fleet.fleet.connection(MEMBER)  # type: ignore[attr-defined]
        assert isinstance(conn, MemberConnection)
        member = h.members[MEMBER]
        created = await h.hub.request("POST", JOBSETS.collection(h.namespace),
                                      body=jobset_with_pods_waiting(
                                          product, pods_each=each, in_order=gang != "none"))
        uid = created["metadata"]["uid"]

        async def running_with_pods_unbound() -> list[dict[str, Any]] | None:
            if await _generic(h, "JobSet") != "running":
                return None
            found: dict[str, list[dict[str, Any]]] = {}
            for p in await pods(member, h.namespace, selector):
                rjob = p["metadata"]["labels"].get("jobset.sigs.k8s.io/replicatedjob-name")
                found.setdefault(str(rjob), []).append(p)
            workers, waiting = found.get("workers", []), found.get("waiting", [])
            if len(workers) != each or not all(p["spec"].get("nodeName") for p in workers):
                return None
            held = conn.reservations.get(uid)
            if len(waiting) != each or any(p["spec"].get("nodeName") for p in waiting) \
                    or held is None or held.gpus != each:
                return None
            return waiting

        waiting = await eventually(running_with_pods_unbound, within=120.0,
                                   what="the JobSet running, its workers bound and the "
                                        "waiting pods' GPUs still reserved")
        assert conn.reservations.bound(uid) == each
        held = conn.reservations.get(uid)
        assert held is not None and held.gpus == each and {n for n, _ in held.nodes} <= nodes
        record = await get_or_none(h.hub, DISPATCHES.item("jobset-train", h.namespace))
        assert record["status"]["decision"]["reservation"] is not None  # not released
        assert record["status"]["genericStatus"] == "running"
        assert record["status"]["remote"]["gangMechanism"] == gang  # what the copy joined
        # The waiting pods may bind now: the reservation empties itself, status unchanged.
        for pod in waiting:
            await member.request(
                "PATCH", f"/api/v1/namespaces/{h.namespace}/pods/{pod['metadata']['name']}",
                body={"spec": {"schedulingGates": []}},
                content_type="application/merge-patch+json")

        async def released_by_the_pods() -> bool:
            return conn.reservations.get(uid) is None \
                and conn.reservations.bound(uid) == 2 * each

        await eventually(released_by_the_pods, what="the waiting pods bound, nothing reserved",
                         within=60.0)
        assert await _generic(h, "JobSet") == "running"
        await _delete_everywhere(h, member, JOBSETS, selector)
