"""The member identity (deploy/member) on a real member apiserver, minted by fleet.identity.

Covers: ``create_identity`` applies deploy/member (namespaced: a RoleBinding of the write
role in each listed namespace, created on request) with the admin kubeconfig and mints a
TokenRequest token on an apiserver without a token controller (the Secret stays empty, so
``secret`` alone is an error and ``auto`` falls back); applying twice is idempotent; a
listed namespace that does not exist is an error before anything is applied; the minted
kubeconfig carries that token only; the identity may do what dispatch needs in a listed
namespace (watch Nodes and Pods across the cluster, create, read, list by label,
merge-patch and delete a workload copy, dry-run create a Pod) and is refused the rest:
a privileged, hostPath, Secret-mounting Deployment in kube-system or in a namespace not
listed (SelfSubjectAccessReview and a real dry-run create), creating namespaces, Secrets
and ConfigMaps in kube-system, deleting Pods, writing Nodes, creating Pods outside the
listed namespaces, replacing a copy or writing its status, RBAC and CRD writes; the
cluster-wide opt-in (``clusters add --cluster-wide``, with its printed warning) does reach
kube-system, and re-running namespaced removes that again, as does dropping a namespace;
listed namespaces are created with their hub namespace's Pod Security level, and one that
exists weaker is left as it is and reported;
``dispatcher clusters add --create-identity --namespace`` registers the minted kubeconfig
on the hub, never the admin one, with the namespaces as ``allowedNamespaces``, and refuses
to run without a choice. Not covered: the controller using it
(tests/e2e/test_deploy_rbac.py).
"""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import identity, minting
from dispatcher.kube import errors, watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import MEMBER_CLUSTERS, NAMESPACES, NODES, PODS, SECRETS

pytestmark = pytest.mark.integration

MEMBER = "member-2"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2"
DEPLOYMENTS = "/apis/apps/v1"
SUFFIX = uuid.uuid4().hex[:6]
LISTED = (f"rbac-a-{SUFFIX}", f"rbac-b-{SUFFIX}")
UNLISTED = f"rbac-other-{SUFFIX}"
DRY_RUN = [("dryRun", "All")]
ACCOUNT = "system:serviceaccount:dispatcher-system:dispatcher-member"
ENFORCE = "pod-security.kubernetes.io/enforce"


def privileged_deployment(name: str = "root") -> dict[str, Any]:
    """What the finding created in kube-system: privileged, hostPath /, a Secret mounted,
    the namespace's ServiceAccount token."""
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"hostPID": True, "containers": [{
                    "name": "c", "image": "busybox",
                    "securityContext": {"privileged": True},
                    "volumeMounts": [{"name": "host", "mountPath": "/host"},
                                     {"name": "s", "mountPath": "/s"}]}],
                    "volumes": [{"name": "host", "hostPath": {"path": "/"}},
                                {"name": "s", "secret": {"secretName": "anything"}}]}}}}


def pod(name: str = "probe") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def allowed(client: KubeClient, *, verb: str, group: str, resource: str,
                  namespace: str | None) -> bool:
    """SelfSubjectAccessReview: may ``client`` do ``verb`` there?"""
    attributes = {"verb": verb, "group": group, "resource": resource}
    if namespace:
        attributes["namespace"] = namespace
    review = await client.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes}})
    return bool(review["status"].get("allowed"))


def admin_kubeconfig(fleet: FleetState, name: str = MEMBER) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(Path(fleet.cluster(name).kubeconfig).read_text())
    return loaded


