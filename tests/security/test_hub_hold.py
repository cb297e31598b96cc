"""The shared hub's hold against a tenant (security round 4, issue 35), on a real apiserver.

The attacks of the round-4 audit, replayed by an impersonated tenant whose Role lets it
create, patch and delete Deployments, MPIJobs and ConfigMaps in its own namespace (what
any tenant of a shared hub has), against the controller's webhook registered with the
hub (``HubWebhook``, failurePolicy Fail) and the controller itself in shared mode:

- a Deployment created owned (its webhook skipped), then freed and paused with a
  hand-written ``dispatcher.io/hub-hold``: the hold by UPDATE is denied;
- the same while still owned (the webhook never sees owned -> owned updates): the hub
  takes the patch, and the controller never dispatches an owned object without a record;
- an MPIJob created with the MPI operator's own managedBy: held at creation all the same
  (the kind's own controller's value is no one else's); set back to it, ours is put back;
  set to anyone else's, denied;
- a held Deployment: the marker cannot be removed, no controller owner can be added, and
  it cannot leave the watched labels;
- with the webhook bypassed (its configuration deleted), a dispatched Deployment that
  leaves the watched labels and is unpaused: the controller, whose watch no longer shows
  it, reads it live out of its scope and says so (``NotHeld``) or removes its copy.
Before issue 35 each of these ran the workload on the hub while its copy ran on a member.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.core.hubhold import HoldScope
from dispatcher.control.settings import WebhookSettings
from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import KubeError, NotFound
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, ResourceRef
from dispatcher.placement.selector import parse_selector
from dispatcher.shell.webhook import WEBHOOK_CONFIGURATIONS, HubWebhook
from dispatcher.workloads.holds import HOLD_ANNOTATION, MANAGED_BY
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_real_members import DEPLOYMENTS
from tests.integration.test_real_operators import MPIJOBS
from tests.security.tenancy.test_two_tenants import BINDINGS, ROLES

pytestmark = pytest.mark.integration

CONFIGMAPS = ResourceRef(group="", version="v1", kind="ConfigMap", plural="configmaps",
                         namespaced=True)
SELECTED = {"team": "a"}


class Tenant:
    def __init__(self, h: Harness, client: KubeClient, *, configuration: str = "") -> None:
        self.h, self.client, self.namespace = h, client, h.namespace
        self.configuration = configuration  # the webhook's MutatingWebhookConfiguration

    async def create(self, ref: ResourceRef, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.client.request(
            "POST", ref.collection(self.namespace), body=body)
        return created

    async def patch(self, ref: ResourceRef, name: str, body: dict[str, Any]) -> dict[str, Any]:
        patched: dict[str, Any] = await self.client.request(
            "PATCH", ref.item(name, self.namespace), body=body,
            content_type=JSON_MERGE_PATCH)
        return patched

    async def refused(self, ref: ResourceRef, name: str, body: dict[str, Any]) -> str:
        """The patch is denied by the webhook: its message."""
        with pytest.raises(KubeError) as caught:
            await self.patch(ref, name, body)
        assert "denied the request" in caught.value.detail, caught.value.detail
        return caught.value.detail


def deployment(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": dict(SELECTED), **meta},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}}, "spec": {
                         "containers": [{"name": "c", "image": "registry.invalid/s:1",
                                         "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


async def _as_tenant(fleet: FleetState, h: Harness) -> KubeClient:
    await h.hub.request("POST", ROLES.collection(h.namespace), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenant"},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"],
                   "verbs": ["create", "get", "patch", "update", "delete"]},
                  {"apiGroups": ["kubeflow.org"], "resources": ["mpijobs"],
                   "verbs": ["create", "get", "patch", "update", "delete"]},
                  {"apiGroups": [""], "resources": ["configmaps"],
                   "verbs": ["create", "get", "delete"]}]})
    await h.hub.request("POST", BINDINGS.collection(h.namespace), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "tenant"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "mallory"}]})
    kubeconfig = yaml.safe_load(Path(fleet.cluster("hub").kubeconfig).read_text())
    client = await KubeClient.from_kubeconfig(kubeconfig, name="hub as mallory")
    client._api.set_default_header("Impersonate-User", "mallory")
    return client


@pytest.fixture
async def tenant(dev_fleet: FleetState) -> AsyncIterator[Tenant]:
    async with running(dev_fleet, changes={"hub_mode": "shared",
                                           "label_selector": "team=a"}) as h:
        port = free_port()
        suffix = uuid.uuid4().hex[:6]
        system = f"hold-system-{suffix}"  # where the webhook keeps its certificate Secret
        await h.hub.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system}})
        settings = WebhookSettings(address="127.0.0.1", port=port,
                                   url=f"https://127.0.0.1:{port}",
                                   configuration=f"dispatcher-hold-{suffix}",
                                   secret_name=f"webhook-hold-{suffix}")
        webhook = HubWebhook(hub=h.hub, settings=settings, namespace=system,
                             catalog=lambda: h.controller.live.current,
                             scope=HoldScope(namespaces=(h.namespace,),
                                             skip=frozenset({system}),
                                             selector=parse_selector("team=a")))
        stop = await webhook.start()
        client = await _as_tenant(dev_fleet, h)
        try:
            yield Tenant(h, client, configuration=settings.configuration)
        finally:
            await client.close()
            with contextlib.suppress(NotFound):
                await h.hub.request("DELETE", WEBHOOK_CONFIGURATIONS.item(
                    settings.configuration))
            await stop()
            with contextlib.suppress(NotFound):
                await h.hub.request("DELETE", NAMESPACES.item(system))


async def _owner(tenant: Tenant, name: str) -> dict[str, Any]:
    cm = await tenant.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"name": name}})
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name,
            "uid": cm["metadata"]["uid"], "controller": True}


async def _never_dispatched(tenant: Tenant, kind: str, name: str, *,
                            owned: bool = False) -> None:
    """Never sent to a member, however long the controller looks (several decision
    rounds): an owned one has no Dispatch at all, a free one is parked ``NotHeld``."""
    for _ in range(10):
        record = await get_or_none(tenant.h.hub, DISPATCHES.item(
            f"{kind.lower()}-{name}", tenant.namespace))
        if owned or record is None:
            assert record is None, record
        else:
            status = record.get("status") or {}
            decision = {**((record.get("spec") or {}).get("decision") or {}),
                        **(status.get("decision") or {})}
            assert not decision.get("cluster"), record
            placed = [c for c in status.get("conditions") or () if c["type"] == "Placed"]
            assert not placed or placed[0]["reason"] == "NotHeld", placed
        await asyncio.sleep(0.3)


async def test_a_hold_cannot_be_put_on_by_an_update(tenant: Tenant) -> None:
    owner = await _owner(tenant, "anchor")
    created = await tenant.create(DEPLOYMENTS, deployment("sneaky", ownerReferences=[owner]))
    assert "paused" not in created["spec"]  # owned: the webhook never saw it (matchCondition)
    # owned -> owned is not sent to the webhook: the hub takes the patch ...
    paused = await tenant.patch(DEPLOYMENTS, "sneaky", {
        "metadata": {"annotations": {HOLD_ANNOTATION: ".spec.paused"}},
        "spec": {"paused": True}})
    assert paused["spec"]["paused"] is True
    # ... and the controller never takes an owned object that has no Dispatch
    await _never_dispatched(tenant, "Deployment", "sneaky", owned=True)
    # freeing it from its owner does not make that forged hold a real one
    message = await tenant.refused(DEPLOYMENTS, "sneaky", {"metadata": {
        "ownerReferences": None}})
    assert "a hold is set at creation" in message
    # freed of its owner (sent: it was owned, it is not), the hold cannot come by update
    await tenant.patch(DEPLOYMENTS, "sneaky", {"metadata": {"ownerReferences": None},
                                               "spec": {"paused": False}})
    message = await tenant.refused(DEPLOYMENTS, "sneaky", {"spec": {"paused": True}})
    assert "a hold is set at creation" in message
    message = await tenant.refused(DEPLOYMENTS, "sneaky", {"metadata": {"annotations": {
        HOLD_ANNOTATION: ".spec.replicas"}}})
    assert "cannot be added, changed or removed" in message
    await _never_dispatched(tenant, "Deployment", "sneaky")


async def test_an_mpijob_with_its_operators_own_value_is_held_and_stays_held(
        tenant: Tenant) -> None:
    created = await tenant.create(MPIJOBS, {
        "apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
        "metadata": {"name": "mpi", "labels": dict(SELECTED)},
        "spec": {"runPolicy": {"managedBy": "kubeflow.org/mpi-operator"},
                 "mpiReplicaSpecs": {"Worker": {"replicas": 1, "template": {"spec": {
                     "containers": [{"name": "c", "image": "registry.invalid/m:1"}]}}}}}})
    assert created["spec"]["runPolicy"]["managedBy"] == MANAGED_BY
    # the operator's own value again means "run it here": it is put back, as a dropped one
    back = await tenant.patch(MPIJOBS, "mpi", {"spec": {"runPolicy": {
        "managedBy": "kubeflow.org/mpi-operator"}}})
    assert back["spec"]["runPolicy"]["managedBy"] == MANAGED_BY
    # anyone else's value is a change of who runs it: denied
    message = await tenant.refused(MPIJOBS, "mpi", {"spec": {"runPolicy": {
        "managedBy": "kueue.x-k8s.io/multikueue"}}})
    assert "cannot change after creation" in message
    again = await tenant.client.request("GET", MPIJOBS.item("mpi", tenant.namespace))
    assert again["spec"]["runPolicy"]["managedBy"] == MANAGED_BY


async def test_a_held_deployment_keeps_its_hold_its_marker_and_its_labels(
        tenant: Tenant) -> None:
    created = await tenant.create(DEPLOYMENTS, deployment("web"))
    assert created["spec"]["paused"] is True
    assert created["metadata"]["annotations"][HOLD_ANNOTATION] == ".spec.paused"
    owner = await _owner(tenant, "anchor-web")
    message = await tenant.refused(DEPLOYMENTS, "web", {"metadata": {
        "ownerReferences": [owner]}})
    assert "cannot be given a controller owner" in message
    message = await tenant.refused(DEPLOYMENTS, "web", {"metadata": {"annotations": {
        HOLD_ANNOTATION: None}}})
    assert "cannot be added, changed or removed" in message
    message = await tenant.refused(DEPLOYMENTS, "web", {"metadata": {"labels": {
        "team": None}}})
    assert "cannot leave what the dispatcher watches" in message
    # an unpause is put back (as before), with the webhook's warning
    unpaused = await tenant.patch(DEPLOYMENTS, "web", {"spec": {"paused": False}})
    assert unpaused["spec"]["paused"] is True
    # a CREATE's own marker is not the webhook's: it goes, the user's own pause stays
    forged = await tenant.create(DEPLOYMENTS, deployment(
        "own-pause", annotations={HOLD_ANNOTATION: ".spec.paused"}) | {
        "spec": {**deployment("own-pause")["spec"], "paused": True}})
    assert HOLD_ANNOTATION not in (forged["metadata"].get("annotations") or {}), \
        json.dumps(forged["metadata"])


async def test_a_dispatched_workload_that_leaves_the_selector_unwatched_is_not_held(
        tenant: Tenant) -> None:
    """Issue 35: a label removed while the webhook is bypassed took the object out of the
    controller's filtered watch; its copy ran on while the hub ran it too, and the
    Dispatch said Running. Now the copy goes (not started) or the Dispatch says
    ``Held=False`` (started, failover.policy keeps it): never both running silently."""
    hub = tenant.h.hub
    await tenant.create(DEPLOYMENTS, deployment("leaves"))
    record_path = DISPATCHES.item("deployment-leaves", tenant.namespace)

    async def placed() -> Any:
        record = await get_or_none(hub, record_path)
        status = (record or {}).get("status") or {}
        return status.get("phase") in ("Submitted", "Running") and record

    await eventually(placed, what="the Deployment dispatched")
    await hub.request("DELETE", WEBHOOK_CONFIGURATIONS.item(tenant.configuration))
    left = await tenant.patch(DEPLOYMENTS, "leaves", {"metadata": {"labels": {"team": None}},
                                                      "spec": {"paused": False}})
    assert left["spec"].get("paused") is not True  # bypassed: the hub takes it

    async def said() -> Any:
        status = (await get_or_none(hub, record_path) or {}).get("status") or {}
        held = [c for c in status.get("conditions") or () if c["type"] == "Held"]
        if held and held[0]["status"] == "False" and held[0]["reason"] == "NotHeld":
            return held[0]["message"]
        return status.get("failure") if "left the watched scope" in str(
            status.get("failure")) else None

    message = await eventually(said, what="the Dispatch saying it is not held")
    assert "left the watched scope" in message, message
