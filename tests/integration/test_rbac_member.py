"""The member identity (deploy/member) on a real member apiserver, minted by fleet.identity.

Covers: ``create_identity`` applies deploy/member with the admin kubeconfig and mints a
TokenRequest token on an apiserver without a token controller (the Secret stays empty, so
``secret`` alone is an error and ``auto`` falls back); applying twice is idempotent; the
minted kubeconfig carries that token only; the identity may do what dispatch needs
(watch Nodes and Pods, create the namespace, create, read, list by label, merge-patch and
delete a workload copy) and is refused the rest (Secrets and ConfigMaps in kube-system,
deleting Pods, writing Nodes, creating Pods, replacing a copy or writing its status, RBAC
and CRD writes);
``dispatcher clusters add --create-identity`` registers the minted kubeconfig on the hub,
never the admin one. Not covered: the controller using it (tests/e2e/test_deploy_rbac.py).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import identity
from dispatcher.kube import errors, watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import NAMESPACES, NODES, PODS, SECRETS

pytestmark = pytest.mark.integration

MEMBER = "member-2"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"


def admin_kubeconfig(fleet: FleetState, name: str = MEMBER) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(Path(fleet.cluster(name).kubeconfig).read_text())
    return loaded


@pytest.fixture(scope="module")
async def minted(dev_fleet: FleetState) -> identity.MemberIdentity:
    return await identity.create_identity(admin_kubeconfig(dev_fleet), token_source="auto",
                                          secret_wait_s=0.5, expiration_s=3600)


@pytest.fixture
async def member(minted: identity.MemberIdentity) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(minted.kubeconfig, name="member") as client:
        yield client


@pytest.fixture
async def admin(dev_fleet: FleetState) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(admin_kubeconfig(dev_fleet),
                                                name="member (admin)") as client:
        yield client


def test_minted_kubeconfig_holds_only_the_service_account_token(
        minted: identity.MemberIdentity, dev_fleet: FleetState) -> None:
    assert minted.service_account == "dispatcher-system/dispatcher-member"
    assert minted.token_source == "request" and minted.expires
    (user,) = minted.kubeconfig["users"]
    assert set(user["user"]) == {"token"}
    assert user["user"]["token"] != dev_fleet.cluster(MEMBER).token
    assert minted.kubeconfig["clusters"][0]["cluster"]["server"] == \
        dev_fleet.cluster(MEMBER).server
    assert {"serviceaccount/dispatcher-member", "clusterrole/dispatcher-member",
            "clusterrolebinding/dispatcher-member", "secret/dispatcher-member-token"} <= \
        set(minted.applied)


async def test_applying_again_is_idempotent_and_mints_a_fresh_token(
        minted: identity.MemberIdentity, dev_fleet: FleetState) -> None:
    again = await identity.create_identity(admin_kubeconfig(dev_fleet), token_source="request",
                                           expiration_s=3600)
    assert again.applied == minted.applied
    assert again.kubeconfig["users"][0]["user"]["token"] != \
        minted.kubeconfig["users"][0]["user"]["token"]


async def test_secret_source_without_a_token_controller_is_a_clear_error(
        dev_fleet: FleetState) -> None:
    with pytest.raises(identity.IdentityError, match="no token controller"):
        await identity.create_identity(admin_kubeconfig(dev_fleet), token_source="secret",
                                       secret_wait_s=0.3)


async def test_identity_may_do_what_dispatch_needs(member: KubeClient) -> None:
    nodes = await watch.list_objects(member, NODES)
    assert nodes.objects
    pods = await watch.list_objects(member, PODS, field_selector="status.phase!=Succeeded")
    async for _ in watch.watch_from(member, NODES, resource_version=nodes.resource_version,
                                    timeout_seconds=1):
        pass
    async for _ in watch.watch_from(member, PODS, resource_version=pods.resource_version,
                                    timeout_seconds=1):
        pass
    namespace = f"team-{uuid.uuid4().hex[:6]}"
    await member.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    copy = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "labels": {"dispatcher.io/origin": "hub"}},
            "spec": {"replicatedJobs": []}}
    created = await member.request("POST", f"{JOBSETS}/namespaces/{namespace}/jobsets",
                                   body=copy)
    await member.request("GET", f"{JOBSETS}/namespaces/{namespace}/jobsets/train")
    patched = await member.request("PATCH", f"{JOBSETS}/namespaces/{namespace}/jobsets/train",
                                   body={"spec": {"ttlSecondsAfterFinished": 60}},
                                   content_type=JSON_MERGE_PATCH)
    assert patched["spec"]["ttlSecondsAfterFinished"] == 60
    listed = await member.request("GET", f"{JOBSETS}/jobsets",
                                  query=[("labelSelector", "dispatcher.io/origin=hub")])
    assert [o["metadata"]["name"] for o in listed["items"]
            if o["metadata"]["namespace"] == namespace] == ["train"]
    await member.request("DELETE", f"{JOBSETS}/namespaces/{namespace}/jobsets/train", body={
        "apiVersion": "v1", "kind": "DeleteOptions",
        "preconditions": {"uid": created["metadata"]["uid"]}})


async def test_identity_is_refused_the_rest(member: KubeClient, admin: KubeClient) -> None:
    name = f"probe-{uuid.uuid4().hex[:6]}"
    await admin.request("POST", "/api/v1/namespaces/kube-system/configmaps", body={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
        "data": {"k": "v"}})
    node = (await watch.list_objects(admin, NODES)).objects[0]["metadata"]["name"]
    refused = [
        ("GET", "/api/v1/namespaces/kube-system/secrets", None),
        ("GET", "/api/v1/secrets", None),
        ("GET", f"/api/v1/namespaces/kube-system/configmaps/{name}", None),
        ("DELETE", f"/api/v1/namespaces/kube-system/configmaps/{name}", None),
        ("DELETE", "/api/v1/namespaces/kube-system/pods/anything", None),
        ("DELETE", NAMESPACES.item("kube-system"), None),
        ("PATCH", NODES.item(node), {"spec": {"unschedulable": True}}),
        ("POST", "/api/v1/namespaces/default/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
        ("PUT", f"{JOBSETS}/namespaces/default/jobsets/train", {
            "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train"}, "spec": {}}),
        ("PATCH", f"{JOBSETS}/namespaces/default/jobsets/train/status", {"status": {}}),
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "escalate"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "dispatcher-member",
                          "namespace": "dispatcher-system"}]}),
        ("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                   "jobsets.jobset.x-k8s.io", None),
        ("POST", "/api/v1/namespaces/dispatcher-system/serviceaccounts/dispatcher-member/token",
         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
    ]
    for method, path, body in refused:
        with pytest.raises(errors.Forbidden):
            await member.request(method, path, body=body,
                                 content_type=JSON_MERGE_PATCH if method == "PATCH"
                                 else "application/json")
    still = await admin.request("GET", f"/api/v1/namespaces/kube-system/configmaps/{name}")
    assert still["data"] == {"k": "v"}
    await admin.request("DELETE", f"/api/v1/namespaces/kube-system/configmaps/{name}")


def test_clusters_add_create_identity_registers_the_minted_token(
        dev_fleet: FleetState, capsys: pytest.CaptureFixture[str]) -> None:
    name = f"m2-{uuid.uuid4().hex[:6]}"
    hub = dev_fleet.cluster("hub")
    code = main(["clusters", "add", name, "--kubeconfig", dev_fleet.cluster(MEMBER).kubeconfig,
                 "--create-identity", "--token-source", "request",
                 "--hub-kubeconfig", hub.kubeconfig])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "dispatcher-system/dispatcher-member" in out and "token from request" in out
    try:
        secret = hub.rest().get(SECRETS.item(f"{name}-kubeconfig", "dispatcher-system"))
        stored = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        (user,) = stored["users"]
        assert user["name"] == "dispatcher-member" and set(user["user"]) == {"token"}
        assert user["user"]["token"] != dev_fleet.cluster(MEMBER).token
        assert stored["clusters"][0]["cluster"]["server"] == dev_fleet.cluster(MEMBER).server
    finally:
        assert main(["clusters", "remove", name, "--hub-kubeconfig", hub.kubeconfig]) == 0
