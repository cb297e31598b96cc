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

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.fleetfile import GPU_PRODUCT_LABEL, FleetSpec
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.catalog import Catalog
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
        connect_real: Connect, fleet_spec: FleetSpec, real_fleet: FleetState) -> None:
    """JobSet (2 replicated Jobs x 2 pods x 1 GPU) without the webhook defaults -> defaulted
    by the mutating webhook -> Jobs -> pods on the product's nodes -> Running (catalog:
    running) -> Succeeded -> terminalState Completed (catalog: completed)."""
    member = await connect_real(MEMBER)
    product, nodes = product_nodes(fleet_spec)
    namespace = await new_namespace(member)
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
    assert seen["status"]["replicatedJobsStatus"][0]["ready"] == 2, seen["status"]

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
