"""A tenant cannot steer member scheduling through its pod templates (issue 24, finding
5), on real apiservers.

The audit's two replays: a Job with ``priorityClassName: system-node-critical`` (pod
priority 2000001000 on the member, preempts anything) and a Job with ``nodeName`` set to a
member node tainted ``dedicated=research:NoSchedule`` (bound past the scheduler and the
taint, outside the dispatcher's own node accounting). Both are parked before placement
(``PodTemplateRefused``, the field's JSON path in the Dispatch), no copy reaches a member.
With the operator's allow-list for the namespace, a permitted class passes (the member
has it) while another is still refused. A JobSet is judged in every replicated job, and
a spec change that adds ``nodeName`` to a placed JobSet is not written to its copy
(``Updated=False``), while its status mirroring goes on.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import yaml

from dispatcher.control.core.podpolicy import Allowed, PodFieldPolicy
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, NotFound
from dispatcher.kube.resources import DISPATCHES, NODES, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
PRIORITY_CLASSES = ResourceRef(group="scheduling.k8s.io", version="v1", kind="PriorityClass",
                               plural="priorityclasses", namespaced=False)
PERMITTED = "tenant-high"


async def _client(state: FleetState, name: str) -> KubeClient:
    config = yaml.safe_load(Path(state.cluster(name).kubeconfig).read_text())
    return await KubeClient.from_kubeconfig(config, name=name)


def _pod(**fields: Any) -> dict[str, Any]:
    return {"restartPolicy": "Never", "containers": [
        {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
        **fields}


def _job(name: str, **pod: Any) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": _pod(**pod)}}}


def _jobset(name: str, **worker_pod: Any) -> dict[str, Any]:
    def replicated(job: str, pod: dict[str, Any]) -> dict[str, Any]:
        return {"name": job, "replicas": 1, "template": {"spec": {
            "parallelism": 1, "completions": 1, "template": {"spec": pod}}}}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": name},
            "spec": {"replicatedJobs": [replicated("driver", _pod()),
                                        replicated("workers", _pod(**worker_pod))]}}


async def _dispatch(h: Harness, name: str, *, kind: str = "job", namespace: str = "",
                    check: Any = None) -> dict[str, Any]:
    async def reached() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item(f"{kind}-{name}",
                                                          namespace or h.namespace))
        conditions = {c["type"]: c for c in
                      ((record or {}).get("status") or {}).get("conditions") or ()}
        return record if conditions and check(conditions) else None
    return await eventually(reached, what=f"{kind} {name}")


def _refused(conditions: dict[str, Any]) -> bool:
    return conditions.get("Placed", {}).get("reason") == "PodTemplateRefused"


def _submitted(conditions: dict[str, Any]) -> bool:
    return conditions.get("Submitted", {}).get("status") == "True"


async def _copies(h: Harness, ref: ResourceRef, name: str, *, namespace: str = ""
                  ) -> list[str]:
    return [m for m, c in h.members.items()
            if await get_or_none(c, ref.item(name, namespace or h.namespace)) is not None]


async def _tainted_node(client: KubeClient) -> str:
    nodes = await client.request("GET", NODES.collection())
    for node in nodes["items"]:
        for taint in node["spec"].get("taints") or ():
            if (taint.get("key"), taint.get("value"), taint.get("effect")) == \
                    ("dedicated", "research", "NoSchedule"):
                return str(node["metadata"]["name"])
    raise AssertionError("the test fleet's member-2 has a tainted pool (fleet.yaml)")


@pytest.fixture
async def permitted_class(dev_fleet: FleetState) -> AsyncIterator[None]:
    """A PriorityClass on both members (the member's Priority admission refuses a pod
    naming a class it does not have)."""
    clients = [await _client(dev_fleet, name) for name in ("member-1", "member-2")]
    try:
        for client in clients:
            with contextlib.suppress(Conflict):
                await client.request("POST", PRIORITY_CLASSES.collection(), body={
                    "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                    "metadata": {"name": PERMITTED}, "value": 1000})
        yield
    finally:
        for client in clients:
            with contextlib.suppress(NotFound):
                await client.request("DELETE", PRIORITY_CLASSES.item(PERMITTED))
            await client.close()


@pytest.mark.integration
async def test_a_critical_class_and_a_node_name_never_reach_a_member(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet) as h:
        node = await _tainted_node(h.members["member-2"])
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job(
            "critical", priorityClassName="system-node-critical"))
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job(
            "pinned", nodeName=node))
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job("plain"))

        record = await _dispatch(h, "critical", check=_refused)
        placed = {c["type"]: c for c in record["status"]["conditions"]}["Placed"]
        assert placed["status"] == "False"
        assert placed["message"].startswith(
            "pod template refused: spec.template.spec.priorityClassName: priority class "
            f"'system-node-critical' is not allowed in namespace {h.namespace}")
        assert record["status"]["phase"] == "Pending"
        assert not (record["status"].get("decision") or {}).get("cluster")

        record = await _dispatch(h, "pinned", check=_refused)
        message = {c["type"]: c for c in record["status"]["conditions"]}["Placed"]["message"]
        assert f"spec.template.spec.nodeName: nodeName '{node}'" in message

        await _dispatch(h, "plain", check=_submitted)  # the controller was working
        assert await _copies(h, JOBS, "critical") == []
        assert await _copies(h, JOBS, "pinned") == []


@pytest.mark.integration
@pytest.mark.usefixtures("permitted_class")
async def test_the_operators_allow_list_lets_a_permitted_class_through(
        dev_fleet: FleetState) -> None:
    """``byNamespace: {<ns>: {allowedPriorityClasses: [tenant-high]}}``: that namespace's
    Job runs at the class; the same Job in another tenant's namespace is refused, and a
    class not listed is refused in both."""
    def allow(namespace: str) -> dict[str, Any]:
        return {"pod_fields": PodFieldPolicy(by_namespace=MappingProxyType({
            namespace: Allowed(priority_classes=frozenset({PERMITTED}))}))}

    async with running(dev_fleet, changes=allow, tenants=1) as h:
        (other,) = h.others
        for namespace in (h.namespace, other):
            await h.hub.request("POST", JOBS.collection(namespace), body=_job(
                "permitted", priorityClassName=PERMITTED))
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job(
            "critical", priorityClassName="system-node-critical"))
        await _dispatch(h, "permitted", check=_submitted)
        (member,) = await _copies(h, JOBS, "permitted")
        copy = await h.members[member].request("GET", JOBS.item("permitted", h.namespace))
        assert copy["spec"]["template"]["spec"]["priorityClassName"] == PERMITTED
        record = await _dispatch(h, "critical", check=_refused)
        message = {c["type"]: c for c in record["status"]["conditions"]}["Placed"]["message"]
        assert f"(allowed: {PERMITTED};" in message
        record = await _dispatch(h, "permitted", namespace=other, check=_refused)
        message = {c["type"]: c for c in record["status"]["conditions"]}["Placed"]["message"]
        assert f"not allowed in namespace {other} (allowed: none;" in message
        assert await _copies(h, JOBS, "critical") == []
        assert await _copies(h, JOBS, "permitted", namespace=other) == []


@pytest.mark.integration
async def test_a_jobset_is_judged_in_every_replicated_job_and_on_a_spec_change(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet) as h:
        node = await _tainted_node(h.members["member-2"])
        await h.hub.request("POST", JOBSETS.collection(h.namespace), body=_jobset(
            "nested", schedulerName="tenant-scheduler"))
        await h.hub.request("POST", JOBSETS.collection(h.namespace), body=_jobset("clean"))
        record = await _dispatch(h, "nested", kind="jobset", check=_refused)
        message = {c["type"]: c for c in record["status"]["conditions"]}["Placed"]["message"]
        assert ("spec.replicatedJobs[1].template.spec.template.spec.schedulerName: "
                "scheduler 'tenant-scheduler' is not allowed") in message
        assert await _copies(h, JOBSETS, "nested") == []

        await _dispatch(h, "clean", kind="jobset", check=_submitted)
        (member,) = await _copies(h, JOBSETS, "clean")
        await h.hub.request("PATCH", JOBSETS.item("clean", h.namespace), body={"spec": {
            "replicatedJobs": _jobset("clean", nodeName=node)["spec"]["replicatedJobs"]}},
            content_type=JSON_MERGE_PATCH)

        def update_refused(conditions: dict[str, Any]) -> bool:
            return conditions.get("Updated", {}).get("reason") == "PodTemplateRefused"
        record = await _dispatch(h, "clean", kind="jobset", check=update_refused)
        updated = {c["type"]: c for c in record["status"]["conditions"]}["Updated"]
        assert updated["status"] == "False"
        assert ("spec.replicatedJobs[1].template.spec.template.spec.nodeName: nodeName "
                f"'{node}'") in updated["message"]
        assert record["status"]["remote"]["hubGeneration"] == 2  # handled, not retried
        copy = await h.members[member].request("GET", JOBSETS.item("clean", h.namespace))
        pods = [j["template"]["spec"]["template"]["spec"]
                for j in copy["spec"]["replicatedJobs"]]
        assert all("nodeName" not in pod for pod in pods)
