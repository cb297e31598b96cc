"""Kueue MultiKueue on the dev fleet (``dispatcher dev up --with-kueue``), for real.

The ``kueue_fleet`` profile: Kueue v0.17.0 built from its Go module, a MultiKueue manager on
the hub and a worker on each real member, their webhooks on loopback, the queues of
``dispatcher/devfleet/multikueue.py``. A Job (then a JobSet) labelled with the LocalQueue
is created on the hub only; Kueue's webhook must suspend it and hand it to MultiKueue, the
manager must put it on the one member whose ClusterQueue has quota for its GPU product,
that member's scheduler binds its pods to nodes of the product, kwok runs them, and the
member's status must come back to the hub object. Nothing here is the dispatcher's.

Opt-in (``pytest --kueue``): the first run builds Kueue (minutes on 2 cores) and the fleet
with Kueue takes longer to start than the normal suite can afford.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from dispatcher.devfleet import multikueue
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.kube import errors, resources
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.podspec import GPU_PRODUCT_LABEL
from tests.integration.test_real_members import condition, container, eventually, pods

Connect = Callable[[str], Coroutine[Any, Any, KubeClient]]

pytestmark = [pytest.mark.integration, pytest.mark.kueue]

WITHIN_S = 150.0
NAMESPACE = "default"  # the profile's LocalQueue namespace (devfleet.KUEUE_NAMESPACES)
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
WORKLOADS = ResourceRef(group="kueue.x-k8s.io", version="v1beta2", kind="Workload",
                        plural="workloads", namespaced=True)
MULTIKUEUE = "kueue.x-k8s.io/multikueue"
RUN_S = 20


def _only_member_with(fleet: FleetSpec, product: str) -> str:
    owners = [m.name for m in fleet.members
              if any(p.gpu_product == product and not p.taints for p in m.node_pools)]
    assert len(owners) == 1, owners
    return owners[0]


def _template(product: str, name: str) -> dict[str, Any]:
    """Pods that run RUN_S (kwok): MultiKueue deletes the member's copy once it finished."""
    return {"metadata": {"labels": {"test": name}, "annotations": {
                "pod-complete.stage.kwok.x-k8s.io/delay": f"{RUN_S}s"}},
            "spec": {"restartPolicy": "Never", "nodeSelector": {GPU_PRODUCT_LABEL: product},
                     "containers": [container(1)]}}


async def _copies(connect: Connect, fleet: FleetSpec, ref: ResourceRef,
                  name: str) -> dict[str, dict[str, Any]]:
    found = {}
    for member in fleet.members:
        with contextlib.suppress(errors.NotFound):
            found[member.name] = await (await connect(member.name)).request(
                "GET", ref.item(name, NAMESPACE))
    return found


async def _ran_on(connect: Connect, member: str, name: str, *, product: str,
                  count: int) -> None:
    """``count`` pods labelled ``test=name`` are Running on ``member``, on nodes of
    ``product``."""
    client = await connect(member)

    async def done() -> list[dict[str, Any]] | None:
        found = await pods(client, NAMESPACE, f"test={name}")
        running = [p for p in found if p["status"].get("phase") == "Running"]
        return running if len(running) >= count else None

    ran = await eventually(done, what=f"{count} pods of {name} running on {member}",
                           within=WITHIN_S)
    nodes = {n["metadata"]["name"]: n for n in
             (await client.request("GET", resources.NODES.collection()))["items"]}
    for pod in ran:
        labels = nodes[pod["spec"]["nodeName"]]["metadata"]["labels"]
        assert labels[GPU_PRODUCT_LABEL] == product


async def test_a_job_queued_on_the_hub_runs_on_the_member_with_quota_for_its_product(
        kueue_fleet: Any, connect_kueue: Connect, fleet_spec: FleetSpec) -> None:
    product = "NVIDIA-A100-SXM4-80GB"
    target = _only_member_with(fleet_spec, product)
    hub = await connect_kueue("hub")
    name = "mk-job"
    created = await hub.request("POST", JOBS.collection(NAMESPACE), body={
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "labels": {"kueue.x-k8s.io/queue-name": multikueue.QUEUE}},
        "spec": {"parallelism": 2, "completions": 2, "backoffLimit": 0,
                 "template": _template(product, name)}})
    # Kueue's Job webhook on the hub: suspended until admitted, handed to MultiKueue.
    assert created["spec"]["suspend"] is True
    assert created["spec"]["managedBy"] == MULTIKUEUE

    await _ran_on(connect_kueue, target, name, product=product, count=2)
    copies = await _copies(connect_kueue, fleet_spec, JOBS, name)
    assert set(copies) == {target}

    async def hub_complete() -> dict[str, Any] | None:
        job = await hub.request("GET", JOBS.item(name, NAMESPACE))
        cond = condition(job, "Complete")
        return job if cond and cond["status"] == "True" else None

    job = await eventually(hub_complete, what="the member's Complete status on the hub Job",
                           within=WITHIN_S)
    assert job["status"]["succeeded"] == 2
    workloads = (await hub.request("GET", WORKLOADS.collection(NAMESPACE)))["items"]
    mine = [w for w in workloads
            if any(o.get("name") == name for o in w["metadata"].get("ownerReferences", ()))]
    assert [w["status"].get("clusterName") for w in mine] == [target]


async def test_a_jobset_queued_on_the_hub_runs_on_a_member(
        kueue_fleet: Any, connect_kueue: Connect, fleet_spec: FleetSpec) -> None:
    product = "NVIDIA-L40S"
    target = _only_member_with(fleet_spec, product)
    hub = await connect_kueue("hub")
    name = "mk-jobset"
    created = await hub.request("POST", JOBSETS.collection(NAMESPACE), body={
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE,
                     "labels": {"kueue.x-k8s.io/queue-name": multikueue.QUEUE}},
        "spec": {"replicatedJobs": [{"name": "w", "replicas": 2, "template": {"spec": {
            "parallelism": 1, "completions": 1, "backoffLimit": 0,
            "template": _template(product, name)}}}]}})
    assert created["spec"]["suspend"] is True
    assert created["spec"]["managedBy"] == MULTIKUEUE

    await _ran_on(connect_kueue, target, name, product=product, count=2)
    assert set(await _copies(connect_kueue, fleet_spec, JOBSETS, name)) == {target}
