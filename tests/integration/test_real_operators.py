"""The workload operators of the real members, and the catalog reading what they write.

On the ``real_fleet`` each member runs the operators built from ``deploy/local/<name>``
(JobSet, ...) with their webhooks registered, and the hub and members serve those operators'
real CRDs. For each operator a workload with a ``nvidia.com/gpu`` limit and a
``nvidia.com/gpu.product`` nodeSelector is created directly on a member: the operator
creates pods (through Jobs where it uses them), kube-scheduler binds them to nodes of that
product, kwok runs them, and the object's status is what the operator writes. The built-in
catalog then resolves the object: its generic status must match what the operator says.
Not covered here: the dispatcher itself on these workloads (its own suites), timings.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest

from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.kube import resources
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL
from tests.integration.test_real_members import (
    MEMBER,
    condition,
    container,
    eventually,
    new_namespace,
    pods,
    smallest_product_pool,
)

Connect = Callable[[str], Coroutine[Any, Any, KubeClient]]

pytestmark = pytest.mark.integration

WITHIN_S = 120.0
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)


@pytest.fixture
async def scratch(connect_real: Connect) -> AsyncIterator[tuple[KubeClient, str]]:
    """(MEMBER's client, a fresh namespace there), the namespace deleted afterwards and its
    pods waited out: the product pool the tests share has few GPUs, and a LeaderWorkerSet
    or RayCluster left running would keep them."""
    member = await connect_real(MEMBER)
    namespace = await new_namespace(member)
    yield member, namespace
    await member.request("DELETE", resources.NAMESPACES.item(namespace))
    for _ in range(120):
        if not await pods(member, namespace, ""):
            break
        await asyncio.sleep(0.5)


def generic_status(obj: dict[str, Any]) -> str:
    """The catalog's generic status of ``obj``."""
    return Catalog.builtin().resolve(obj).status


def product_nodes(fleet_spec: FleetSpec) -> tuple[str, set[str]]:
    """A GPU product of MEMBER and the names of its nodes."""
    pool = smallest_product_pool(fleet_spec.member(MEMBER))
    assert pool.gpu_product
    return pool.gpu_product, {f"{MEMBER}-{pool.name}-{i}" for i in range(pool.count)}


def gpu_pod_spec(product: str, gpus: int = 1) -> dict[str, Any]:
    return {"restartPolicy": "Never", "nodeSelector": {GPU_PRODUCT_LABEL: product},
            "containers": [container(gpus)]}


@pytest.mark.parametrize("cluster", ["hub", "member-1", "member-2"])
async def test_jobset_crd_is_the_real_schema_everywhere(
        connect_real: Connect, cluster: str) -> None:
    """The hub and every member serve JobSet's real CRD (a structural schema, no stand-in
    label, no conversion webhook)."""
    client = await connect_real(cluster)
    crd = await client.request("GET", f"{CRDS}/jobsets.jobset.x-k8s.io")
    assert "dispatcher.io/devfleet-standin" not in crd["metadata"].get("labels", {})
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "spec" in schema["properties"]
    assert crd["spec"].get("conversion", {}).get("strategy", "None") == "None"


async def test_jobset_operator_runs_a_gpu_jobset_to_completion(
        scratch: tuple[KubeClient, str], fleet_spec: FleetSpec) -> None:
    """JobSet (2 replicated Jobs x 2 pods x 1 GPU) without the webhook defaults -> defaulted
    by the mutating webhook -> Jobs -> pods on the product's nodes -> Running (catalog:
    running) -> Succeeded -> terminalState Completed (catalog: completed)."""
    member, namespace = scratch
    product, nodes = product_nodes(fleet_spec)
    template = {"metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "15s"}},
                "spec": gpu_pod_spec(product)}
    jobset = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "train"},
        "spec": {"replicatedJobs": [{
            "name": "workers", "replicas": 2,
            "template": {"spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                                  "template": template}}}]},
    }
    created = await member.request("POST", JOBSETS.collection(namespace), body=jobset)
    # The mutating webhook answered: defaults the controller needs are there.
    assert created["spec"]["network"]["enableDNSHostnames"] is True
    assert created["spec"]["successPolicy"]["operator"] == "All"

    async def running() -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET", JOBSETS.item("train", namespace))
        return current if generic_status(current) == "running" else None

    seen = await eventually(running, what="JobSet generic status running", within=WITHIN_S)
    # Running = as the operator counts it: a Job under way (active, ready or already done),
    # none failed. The Job controller reports each Job on its own, so the JobSet may first
    # show one of the two (CI saw active 1, ready 0); both are awaited below.
    workers = seen["status"]["replicatedJobsStatus"][0]
    under_way = max(workers.get("active", 0), workers.get("ready", 0))
    assert 1 <= under_way + workers.get("succeeded", 0) <= 2, seen["status"]
    assert workers.get("failed", 0) == 0, seen["status"]

    async def ready() -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET", JOBSETS.item("train", namespace))
        jobs = ((current.get("status") or {}).get("replicatedJobsStatus") or [{}])[0]
        return current if jobs.get("ready", 0) + jobs.get("succeeded", 0) == 2 else None

    # Then every Job's pods run on the product's nodes (or are already done).
    await eventually(ready, what="both Jobs ready", within=WITHIN_S)

    async def completed() -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET", JOBSETS.item("train", namespace))
        return current if current.get("status", {}).get("terminalState") else None

    done = await eventually(completed, what="JobSet terminalState", within=WITHIN_S)
    assert done["status"]["terminalState"] == "Completed", done["status"]
    cond = condition(done, "Completed")
    assert cond is not None and cond["status"] == "True", done["status"]
    assert generic_status(done) == "completed", done["status"]

    finished = await pods(member, namespace, "jobset.sigs.k8s.io/jobset-name=train")
    assert len(finished) == 4
    for pod in finished:
        assert pod["status"]["phase"] == "Succeeded"
        assert pod["spec"]["nodeName"] in nodes, pod["spec"]["nodeName"]


LWS = ResourceRef(group="leaderworkerset.x-k8s.io", version="v1", kind="LeaderWorkerSet",
                  plural="leaderworkersets", namespaced=True)


async def test_lws_operator_makes_a_gpu_leaderworkerset_available(
        scratch: tuple[KubeClient, str], fleet_spec: FleetSpec) -> None:
    """LeaderWorkerSet (2 groups of a leader + 1 worker, 1 GPU each) -> defaulted by the
    webhook -> leader StatefulSet + one worker StatefulSet per group -> 4 pods on the
    product's nodes, Running and Ready -> Available=True (catalog: running)."""
    member, namespace = scratch
    product, nodes = product_nodes(fleet_spec)
    template = {"spec": {**gpu_pod_spec(product), "restartPolicy": "Always"}}
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
        "metadata": {"name": "serve"},
        "spec": {"replicas": 2, "leaderWorkerTemplate": {
            "size": 2, "leaderTemplate": template, "workerTemplate": template}},
    }
    created = await member.request("POST", LWS.collection(namespace), body=lws)
    assert created["spec"]["rolloutStrategy"]["type"] == "RollingUpdate"  # webhook default

    async def available() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        current: dict[str, Any] = await member.request("GET", LWS.item("serve", namespace))
        cond = condition(current, "Available")
        if cond is None or cond["status"] != "True":
            return None
        # Available is written from the StatefulSets' counts, which can run ahead of a
        # pod's own phase: wait for both.
        found = await pods(member, namespace, "leaderworkerset.sigs.k8s.io/name=serve")
        up = [p for p in found if p["status"].get("phase") == "Running"]
        return (current, found) if len(up) == len(found) == 4 else None

    ready, serving = await eventually(available, what="LeaderWorkerSet Available=True",
                                      within=WITHIN_S)
    assert ready["status"]["readyReplicas"] == 2, ready["status"]
    assert generic_status(ready) == "running", ready["status"]
    for pod in serving:
        assert pod["spec"]["nodeName"] in nodes, pod["spec"]["nodeName"]
        # Set by LWS's pod webhook, read by its pod controller.
        assert "leaderworkerset.sigs.k8s.io/group-index" in pod["metadata"]["labels"]


RAYCLUSTERS = ResourceRef(group="ray.io", version="v1", kind="RayCluster", plural="rayclusters",
                          namespaced=True)
RAYJOBS = ResourceRef(group="ray.io", version="v1", kind="RayJob", plural="rayjobs",
                      namespaced=True)


def ray_cluster_spec(product: str) -> dict[str, Any]:
    """A head (no GPU) and a worker group of 2 pods x 1 GPU on ``product``."""
    def pod(gpus: int | None) -> dict[str, Any]:
        ray = {"name": "ray", "image": "registry.invalid/ray:2.41.0"}
        if gpus:
            ray["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        spec: dict[str, Any] = {"containers": [ray]}
        if gpus:
            spec["nodeSelector"] = {GPU_PRODUCT_LABEL: product}
        return {"spec": spec}

    return {
        "headGroupSpec": {"rayStartParams": {}, "template": pod(None)},
        "workerGroupSpecs": [{"groupName": "gpu", "replicas": 2, "minReplicas": 2,
                              "maxReplicas": 2, "rayStartParams": {}, "template": pod(1)}],
    }


async def test_kuberay_operator_makes_a_gpu_raycluster_ready(
        scratch: tuple[KubeClient, str], fleet_spec: FleetSpec) -> None:
    """RayCluster (head + 2 GPU workers) -> head and worker pods (workers on the product's
    nodes), Running and Ready -> state ready, HeadPodReady (catalog: running)."""
    member, namespace = scratch
    product, nodes = product_nodes(fleet_spec)
    await member.request("POST", RAYCLUSTERS.collection(namespace), body={
        "apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "ray"},
        "spec": ray_cluster_spec(product)})

    async def ready() -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET",
                                                       RAYCLUSTERS.item("ray", namespace))
        return current if current.get("status", {}).get("state") == "ready" else None

    done = await eventually(ready, what="RayCluster state ready", within=WITHIN_S)
    assert done["status"]["readyWorkerReplicas"] == 2, done["status"]
    cond = condition(done, "HeadPodReady")
    assert cond is not None and cond["status"] == "True", done["status"]
    assert generic_status(done) == "running", done["status"]

    workers = await pods(member, namespace, "ray.io/cluster=ray,ray.io/node-type=worker")
    assert len(workers) == 2
    for pod in workers:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"] in nodes, pod["spec"]["nodeName"]


async def test_kuberay_rayjob_gets_its_cluster_then_waits_on_the_ray_dashboard(
        scratch: tuple[KubeClient, str], fleet_spec: FleetSpec) -> None:
    """RayJob (K8sJobMode): the operator creates its RayCluster, which becomes ready on kwok
    pods, and its submitter Job, whose pod kwok completes; jobDeploymentStatus goes Running
    (catalog: running). It stops there: the operator then polls the Ray dashboard at
    ``http://<cluster>-head-svc.<ns>.svc.cluster.local:8265/api/jobs/<id>``, a name no DNS
    resolves on the dev fleet (and no fake pod serves), so ``jobStatus`` stays empty and the
    RayJob never completes here (documented limit)."""
    member, namespace = scratch
    product, _ = product_nodes(fleet_spec)
    await member.request("POST", RAYJOBS.collection(namespace), body={
        "apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "job"},
        "spec": {"entrypoint": "python -c 'print(1)'",
                 "rayClusterSpec": ray_cluster_spec(product)}})

    async def cluster_ready() -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET", RAYJOBS.item("job", namespace))
        name = current.get("status", {}).get("rayClusterName")
        if current.get("status", {}).get("jobDeploymentStatus") != "Running" or not name:
            return None
        cluster = await member.request("GET", RAYCLUSTERS.item(name, namespace))
        return current if cluster.get("status", {}).get("state") == "ready" else None

    reached = await eventually(cluster_ready, what="RayJob Running with its RayCluster ready",
                               within=WITHIN_S)
    status = reached["status"]
    assert status.get("jobStatus", "") == "", status
    assert generic_status(reached) == "running", status
    submitter = await member.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/job")
    assert submitter["spec"]["template"]["spec"]["containers"][0]["name"] == "ray-job-submitter"


PYTORCHJOBS = ResourceRef(group="kubeflow.org", version="v1", kind="PyTorchJob",
                          plural="pytorchjobs", namespaced=True)


async def test_training_operator_runs_a_gpu_pytorchjob_to_success(
        scratch: tuple[KubeClient, str], fleet_spec: FleetSpec) -> None:
    """PyTorchJob (1 master + 2 workers x 1 GPU) -> pods created by training-operator on the
    product's nodes -> Running (catalog: running) -> pods Succeeded (kwok) -> Succeeded
    (catalog: completed)."""
    member, namespace = scratch
    product, nodes = product_nodes(fleet_spec)

    def replica(count: int) -> dict[str, Any]:
        spec = gpu_pod_spec(product)
        spec["containers"] = [{**spec["containers"][0], "name": "pytorch"}]
        return {"replicas": count, "restartPolicy": "Never", "template": {
            "metadata": {"annotations": {"pod-complete.stage.kwok.x-k8s.io/delay": "15s"}},
            "spec": spec}}

    await member.request("POST", PYTORCHJOBS.collection(namespace), body={
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "train"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(1), "Worker": replica(2)}}})

    async def status_is(wanted: str) -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET",
                                                       PYTORCHJOBS.item("train", namespace))
        return current if generic_status(current) == wanted else None

    running = await eventually(lambda: status_is("running"), what="PyTorchJob running",
                               within=WITHIN_S)
    cond = condition(running, "Running")
    assert cond is not None and cond["status"] == "True", running["status"]

    done = await eventually(lambda: status_is("completed"), what="PyTorchJob completed",
                            within=WITHIN_S)
    cond = condition(done, "Succeeded")
    assert cond is not None and cond["status"] == "True", done["status"]

    finished = await pods(member, namespace, "training.kubeflow.org/job-name=train")
    assert len(finished) == 3
    for pod in finished:
        assert pod["spec"]["nodeName"] in nodes, pod["spec"]["nodeName"]


