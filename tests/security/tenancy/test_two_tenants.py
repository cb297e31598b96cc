"""Two tenants with their own RBAC on the hub, as a shared hub runs them (findings 1–3).

Alice may create Jobs in her namespace only, Bob in his (Roles bound to users the hub's
admin impersonates, so every request is judged by the hub's real RBAC). What Alice writes
cannot reach past what the hub gave her: a Job in Bob's namespace, a definition object or a
MemberCluster is refused by the hub itself; a privileged Job she may create on the hub is
refused by the member's admission in the dispatcher's dry-run and never copied; stamps of
Bob's workload smuggled into her template never touch Bob's copy; an absurd priority is an
error on her Dispatch. Bob's workload is dispatched all the while.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Forbidden
from dispatcher.kube.resources import DISPATCHES, MEMBER_CLUSTERS, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running

pytestmark = pytest.mark.integration

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
ROLES = ResourceRef(group="rbac.authorization.k8s.io", version="v1", kind="Role",
                    plural="roles", namespaced=True)
BINDINGS = ResourceRef(group="rbac.authorization.k8s.io", version="v1", kind="RoleBinding",
                       plural="rolebindings", namespaced=True)
KARTAS = ResourceRef(group="run.ai", version="v1alpha1", kind="Karta", plural="kartas",
                     namespaced=False)


async def _as(fleet: FleetState, user: str) -> KubeClient:
    """A hub client that acts as ``user`` (admin credentials + impersonation headers)."""
    kubeconfig = yaml.safe_load(Path(fleet.cluster("hub").kubeconfig).read_text())
    client = await KubeClient.from_kubeconfig(kubeconfig, name=f"hub as {user}")
    client._api.set_default_header("Impersonate-User", user)
    return client


async def _tenant(h: Harness, namespace: str, user: str) -> None:
    await h.hub.request("POST", ROLES.collection(namespace), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "tenant"},
        "rules": [{"apiGroups": ["batch"], "resources": ["jobs"],
                   "verbs": ["create", "get", "list", "watch", "delete"]},
                  {"apiGroups": ["dispatcher.io"], "resources": ["dispatches"],
                   "verbs": ["get", "list"]}]})
    await h.hub.request("POST", BINDINGS.collection(namespace), body={
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"tenant-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]})


def _job(name: str, *, pod: dict[str, Any] | None = None,
         meta: dict[str, Any] | None = None, template_meta: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    spec = {"restartPolicy": "Never", "containers": [
        {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, **(meta or {})},
            "spec": {"template": {"metadata": template_meta or {},
                                  "spec": {**spec, **(pod or {})}}}}


@pytest.fixture
async def tenants(dev_fleet: FleetState) -> AsyncIterator[tuple[Harness, KubeClient, KubeClient]]:
    async with running(dev_fleet, tenants=1) as h:
        alice_ns, bob_ns = h.namespace, h.others[0]
        await _tenant(h, alice_ns, "alice")
        await _tenant(h, bob_ns, "bob")
        alice, bob = await _as(dev_fleet, "alice"), await _as(dev_fleet, "bob")
        try:
            yield h, alice, bob
        finally:
            await alice.close()
            await bob.close()


async def test_one_tenant_gains_nothing_over_another(
        tenants: tuple[Harness, KubeClient, KubeClient]) -> None:
    h, alice, bob = tenants
    alice_ns, bob_ns = h.namespace, h.others[0]
    bobs = await bob.request("POST", JOBS.collection(bob_ns), body=_job("train"))
    bob_uid = bobs["metadata"]["uid"]
    # the hub itself refuses what Alice was not given
    for method, path, body in (
            ("POST", JOBS.collection(bob_ns), _job("intrude")),
            ("POST", KARTAS.collection(), {"apiVersion": "run.ai/v1alpha1", "kind": "Karta",
                                           "metadata": {"name": "mine"}, "spec": {}}),
            ("POST", MEMBER_CLUSTERS.collection(), {
                "apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": "mine"},
                "spec": {"kubeconfigSecretRef": {"name": "x"}}})):
        with pytest.raises(Forbidden):
            await alice.request(method, path, body=body)
    # what she may create on the hub cannot do more on a member than the hub allows
    await alice.request("POST", JOBS.collection(alice_ns), body=_job(
        "escape", pod={"hostPID": True, "containers": [
            {"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]}))
    stamps = {"dispatcher.io/origin": h.controller.settings.hub_id,
              "dispatcher.io/hub-uid": bob_uid}
    await alice.request("POST", JOBS.collection(alice_ns), body=_job(
        "train", template_meta={"labels": stamps, "annotations": {
            **stamps, "dispatcher.io/hub-object": "Job.batch/train"}}))
    await alice.request("POST", JOBS.collection(alice_ns), body=_job(
        "first", meta={"annotations": {"dispatcher.io/priority": "9" * 4000}}))

    async def phase(namespace: str, name: str) -> str:
        record = await get_or_none(h.hub, DISPATCHES.item(f"job-{name}", namespace))
        return str(((record or {}).get("status") or {}).get("phase") or "")

    async def settled() -> bool:
        return (await phase(alice_ns, "escape") == "Failed"
                and await phase(bob_ns, "train") not in ("", "Pending", "Placed")
                and await phase(alice_ns, "train") not in ("", "Pending", "Placed")
                and await phase(alice_ns, "first") == "Pending")

    await eventually(settled, what="every tenant workload decided")
    escape = await h.hub.request("GET", DISPATCHES.item("job-escape", alice_ns))
    assert "PodSecurity" in escape["status"]["failure"]
    first = await h.hub.request("GET", DISPATCHES.item("job-first", alice_ns))
    placed = {c["type"]: c for c in first["status"]["conditions"]}["Placed"]
    assert placed["reason"] == "InvalidAnnotation"
    for client in h.members.values():
        assert await get_or_none(client, JOBS.item("escape", alice_ns)) is None
        bobs_copy = await get_or_none(client, JOBS.item("train", bob_ns))
        if bobs_copy is not None:  # Bob's copy is Bob's only: Alice's template stamps are gone
            assert bobs_copy["metadata"]["annotations"]["dispatcher.io/hub-uid"] == bob_uid
        alices = await get_or_none(client, JOBS.item("train", alice_ns))
        if alices is not None:
            labels = alices["spec"]["template"]["metadata"].get("labels") or {}
            assert labels.get("dispatcher.io/hub-uid") != bob_uid
            assert "dispatcher.io/origin" not in labels
