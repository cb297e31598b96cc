"""Job statuses a real hub apiserver accepts: the mirror's writes after failover and from an
older member, against kube-apiserver 1.35's Job status validation.

Each case writes first what a naive mirror would (the member's status as is, as a merge
patch of the status subresource) and expects the hub to refuse it with 422, so the test
shows the rule is live; then the status ``control.core.hubstatus`` makes of it, which must pass.
The hub Jobs carry ``spec.managedBy`` (as on a shared hub), so no Job controller writes
them whatever the hub runs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.core.hubstatus import hub_status
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Invalid
from dispatcher.kube.patches import merge_diff
from dispatcher.kube.resources import NAMESPACES, ResourceRef
from dispatcher.workloads.holds import MANAGED_BY
from tests.integration.harness import kubectl

pytestmark = pytest.mark.integration

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
T0, T1, T2 = "2026-12-01T10:00:00Z", "2026-12-01T10:05:00Z", "2026-12-01T10:09:00Z"


def cond(type_: str) -> dict[str, Any]:
    return {"type": type_, "status": "True", "lastTransitionTime": T2, "lastProbeTime": T2,
            "reason": type_, "message": type_}


@pytest.fixture
async def hub(dev_fleet: FleetState) -> AsyncIterator[tuple[KubeClient, str]]:
    kubeconfig = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    client = await KubeClient.from_kubeconfig(kubeconfig, name="hub")
    namespace = f"hubstatus-{uuid.uuid4().hex[:6]}"
    await client.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        yield client, namespace
    finally:
        await client.close()


def create_job(fleet: FleetState, namespace: str, name: str) -> None:
    kubectl(fleet, "create", "-n", namespace, "-f", "-", stdin=yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
        "spec": {"managedBy": MANAGED_BY, "parallelism": 2, "completions": 2,
                 "template": {"spec": {"restartPolicy": "Never", "containers": [
                     {"name": "c", "image": "busybox", "command": ["true"]}]}}}}))


async def mirror(client: KubeClient, namespace: str, name: str, member: dict[str, Any], *,
                 naive: bool) -> dict[str, Any]:
    """Write ``member`` as the mirror does (merge diff of the status subresource)."""
    job = await client.request("GET", JOBS.item(name, namespace))
    target = member if naive else hub_status(job, member, hub_owns_status=False)
    assert target is not None
    diff = merge_diff(dict(job.get("status") or {}), target)
    return await client.request("PATCH", JOBS.item(name, namespace, "status"),
                                body={"status": diff}, content_type=JSON_MERGE_PATCH)


async def refused_then_accepted(client: KubeClient, namespace: str, name: str,
                                member: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(Invalid):
        await mirror(client, namespace, name, member, naive=True)
    return await mirror(client, namespace, name, member, naive=False)


async def test_failover_to_a_new_copy_is_accepted(dev_fleet: FleetState,
                                                  hub: tuple[KubeClient, str]) -> None:
    client, namespace = hub
    create_job(dev_fleet, namespace, "moved")
    first = {"startTime": T0, "active": 2, "ready": 2, "succeeded": 0}
    await mirror(client, namespace, "moved", first, naive=True)  # the first copy: as is
    fresh = {"active": 2, "ready": 0}  # the new copy, before its controller set startTime
    moved = await refused_then_accepted(client, namespace, "moved", fresh)
    assert moved["status"]["startTime"] == T0
    done = {"startTime": T1, "active": 0, "ready": 0, "succeeded": 2, "completionTime": T2,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}
    finished = await mirror(client, namespace, "moved", done, naive=False)
    assert finished["status"]["startTime"] == T0
    assert {c["type"] for c in finished["status"]["conditions"]} == {
        "SuccessCriteriaMet", "Complete"}


async def test_a_member_older_than_131_is_accepted(dev_fleet: FleetState,
                                                   hub: tuple[KubeClient, str]) -> None:
    client, namespace = hub
    create_job(dev_fleet, namespace, "old")
    await mirror(client, namespace, "old", {"startTime": T0, "active": 2, "ready": 2},
                 naive=True)
    done = {"startTime": T0, "succeeded": 2, "completionTime": T2,
            "conditions": [cond("Complete")]}  # no SuccessCriteriaMet before 1.31
    finished = await refused_then_accepted(client, namespace, "old", done)
    assert finished["status"]["succeeded"] == 2 and finished["status"]["completionTime"] == T2
    failing = {"startTime": T0, "failed": 1, "active": 1, "conditions": [cond("Failed")]}
    create_job(dev_fleet, namespace, "old-failed")
    await mirror(client, namespace, "old-failed", {"startTime": T0, "active": 2},
                 naive=True)
    failed = await refused_then_accepted(client, namespace, "old-failed", failing)
    assert {c["type"] for c in failed["status"]["conditions"]} == {"Failed", "FailureTarget"}