MPIJOBS = ResourceRef(group="kubeflow.org", version="v2beta1", kind="MPIJob", plural="mpijobs",
                      namespaced=True)


async def test_mpi_operator_runs_a_gpu_mpijob_until_its_launcher_completes(
        scratch: tuple[KubeClient, str], fleet_spec: FleetSpec) -> None:
    """MPIJob v2beta1 (launcher + 2 GPU workers) -> worker pods on the product's nodes and a
    launcher Job -> Running (catalog: running) -> the launcher's pod succeeds (kwok) ->
    Succeeded (catalog: completed)."""
    member, namespace = scratch
    product, nodes = product_nodes(fleet_spec)
    worker = gpu_pod_spec(product)
    worker["containers"] = [{**worker["containers"][0], "name": "worker"}]
    worker.pop("restartPolicy")
    launcher = {"containers": [{"name": "launcher", "image": "registry.invalid/mpi:1",
                                "command": ["mpirun", "-n", "2", "train"]}]}
    await member.request("POST", MPIJOBS.collection(namespace), body={
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob", "metadata": {"name": "train"},
        "spec": {"slotsPerWorker": 1, "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": {
                "metadata": {"annotations": {
                    "pod-complete.stage.kwok.x-k8s.io/delay": "15s"}},
                "spec": launcher}},
            "Worker": {"replicas": 2, "template": {"spec": worker}}}}})

    async def status_is(wanted: str) -> dict[str, Any] | None:
        current: dict[str, Any] = await member.request("GET", MPIJOBS.item("train", namespace))
        return current if generic_status(current) == wanted else None

    running = await eventually(lambda: status_is("running"), what="MPIJob running",
                               within=WITHIN_S)
    workers = await pods(member, namespace,
                         "training.kubeflow.org/job-name=train,"
                         "training.kubeflow.org/job-role=worker")
    assert len(workers) == 2, running["status"]
    for pod in workers:
        assert pod["spec"]["nodeName"] in nodes, pod["spec"]["nodeName"]

    done = await eventually(lambda: status_is("completed"), what="MPIJob completed",
                            within=WITHIN_S)
    cond = condition(done, "Succeeded")
    assert cond is not None and cond["status"] == "True", done["status"]
    launched = await member.request("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")
    assert [j["metadata"]["name"] for j in launched["items"]] == ["train-launcher"]