@pytest.fixture(scope="module")
async def minted(dev_fleet: FleetState) -> identity.MemberIdentity:
    """The namespaced install, LISTED created by the command, UNLISTED by the admin."""
    dev_fleet.cluster(MEMBER).rest().request("POST", NAMESPACES.collection(), {
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": UNLISTED}})
    return await minting.create_identity(admin_kubeconfig(dev_fleet), namespaces=LISTED,
                                          create_namespaces=True, token_source="auto",
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
            "clusterrolebinding/dispatcher-member", "secret/dispatcher-member-token",
            "clusterrole/dispatcher-member-write",
            *(f"rolebinding/{ns}/dispatcher-member" for ns in LISTED)} <= set(minted.applied)
    # created (never applied), with the floor: no hub namespace labels were given
    assert [(n.name, n.labels.get(ENFORCE)) for n in minted.created_namespaces] == [
        (ns, "baseline") for ns in LISTED]
    assert "clusterrolebinding/dispatcher-member-write" not in minted.applied
    assert minted.namespaces == LISTED and not minted.cluster_wide
    assert minted.warnings == ()


async def test_applying_again_is_idempotent_and_mints_a_fresh_token(
        minted: identity.MemberIdentity, dev_fleet: FleetState) -> None:
    again = await minting.create_identity(admin_kubeconfig(dev_fleet), namespaces=LISTED,
                                           create_namespaces=True, token_source="request",
                                           expiration_s=3600)
    assert again.applied == minted.applied
    assert again.removed == ()
    assert again.kubeconfig["users"][0]["user"]["token"] != \
        minted.kubeconfig["users"][0]["user"]["token"]


async def test_secret_source_without_a_token_controller_is_a_clear_error(
        minted: identity.MemberIdentity, dev_fleet: FleetState) -> None:
    with pytest.raises(identity.IdentityError, match="no token controller"):
        await minting.create_identity(admin_kubeconfig(dev_fleet), namespaces=LISTED,
                                       token_source="secret", secret_wait_s=0.3)


async def test_a_missing_namespace_is_an_error_before_anything_is_applied(
        minted: identity.MemberIdentity, dev_fleet: FleetState, admin: KubeClient) -> None:
    absent = f"rbac-absent-{SUFFIX}"
    with pytest.raises(identity.IdentityError, match=f"{absent} does not exist.*"
                                                     "--create-namespaces"):
        await minting.create_identity(admin_kubeconfig(dev_fleet),
                                       namespaces=[LISTED[0], absent])
    with pytest.raises(errors.NotFound):
        await admin.request("GET", NAMESPACES.item(absent))
    # nothing was applied or pruned: the other listed namespace keeps its binding
    await admin.request("GET", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{LISTED[1]}"
                               "/rolebindings/dispatcher-member")


async def test_identity_may_do_what_dispatch_needs(member: KubeClient, admin: KubeClient
                                                   ) -> None:
    nodes = await watch.list_objects(member, NODES)
    assert nodes.objects
    pods = await watch.list_objects(member, PODS, field_selector="status.phase!=Succeeded")
    async for _ in watch.watch_from(member, NODES, resource_version=nodes.resource_version,
                                    timeout_seconds=1):
        pass
    async for _ in watch.watch_from(member, PODS, resource_version=pods.resource_version,
                                    timeout_seconds=1):
        pass
    namespace = LISTED[1]
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
    # the pod admission dry-run, in a listed namespace; nothing is stored
    await member.request("POST", PODS.collection(namespace), query=DRY_RUN, body=pod())
    with pytest.raises(errors.NotFound):
        await admin.request("GET", PODS.item("probe", namespace))
    # the cluster's identity: namespace kube-system by name
    await member.request("GET", NAMESPACES.item("kube-system"))
    # a listed namespace's own Pod Security labels (the RoleBinding there grants it)
    for namespace in LISTED:
        await member.request("GET", NAMESPACES.item(namespace))


async def test_writes_reach_the_listed_namespaces_only(member: KubeClient) -> None:
    """The finding: a privileged, hostPath, Secret-mounting Deployment in kube-system with
    the member token, dry run: created. Now Forbidden there and in any namespace not
    listed, allowed in a listed one."""
    for namespace in LISTED:
        assert await allowed(member, verb="create", group="apps", resource="deployments",
                             namespace=namespace)
        assert await allowed(member, verb="create", group="", resource="pods",
                             namespace=namespace)
        await member.request("POST", f"{DEPLOYMENTS}/namespaces/{namespace}/deployments",
                             query=DRY_RUN, body=privileged_deployment())
    for namespace in ("kube-system", "kube-public", "default", UNLISTED):
        for group, resource in (("apps", "deployments"), ("batch", "jobs"), ("", "pods"),
                                ("jobset.x-k8s.io", "jobsets")):
            for verb in ("create", "patch", "delete"):
                assert not await allowed(member, verb=verb, group=group, resource=resource,
                                         namespace=namespace), (verb, resource, namespace)
        with pytest.raises(errors.Forbidden):
            await member.request("POST", f"{DEPLOYMENTS}/namespaces/{namespace}/deployments",
                                 query=DRY_RUN, body=privileged_deployment())
        with pytest.raises(errors.Forbidden):
            await member.request("POST", PODS.collection(namespace), query=DRY_RUN,
                                 body=pod())
    for verb in ("create", "delete", "patch"):
        assert not await allowed(member, verb=verb, group="", resource="namespaces",
                                 namespace=None)


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
        ("POST", "/api/v1/namespaces/kube-system/pods", pod()),
        ("POST", NAMESPACES.collection(), {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": f"new-{name}"}}),
        ("DELETE", NAMESPACES.item(LISTED[0]), None),
        ("GET", NAMESPACES.item(UNLISTED), None),
        ("GET", NAMESPACES.item("default"), None),
        ("GET", NAMESPACES.collection(), None),
        ("PATCH", NAMESPACES.item(LISTED[0]), {"metadata": {"labels": {ENFORCE: "privileged"}}}),
        ("POST", f"{DEPLOYMENTS}/namespaces/kube-system/deployments", privileged_deployment()),
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
        minted: identity.MemberIdentity, dev_fleet: FleetState,
        capsys: pytest.CaptureFixture[str]) -> None:
    name = f"m2-{uuid.uuid4().hex[:6]}"
    hub = dev_fleet.cluster("hub")
    code = main(["clusters", "add", name, "--kubeconfig", dev_fleet.cluster(MEMBER).kubeconfig,
                 "--create-identity", "--namespaces", ",".join(LISTED),
                 "--token-source", "request", "--hub-kubeconfig", hub.kubeconfig])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "dispatcher-system/dispatcher-member" in out and "token from request" in out
    assert f"writes in: {', '.join(LISTED)}" in out
    try:
        secret = hub.rest().get(SECRETS.item(f"{name}-kubeconfig", "dispatcher-system"))
        stored = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        (user,) = stored["users"]
        assert user["name"] == "dispatcher-member" and set(user["user"]) == {"token"}
        assert user["user"]["token"] != dev_fleet.cluster(MEMBER).token
        assert stored["clusters"][0]["cluster"]["server"] == dev_fleet.cluster(MEMBER).server
        registered = hub.rest().get(MEMBER_CLUSTERS.item(name))
        assert registered["spec"]["allowedNamespaces"] == list(LISTED)
    finally:
        assert main(["clusters", "remove", name, "--hub-kubeconfig", hub.kubeconfig]) == 0


def test_clusters_add_create_identity_without_a_choice_is_refused(
        dev_fleet: FleetState, capsys: pytest.CaptureFixture[str]) -> None:
    hub = dev_fleet.cluster("hub")
    for extra in ([], ["--namespace", "kube-system"], ["--namespace", "team-a,kube-public"]):
        code = main(["clusters", "add", f"m2-{uuid.uuid4().hex[:6]}", "--kubeconfig",
                     dev_fleet.cluster(MEMBER).kubeconfig, "--create-identity", *extra,
                     "--hub-kubeconfig", hub.kubeconfig])
        err = capsys.readouterr().err
        assert code == 2
        assert ("--namespace" in err and "--cluster-wide" in err) if not extra \
            else "kube-* namespaces" in err


async def test_namespaces_get_the_hub_level_and_a_weaker_existing_one_is_reported(
        minted: identity.MemberIdentity, dev_fleet: FleetState, admin: KubeClient) -> None:
    """A new listed namespace is created with its hub namespace's level; one that exists
    (LISTED[0], at the baseline floor) under a hub namespace at restricted is left as it
    is, and the warning says the controller refuses copies there and how to label it."""
    fresh = f"rbac-psa-{SUFFIX}"
    restricted = {ENFORCE: "restricted"}
    try:
        got = await minting.create_identity(
            admin_kubeconfig(dev_fleet), namespaces=[*LISTED, fresh], create_namespaces=True,
            token_source="request", expiration_s=600, member=MEMBER,
            hub_labels={fresh: restricted, LISTED[0]: restricted})
        (made,) = got.created_namespaces
        assert made.name == fresh and made.labels[ENFORCE] == "restricted"
        found = await admin.request("GET", NAMESPACES.item(fresh))
        assert found["metadata"]["labels"][ENFORCE] == "restricted"
        (warning,) = got.warnings
        assert (f"namespace {LISTED[0]} on {MEMBER} enforces Pod Security baseline:latest, "
                f"weaker than hub namespace {LISTED[0]}'s restricted:latest") in warning
        assert "the controller refuses copies" in warning
        assert f"kubectl label namespace {LISTED[0]} --overwrite " \
               f"{ENFORCE}=restricted" in warning
        kept = await admin.request("GET", NAMESPACES.item(LISTED[0]))
        assert kept["metadata"]["labels"][ENFORCE] == "baseline"  # never overwritten
    finally:
        back = await minting.create_identity(admin_kubeconfig(dev_fleet), namespaces=LISTED,
                                              token_source="request", expiration_s=600)
        assert back.removed == (f"rolebinding/{fresh}/dispatcher-member",)
        await admin.request("DELETE", NAMESPACES.item(fresh))


def test_cluster_wide_opt_in_reaches_kube_system_and_namespaced_takes_it_back(
        minted: identity.MemberIdentity, dev_fleet: FleetState,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Last in the module: leaves the namespaced install (LISTED) as it found it. Sync, as
    the command runs its own event loop."""
    name = f"m2-{uuid.uuid4().hex[:6]}"
    hub = dev_fleet.cluster("hub")
    admin = admin_kubeconfig(dev_fleet)

    def may(verb: str, group: str, resource: str, namespace: str | None) -> bool:
        async def ask() -> bool:
            async with await KubeClient.from_kubeconfig(minted.kubeconfig,
                                                        name="member") as member:
                return await allowed(member, verb=verb, group=group, resource=resource,
                                     namespace=namespace)
        return asyncio.run(ask())

    def mint(**kwargs: Any) -> identity.MemberIdentity:
        return asyncio.run(minting.create_identity(admin, token_source="request",
                                                    expiration_s=600, **kwargs))

    try:
        code = main(["clusters", "add", name, "--kubeconfig",
                     dev_fleet.cluster(MEMBER).kubeconfig, "--create-identity",
                     "--cluster-wide", "--token-source", "request",
                     "--hub-kubeconfig", hub.kubeconfig])
        captured = capsys.readouterr()
        assert code == 0, captured
        assert "warning: --cluster-wide" in captured.err and "kube-system" in captured.err
        assert "writes in: every namespace (cluster-wide)" in captured.out
        # the RoleBindings are redundant now: removed
        for ns in LISTED:
            assert f"rolebinding/{ns}/dispatcher-member removed" in captured.out
        assert "allowedNamespaces" not in hub.rest().get(MEMBER_CLUSTERS.item(name))["spec"]
        for namespace in ("kube-system", UNLISTED, LISTED[0]):
            assert may("create", "apps", "deployments", namespace)

        async def dry_run_in_kube_system() -> None:
            async with await KubeClient.from_kubeconfig(minted.kubeconfig,
                                                        name="member") as member:
                await member.request("POST", f"{DEPLOYMENTS}/namespaces/kube-system/"
                                     "deployments", query=DRY_RUN, body=privileged_deployment())
        asyncio.run(dry_run_in_kube_system())
        # namespace creation only when asked for
        assert not may("create", "", "namespaces", None)
        wide = mint(cluster_wide=True, create_namespaces=True)
        assert "clusterrolebinding/dispatcher-member-namespaces" in wide.applied
        assert may("create", "", "namespaces", None)
    finally:
        back = mint(namespaces=LISTED)
        assert main(["clusters", "remove", name, "--hub-kubeconfig", hub.kubeconfig]) == 0
    assert set(back.removed) == {"clusterrolebinding/dispatcher-member-write",
                                 "clusterrolebinding/dispatcher-member-namespaces"}
    assert back.warnings == ()
    for namespace in ("kube-system", UNLISTED):
        assert not may("create", "apps", "deployments", namespace)
    assert not may("create", "", "namespaces", None)
    # dropping a namespace removes its RoleBinding, and only that one
    fewer = mint(namespaces=LISTED[:1])
    assert fewer.removed == (f"rolebinding/{LISTED[1]}/dispatcher-member",)
    assert not may("create", "apps", "deployments", LISTED[1])
    assert may("create", "apps", "deployments", LISTED[0])
    # a binding made by hand (no identity label) is not removed, but reported
    rest = dev_fleet.cluster(MEMBER).rest()
    crbs = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
    rest.request("POST", crbs, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": f"by-hand-{SUFFIX}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "dispatcher-member-write"},
        "subjects": [{"kind": "ServiceAccount", "name": "dispatcher-member",
                      "namespace": "dispatcher-system"}]})
    try:
        reported = mint(namespaces=LISTED)
        assert reported.removed == ()
        (warning,) = reported.warnings
        assert "may still create Deployments in kube-system" in warning
    finally:
        rest.request("DELETE", f"{crbs}/by-hand-{SUFFIX}")
    assert not may("create", "apps", "deployments", "kube-system")
