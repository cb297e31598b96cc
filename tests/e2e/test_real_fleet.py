"""End to end on the real fleet: ``dispatcher run`` as its own process, users on kubectl.

The members run kube-scheduler, kube-controller-manager, kwok and the JobSet operator (the
``real_fleet``), so nothing here sets a member object by hand: a GPU batch/v1 Job and a
JobSet are created on the hub with ``kubectl`` (the hub's own defaulting: a Job's generated
selector and controller-uid labels, the JobSet CRD's defaults), each copy lands on the
member the placement core picks from the members' Nodes and bound pods, kube-scheduler binds
the pods, kwok finishes them, ``kubectl wait`` sees Complete on the hub, and
``kubectl delete`` on the hub removes the copies and their pods. Then a burst of Jobs and
JobSets during which the controller is killed with SIGKILL and started again: every
workload gets exactly one copy, on the member its Dispatch names, and completes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import subprocess
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, NODES, PODS, ResourceRef
from dispatcher.placement import engine
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.catalog import Catalog

from .conftest import ControllerProcess
from .conftest import eventually as shared_eventually

pytestmark = pytest.mark.e2e

MEMBERS = ("member-1", "member-2")
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
KINDS = {"Job": JOBS, "JobSet": JOBSETS}
DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


async def open_clients(state: FleetState) -> AsyncIterator[dict[str, KubeClient]]:
    """Admin clients of the hub and the members, closed afterwards."""
    opened = {}
    for name in ("hub", *MEMBERS):
        kubeconfig = yaml.safe_load(Path(state.cluster(name).kubeconfig).read_text())
        opened[name] = await KubeClient.from_kubeconfig(kubeconfig, name=name)
    try:
        yield opened
    finally:
        for client in opened.values():
            await client.close()


@pytest.fixture
async def clients(real_fleet: FleetState) -> AsyncIterator[dict[str, KubeClient]]:
    async for opened in open_clients(real_fleet):
        yield opened


# real members take longer than the light fleet (operators, scheduler, kwok)
eventually = functools.partial(shared_eventually, within=60.0, interval=0.2)


def kubectl(state: FleetState, *args: str, stdin: str | None = None,
            timeout: float = 60) -> str:
    """``kubectl --context hub ARGS``: the user's tool, against the hub only."""
    done = subprocess.run([str(ensure_binaries().kubectl), "--kubeconfig",
                           state.cluster("hub").kubeconfig, *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr}"
    return done.stdout


async def start(controller: ControllerProcess) -> None:
    """Start the controller process and wait for its /readyz."""
    proc = controller.start()

    async def ready() -> bool:
        def probe() -> int:
            try:
                with urllib.request.urlopen(
                        f"http://127.0.0.1:{controller.port}/readyz", timeout=2) as resp:
                    return int(resp.status)
            except OSError:
                return 0
        assert proc.poll() is None, controller.output()
        return await asyncio.to_thread(probe) == 200

    await eventually(ready, what="/readyz", within=60)


def pod_spec(gpus: int, product: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [{
        "name": "train", "image": "registry.invalid/train:1",
        "resources": {"limits": {"nvidia.com/gpu": gpus}}}]}
    if product:
        spec["nodeSelector"] = {"nvidia.com/gpu.product": product}
    return spec


def job(name: str, *, pods: int, gpus: int, run_s: int) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "completions": pods, "backoffLimit": 0,
                     "template": {"metadata": {"annotations": {DELAY: f"{run_s}s"}},
                                  "spec": pod_spec(gpus)}}}


def jobset(name: str, *, workers: int, gpus: int, run_s: int) -> dict[str, Any]:
    """A leader Job (1 pod, 1 GPU) and a workers Job (``workers`` pods of ``gpus``)."""
    def replicated(job_name: str, pods: int, per_pod: int) -> dict[str, Any]:
        return {"name": job_name, "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {"metadata": {"annotations": {DELAY: f"{run_s}s"}},
                         "spec": pod_spec(per_pod)}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [replicated("leader", 1, 1),
                                        replicated("workers", workers, gpus)]}}


async def snapshots(clients: dict[str, KubeClient]) -> list[MemberSnapshot]:
    """The members as the controller sees them once nothing is reserved: Nodes and the pods
    bound to them (every namespace: the session's fleet is shared)."""
    out = []
    for name in MEMBERS:
        capacity = ClusterCapacity()
        for node in (await watch.list_objects(clients[name], NODES)).objects:
            capacity.upsert_node(node)
        for pod in (await watch.list_objects(clients[name], PODS)).objects:
            capacity.upsert_pod(pod)
        out.append(MemberSnapshot(name=name, capacity=capacity))
    return out


def best_member(body: dict[str, Any], members: list[MemberSnapshot]) -> str | None:
    resolution = Catalog.builtin().resolve(body)
    return engine.decide(members, PlacementRequest(
        demand=resolution.demand, api_version=resolution.api_version,
        kind=resolution.kind)).chosen


