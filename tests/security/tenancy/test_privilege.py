"""Dispatching gives no one more power than the hub does (finding 1), on real apiservers.

A hub namespace's Pod Security level travels with its workloads: the namespace the
dispatcher creates on a member carries it (never below the ``baseline`` floor), and every
pod template is dry-run on the member first, so a privileged, host-namespace or hostPath
pod is refused by the member's own admission and the Dispatch says why, before any copy
exists. With ``createNamespaces`` off (the default), a namespace the member's operator did
not prepare is a rejection. A foreign ServiceAccount is refused by a real member (the light
fleet runs without the ServiceAccount admission plugin).
"""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.control.core.dryrun import dry_run_pods
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH
from dispatcher.kube.podsecurity import member_labels
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, ResourceRef
from dispatcher.workloads.mutate import PodTemplate
from tests.integration.harness import Harness, eventually, get_or_none, running

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
ENFORCE = "pod-security.kubernetes.io/enforce"


def _job(name: str, *, pod: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = {"restartPolicy": "Never", "containers": [
        {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"template": {"spec": {**spec, **(pod or {})}}}}


PRIVILEGED = {"hostPID": True, "containers": [
    {"name": "c", "image": "busybox", "securityContext": {"privileged": True},
     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
HOST_PATH = {"volumes": [{"name": "root", "hostPath": {"path": "/"}}], "containers": [
    {"name": "c", "image": "busybox", "volumeMounts": [{"name": "root", "mountPath": "/h"}],
     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}


async def _record(h: Harness, name: str, phase: str) -> Any:
    async def reached() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item(f"job-{name}", h.namespace))
        return record if (record or {}).get("status", {}).get("phase") == phase else None
    return await eventually(reached, what=f"job {name} {phase}")


async def _copies(h: Harness, name: str) -> list[str]:
    return [m for m, c in h.members.items()
            if await get_or_none(c, JOBS.item(name, h.namespace)) is not None]


@pytest.mark.integration
async def test_privileged_pods_are_refused_by_the_carried_level(dev_fleet: FleetState) -> None:
    async with running(dev_fleet) as h:
        await h.hub.request("PATCH", NAMESPACES.item(h.namespace), body={"metadata": {
            "labels": {ENFORCE: "restricted"}}}, content_type=JSON_MERGE_PATCH)
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=_job("escape", pod=PRIVILEGED))
        record = await _record(h, "escape", "Failed")
        conditions = {c["type"]: c for c in record["status"]["conditions"]}
        message = conditions["Submitted"]["message"]
        assert conditions["Submitted"]["reason"] == "Rejected"
        assert "would not be admitted" in message and "PodSecurity" in message
        assert await _copies(h, "escape") == []
        for client in h.members.values():  # the namespace made for it is as strict
            ns = await get_or_none(client, NAMESPACES.item(h.namespace))
            if ns is not None:
                assert ns["metadata"]["labels"][ENFORCE] == "restricted"


@pytest.mark.integration
async def test_hostpath_is_refused_even_where_the_hub_namespace_says_nothing(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet) as h:
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=_job("hostpath", pod=HOST_PATH))
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job("plain"))
        record = await _record(h, "hostpath", "Failed")
        assert "hostPath" in record["status"]["failure"]
        await _record(h, "plain", "Submitted")
        (member,) = await _copies(h, "plain")
        ns = await h.members[member].request("GET", NAMESPACES.item(h.namespace))
        assert ns["metadata"]["labels"][ENFORCE] == "baseline"  # the floor


@pytest.mark.integration
async def test_a_namespace_the_member_does_not_have_is_a_rejection(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet, create_namespaces=False) as h:
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job("nowhere"))
        record = await _record(h, "nowhere", "Failed")
        assert "does not exist on" in record["status"]["failure"]
        assert sorted(record["status"]["excluded"]) == ["member-1", "member-2"]
        for client in h.members.values():
            assert await get_or_none(client, NAMESPACES.item(h.namespace)) is None


@pytest.mark.parametrize(("hub", "floor", "enforce"), [
    ({}, "baseline", "baseline"),
    ({ENFORCE: "restricted"}, "baseline", "restricted"),
    ({ENFORCE: "privileged"}, "baseline", "baseline"),   # never below the floor
    ({ENFORCE: "bogus"}, "restricted", "restricted"),
])
def test_namespace_level_is_the_hubs_never_below_the_floor(
        hub: dict[str, str], floor: str, enforce: str) -> None:
    labels = member_labels(hub, floor=floor)
    assert labels[ENFORCE] == enforce
    assert labels[f"{ENFORCE}-version"] == "latest"


def test_dry_run_pods_complete_names_and_images_only() -> None:
    template = PodTemplate(component="c", metadata={"labels": {"a": "b"}}, spec={
        "hostNetwork": True, "containers": [{"securityContext": {"privileged": True}}]})
    (pod,) = dry_run_pods([template, template], namespace="team-a")
    container = pod["spec"]["containers"][0]
    assert container["securityContext"] == {"privileged": True}
    assert container["name"] and container["image"]
    assert pod["spec"]["hostNetwork"] is True
    assert pod["metadata"]["namespace"] == "team-a" and pod["metadata"]["labels"] == {"a": "b"}


@pytest.mark.integration
async def test_a_foreign_service_account_is_refused_by_a_real_member(
        real_fleet: FleetState) -> None:
    """Real members run the ServiceAccount admission plugin: a pod template naming an
    account that does not exist in the namespace (a cluster-admin one elsewhere) is refused
    in the dry-run; a plain Job right after the namespace is created is not (the default
    ServiceAccount may take a moment to appear: that is retried, not rejected)."""
    async with running(real_fleet) as h:
        # pinned: the session's real fleet is shared, and the other member may be full
        pin = {"dispatcher.io/cluster": "member-1"}
        plain, borrowed = _job("plain"), _job(
            "borrowed", pod={"serviceAccountName": "cluster-admin-sa"})
        for body in (plain, borrowed):
            body["metadata"]["annotations"] = pin
            await h.hub.request("POST", JOBS.collection(h.namespace), body=body)
        async def copied() -> bool:  # Submitted, then Running, Completed: kwok is quick
            record = await get_or_none(h.hub, DISPATCHES.item("job-plain", h.namespace))
            conditions = {c["type"]: c for c in
                          (record or {}).get("status", {}).get("conditions") or ()}
            return conditions.get("Submitted", {}).get("status") == "True"

        await eventually(copied, what="job plain copied")
        record = await _record(h, "borrowed", "Failed")
        assert "cluster-admin-sa" in record["status"]["failure"]
        assert await _copies(h, "borrowed") == []
