"""The dispatcher end to end on real members with the frameworks' own operators.

A JobSet, a PyTorchJob and an MPIJob are created on the real fleet's hub (its real CRDs,
no operator there) and pinned to one member: the controller copies each, the member's
operator defaults it (webhooks) and creates the pods, kube-scheduler binds them to nodes of
the requested GPU product, kwok runs and finishes them, and the hub shows ``running`` then
``completed`` with the statuses the operators really wrote (mirrored onto the hub object).
Deleting each on the hub removes the copy and, through the member's garbage collector, its
pods.
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_real_members import MEMBER, pods
from tests.integration.test_real_operators import (
    JOBSETS,
    MPIJOBS,
    PYTORCHJOBS,
    gpu_pod_spec,
    product_nodes,
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
        await eventually(lambda: seen("completed"), what=f"{case} completed on the hub",
                         within=120.0)
        hub_obj = await h.hub.request("GET", ref.item("train", h.namespace))
        copy = await member.request("GET", ref.item("train", h.namespace))
        assert hub_obj.get("status") == copy.get("status")  # the operator's own words
        if case == "jobset":
            assert hub_obj["status"]["terminalState"] == "Completed"
        # deleting on the hub removes the copy and its pods (and frees the shared product
        # pool for the next tests: a finished MPIJob's workers may still hold GPUs)
        await h.hub.request("DELETE", ref.item("train", h.namespace))

        async def gone() -> bool:
            try:
                await member.request("GET", ref.item("train", h.namespace))
            except NotFound:
                return not await pods(member, h.namespace, selector)
            return False

        await eventually(gone, what="the copy and its pods gone", within=120.0)