async def copies(clients: dict[str, KubeClient], namespace: str, hub_id: str
                 ) -> list[tuple[str, str, str]]:
    """(kind, name, member) of every copy ``hub_id`` made in ``namespace``: top-level
    objects only (a JobSet's own Jobs on the member carry no owner-less origin label)."""
    found = []
    for member in MEMBERS:
        for kind, ref in KINDS.items():
            listed = await watch.list_objects(clients[member], ref, namespace=namespace,
                                              label_selector=f"{ORIGIN_LABEL}={hub_id}")
            found += [(kind, o["metadata"]["name"], member) for o in listed.objects
                      if not o["metadata"].get("ownerReferences")]
    return sorted(found)


async def bound_pods(client: KubeClient, namespace: str, hub_uid: str, count: int
                     ) -> list[dict[str, Any]] | None:
    """The ``count`` pods of the hub workload ``hub_uid``, once all are Running."""
    listed = await watch.list_objects(client, PODS, namespace=namespace,
                                      label_selector=f"{HUB_UID_LABEL}={hub_uid}")
    pods = listed.objects
    if len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods):
        return pods
    return None


async def all_completed(hub: KubeClient, namespace: str, count: int) -> bool:
    """Whether ``count`` Dispatches in ``namespace`` say ``completed``."""
    listed = await watch.list_objects(hub, DISPATCHES, namespace=namespace)
    return count == sum(1 for o in listed.objects
                        if (o.get("status") or {}).get("genericStatus") == "completed")


async def nothing_left(clients: dict[str, KubeClient], namespace: str, hub_id: str) -> bool:
    if await copies(clients, namespace, hub_id):
        return False
    for member in MEMBERS:
        if (await watch.list_objects(clients[member], PODS, namespace=namespace)).objects:
            return False
    return True


async def test_kubectl_job_and_jobset_run_on_the_best_member_and_delete_cleans_up(
        real_fleet: FleetState, real_controller: ControllerProcess,
        clients: dict[str, KubeClient]) -> None:
    ns, hub_id = real_controller.namespace, real_controller.hub_id
    kubectl(real_fleet, "create", "namespace", ns)
    await start(real_controller)
    gpu_nodes = {(s.name, n.name) for s in await snapshots(clients)
                 for n in s.capacity.nodes() if n.allocatable}

    async def runs_where_placed(body: dict[str, Any], count: int) -> str:
        expected = best_member(body, await snapshots(clients))
        assert expected is not None
        await asyncio.to_thread(kubectl, real_fleet, "create", "-n", ns, "-f", "-",
                                stdin=yaml.safe_dump(body))
        kind, name = body["kind"], body["metadata"]["name"]
        hub_obj = await clients["hub"].request("GET", KINDS[kind].item(name, ns))

        async def copied() -> list[tuple[str, str, str]]:
            return [c for c in await copies(clients, ns, hub_id) if c[:2] == (kind, name)]
        assert await eventually(copied, what=f"the {kind} copied") == [(kind, name, expected)]
        pods = await eventually(
            lambda: bound_pods(clients[expected], ns, hub_obj["metadata"]["uid"], count),
            what=f"the {kind}'s {count} pods Running", within=90)
        for pod in pods:  # bound by kube-scheduler (the copy names no node), GPUs nodes only
            scheduled = [c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert scheduled and scheduled[0]["status"] == "True", pod["status"]
            assert (expected, pod["spec"]["nodeName"]) in gpu_nodes
        return expected

    # 2 x 4 GPUs, any product: placed by free capacity (most-free), running ~40 s so the
    # JobSet below is placed with these pods bound.
    await runs_where_placed(job("train", pods=2, gpus=4, run_s=40), 2)
    await runs_where_placed(jobset("gang", workers=2, gpus=2, run_s=10), 3)

    # Complete on the hub as the user sees it: the member's words, mirrored.
    await asyncio.to_thread(kubectl, real_fleet, "wait", "-n", ns, "--for=condition=Complete",
                            "job/train", "--timeout=120s", timeout=130)
    await asyncio.to_thread(kubectl, real_fleet, "wait", "-n", ns,
                            "--for=jsonpath={.status.terminalState}=Completed",
                            "jobset/gang", "--timeout=120s", timeout=130)
    for kind, name in (("job", "train"), ("jobset", "gang")):
        record = await clients["hub"].request("GET", DISPATCHES.item(f"{kind}-{name}", ns))
        assert record["status"]["genericStatus"] == "completed", record["status"]

    await asyncio.to_thread(kubectl, real_fleet, "delete", "-n", ns, "job/train",
                            "jobset/gang", "--wait=true", timeout=90)
    await eventually(lambda: nothing_left(clients, ns, hub_id),
                     what="copies and pods gone from the members", within=90)


async def test_kill9_mid_burst_on_the_real_fleet_loses_and_duplicates_nothing(
        real_fleet: FleetState, real_controller: ControllerProcess,
        clients: dict[str, KubeClient]) -> None:
    """24 one-GPU Jobs and 6 JobSets (3 pods, 3 GPUs) at once, the controller killed -9
    once the first copies exist: after a restart each has exactly one copy, on the member
    its Dispatch names, and every one completes (the fleet has fewer free GPUs than the
    burst asks, so some wait for others to finish, across the restart)."""
    ns, hub_id, hub = real_controller.namespace, real_controller.hub_id, clients["hub"]
    kubectl(real_fleet, "create", "namespace", ns)
    await start(real_controller)
    bodies = [job(f"job-{i:02d}", pods=1, gpus=1, run_s=5) for i in range(24)]
    bodies += [jobset(f"set-{i}", workers=2, gpus=1, run_s=5) for i in range(6)]
    creating = asyncio.gather(*(hub.request("POST", KINDS[b["kind"]].collection(ns), body=b)
                                for b in bodies))

    async def some() -> bool:
        return len(await copies(clients, ns, hub_id)) >= 5

    await eventually(some, what="the first copies")
    real_controller.kill9()
    await creating
    before = len(await copies(clients, ns, hub_id))
    # 42 GPUs asked, 36 untainted: some workloads cannot have had a copy at the kill
    assert 5 <= before < len(bodies), f"{before} copies at the kill"
    await start(real_controller)
    wanted = sorted((b["kind"], b["metadata"]["name"]) for b in bodies)

    await eventually(lambda: all_completed(hub, ns, len(bodies)),
                     what="every workload completed", within=240)
    found = await copies(clients, ns, hub_id)
    assert sorted((k, n) for k, n, _ in found) == wanted, f"{before} copies before the kill"
    for kind, name, member in found:
        record = await hub.request("GET", DISPATCHES.item(f"{kind.lower()}-{name}", ns))
        assert record["status"]["decision"]["cluster"] == member, record["status"]
    with contextlib.suppress(NotFound):
        await asyncio.to_thread(kubectl, real_fleet, "delete", "-n", ns, "jobs,jobsets",
                                "--all", "--wait=true", timeout=120)
    await eventually(lambda: nothing_left(clients, ns, hub_id),
                     what="copies and pods gone from the members", within=120)


async def test_every_operator_kind_runs_through_the_controller_process(
        real_fleet: FleetState, real_controller: ControllerProcess,
        clients: dict[str, KubeClient], fleet_spec: FleetSpec) -> None:
    """PyTorchJob and MPIJob to ``completed``, LeaderWorkerSet and RayCluster to
    ``running``, each created with kubectl on the hub and pinned to the member whose
    operators run it, one after the other (they share that member's product pool); the hub
    object's status is the operator's own, and a delete on the hub removes copy and pods.
    (JobSet and Job: the kubectl test above.)"""
    from tests.integration.test_dispatch_real_operators import (
        leaderworkerset,
        mpijob,
        pytorchjob,
        raycluster,
    )
    from tests.integration.test_real_members import MEMBER, pods
    from tests.integration.test_real_operators import (
        LWS,
        MPIJOBS,
        PYTORCHJOBS,
        RAYCLUSTERS,
        product_nodes,
    )

    ns = real_controller.namespace
    kubectl(real_fleet, "create", "namespace", ns)
    await start(real_controller)
    product, nodes = product_nodes(fleet_spec)
    member, hub = clients[MEMBER], clients["hub"]
    cases = ((PYTORCHJOBS, pytorchjob, "completed", "training.kubeflow.org/job-name=train"),
             (MPIJOBS, mpijob, "completed", "training.kubeflow.org/job-name=train"),
             (LWS, leaderworkerset, "running", "leaderworkerset.sigs.k8s.io/name=train"),
             (RAYCLUSTERS, raycluster, "running", "ray.io/cluster=train"))
    for ref, build, final, selector in cases:
        body = build(product)
        await asyncio.to_thread(kubectl, real_fleet, "create", "-n", ns, "-f", "-",
                                stdin=yaml.safe_dump(body))
        dispatch = DISPATCHES.item(f"{ref.kind.lower()}-train", ns)

        async def reached(path: str = dispatch, wanted: str = final,
                          ref: ResourceRef = ref) -> dict[str, Any] | None:
            # ... and the hub holding the copy's latest status: the operator may write it
            # again after the state the Dispatch names (counts, times)
            record = await hub.request("GET", path)
            if record.get("status", {}).get("genericStatus") != wanted:
                return None
            hub_obj: dict[str, Any] = await hub.request("GET", ref.item("train", ns))
            copy = await member.request("GET", ref.item("train", ns))
            return hub_obj if hub_obj.get("status") == copy.get("status") else None

        hub_obj = await eventually(reached, what=f"{ref.kind} {final} on the hub, its status "
                                                 "the copy's", within=180)
        gpu_pods = [p for p in await pods(member, ns, selector)
                    if p["spec"].get("nodeSelector")]
        assert gpu_pods and all(p["spec"]["nodeName"] in nodes for p in gpu_pods)
        assert hub_obj.get("status")
        await asyncio.to_thread(kubectl, real_fleet, "delete", "-n", ns,
                                f"{ref.plural}.{ref.group}/train", "--wait=true", timeout=90)

        async def gone(ref: ResourceRef = ref, selector: str = selector) -> bool:
            try:
                await member.request("GET", ref.item("train", ns))
            except NotFound:
                return not await pods(member, ns, selector)
            return False

        await eventually(gone, what=f"the {ref.kind} copy and its pods gone", within=120)
