"""`kubectl apply -k deploy/` on a real hub, then what the controller's ServiceAccount may do.

Covers: the kustomization applies with the kubectl built next to the control planes, and
applies again without change; the ServiceAccount's token (TokenRequest) is allowed every
request the controller makes and refused Secrets outside dispatcher-system, CRD writes,
workload creation or deletion, other Leases, Pods, RBAC writes and impersonation, both by
the apiserver's own access reviews and by real calls; `kubectl get memberclusters` and
`kubectl get dispatches -A` print their columns with the values from status.
Not covered here: the member identity (test_rbac_member.py), the controller running with
this token (tests/e2e/test_deploy_rbac.py).
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import identity, minting
from dispatcher.kube import errors
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import DISPATCHES, MEMBER_CLUSTERS, NAMESPACES
from tests.integration.harness import get_or_none

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SYSTEM = "dispatcher-system"


def kubectl(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    return subprocess.run([str(ensure_binaries().kubectl), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.fixture(scope="module")
def installed(dev_fleet: FleetState) -> str:
    """deploy/ applied on the hub; returns the hub's admin kubeconfig path."""
    hub = dev_fleet.cluster("hub").kubeconfig
    done = kubectl("apply", "-k", str(ROOT / "deploy"), kubeconfig=hub)
    assert done.returncode == 0, done.stderr
    # A changed CRD re-initialises its storage (429 for a moment, possibly after a first
    # answer): wait until both serve a few times in a row.
    rest = dev_fleet.cluster("hub").rest()
    for _ in range(3):
        time.sleep(0.3)
        for ref in (MEMBER_CLUSTERS, DISPATCHES):
            rest.wait_ok(ref.collection(), timeout=30)
    return hub


@pytest.fixture
async def admin(installed: str) -> AsyncIterator[KubeClient]:
    async with await KubeClient.from_kubeconfig(
            yaml.safe_load(Path(installed).read_text()), name="hub") as client:
        yield client


@pytest.fixture
async def controller(installed: str, admin: KubeClient) -> AsyncIterator[KubeClient]:
    """A client holding only the dispatcher ServiceAccount's token."""
    token, _ = await minting.request_token(admin, namespace=SYSTEM, name="dispatcher",
                                            expiration_s=3600)
    kubeconfig = identity.token_kubeconfig(yaml.safe_load(Path(installed).read_text()),
                                           token=token, user="dispatcher")
    async with await KubeClient.from_kubeconfig(kubeconfig, name="hub (dispatcher)") as client:
        yield client


async def can(client: KubeClient, verb: str, group: str, resource: str, *, sub: str = "",
              namespace: str = "", name: str = "") -> bool:
    """The apiserver's answer to "may I?" for ``client``'s own identity."""
    attributes = {"verb": verb, "group": group, "resource": resource, "subresource": sub,
                  "namespace": namespace, "name": name}
    review = await client.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
              "spec": {"resourceAttributes": attributes}})
    return bool(review["status"].get("allowed"))


def test_apply_k_installs_and_is_idempotent(installed: str) -> None:
    again = kubectl("apply", "-k", str(ROOT / "deploy"), kubeconfig=installed)
    assert again.returncode == 0, again.stderr
    lines = [line for line in again.stdout.splitlines() if line.strip()]
    assert lines and all(line.endswith("unchanged") for line in lines), again.stdout
    listed = kubectl("get", "serviceaccount,role,rolebinding,deployment,service,configmap",
                     "-n", SYSTEM, "-o", "name", kubeconfig=installed)
    names = set(listed.stdout.split())
    assert {"serviceaccount/dispatcher", "role.rbac.authorization.k8s.io/dispatcher",
            "rolebinding.rbac.authorization.k8s.io/dispatcher", "deployment.apps/dispatcher",
            "service/dispatcher-metrics"} <= names
    assert any(n.startswith("configmap/dispatcher-config-") for n in names)


# (verb, group, resource, subresource, namespace, name): every request the controller makes.
ALLOWED = [
    ("list", "dispatcher.io", "memberclusters", "", "", ""),
    ("watch", "dispatcher.io", "memberclusters", "", "", ""),
    ("patch", "dispatcher.io", "memberclusters", "status", "", "member-1"),
    ("list", "dispatcher.io", "dispatches", "", "", ""),
    ("watch", "dispatcher.io", "dispatches", "", "", ""),
    ("create", "dispatcher.io", "dispatches", "", "team-a", ""),
    ("get", "dispatcher.io", "dispatches", "", "team-a", "jobset-train"),
    ("delete", "dispatcher.io", "dispatches", "", "team-a", "jobset-train"),
    ("patch", "dispatcher.io", "dispatches", "", "team-a", "jobset-train"),  # its finalizer
    ("patch", "dispatcher.io", "dispatches", "status", "team-a", "jobset-train"),
    ("list", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
    ("watch", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
    ("list", "jobset.x-k8s.io", "jobsets", "", "", ""),
    ("watch", "jobset.x-k8s.io", "jobsets", "", "", ""),
    ("get", "jobset.x-k8s.io", "jobsets", "", "team-a", "train"),
    ("patch", "jobset.x-k8s.io", "jobsets", "", "team-a", "train"),
    ("patch", "jobset.x-k8s.io", "jobsets", "status", "team-a", "train"),
    ("patch", "kubeflow.org", "pytorchjobs", "status", "team-b", "ft"),
    ("watch", "batch", "jobs", "", "team-b", ""),
    ("patch", "apps", "deployments", "status", "team-b", "embed"),
    ("create", "", "events", "", "team-b", ""),
    ("get", "", "namespaces", "", "", "team-b"),  # its Pod Security labels
    ("get", "", "secrets", "", SYSTEM, "member-1-kubeconfig"),
    ("list", "", "secrets", "", SYSTEM, ""),
    ("watch", "", "secrets", "", SYSTEM, ""),
    ("create", "coordination.k8s.io", "leases", "", SYSTEM, ""),
    ("get", "coordination.k8s.io", "leases", "", SYSTEM, "dispatcher"),
    ("update", "coordination.k8s.io", "leases", "", SYSTEM, "dispatcher"),
]

REFUSED = [
    ("get", "", "secrets", "", "default", "db-password"),
    ("list", "", "secrets", "", "kube-system", ""),
    ("list", "", "secrets", "", "", ""),
    ("create", "", "secrets", "", SYSTEM, ""),
    ("delete", "", "secrets", "", SYSTEM, "member-1-kubeconfig"),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "",
     "dispatches.dispatcher.io"),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", "", "", ""),
    ("update", "apiextensions.k8s.io", "customresourcedefinitions", "", "",
     "jobsets.jobset.x-k8s.io"),
    ("create", "jobset.x-k8s.io", "jobsets", "", "team-a", ""),
    ("delete", "jobset.x-k8s.io", "jobsets", "", "team-a", "train"),
    ("update", "jobset.x-k8s.io", "jobsets", "", "team-a", "train"),
    ("create", "dispatcher.io", "memberclusters", "", "", ""),
    ("delete", "dispatcher.io", "memberclusters", "", "", "member-1"),
    ("patch", "dispatcher.io", "memberclusters", "", "", "member-1"),
    ("update", "coordination.k8s.io", "leases", "", SYSTEM, "someone-else"),
    ("update", "coordination.k8s.io", "leases", "", "kube-system", "dispatcher"),
    ("create", "", "pods", "", SYSTEM, ""),
    ("get", "", "configmaps", "", "kube-system", "kubeadm-config"),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", "", ""),
    ("escalate", "rbac.authorization.k8s.io", "clusterroles", "", "", "dispatcher"),
    ("impersonate", "", "users", "", "", "admin"),
    ("create", "", "serviceaccounts", "token", SYSTEM, "dispatcher"),
    ("delete", "", "namespaces", "", "", "team-a"),
    ("list", "", "namespaces", "", "", ""),
    ("patch", "", "namespaces", "", "", "team-a"),
]


@pytest.mark.parametrize("attrs", ALLOWED, ids=lambda a: "-".join(filter(None, a[:4])))
async def test_service_account_may_make_every_controller_request(
        controller: KubeClient, attrs: tuple[str, ...]) -> None:
    verb, group, resource, sub, namespace, name = attrs
    assert await can(controller, verb, group, resource, sub=sub, namespace=namespace,
                     name=name)


@pytest.mark.parametrize("attrs", REFUSED, ids=lambda a: "-".join(filter(None, a[:5])))
async def test_service_account_is_refused_everything_else(
        controller: KubeClient, attrs: tuple[str, ...]) -> None:
    verb, group, resource, sub, namespace, name = attrs
    assert not await can(controller, verb, group, resource, sub=sub, namespace=namespace,
                         name=name)


async def test_real_calls_with_the_token(controller: KubeClient, admin: KubeClient) -> None:
    """The same rules, seen through actual requests."""
    namespace = f"rbac-{uuid.uuid4().hex[:6]}"
    await admin.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await admin.request("POST", f"/api/v1/namespaces/{namespace}/secrets", body={
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
        "stringData": {"password": "x"}})
    await controller.request("GET", MEMBER_CLUSTERS.collection())
    await controller.request("GET", f"/api/v1/namespaces/{SYSTEM}/secrets")
    await controller.request("GET", NAMESPACES.item(namespace))  # Pod Security labels
    with pytest.raises(errors.Forbidden):
        await controller.request("GET", NAMESPACES.collection())
    with pytest.raises(errors.Forbidden):
        await controller.request("GET", f"/api/v1/namespaces/{namespace}/secrets/db")
    with pytest.raises(errors.Forbidden):
        await controller.request("GET", "/api/v1/namespaces/kube-system/secrets")
    with pytest.raises(errors.Forbidden):
        await controller.request(
            "DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                      "dispatches.dispatcher.io")
    body = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "Dispatch",
            "metadata": {"name": "probe"},
            "spec": {"workload": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                  "name": "probe", "uid": "u-1"}}}
    await controller.request("POST", DISPATCHES.collection(namespace), body=body)
    patched = await controller.request(
        "PATCH", DISPATCHES.item("probe", namespace, "status"), content_type=JSON_MERGE_PATCH,
        body={"status": {"phase": "Pending"}})
    assert patched["status"]["phase"] == "Pending"
    # The Dispatch itself may be patched (its finalizer comes off once the copy is gone),
    # but its first decision stays what it was (the CRD's CEL rule, whoever asks).
    await controller.request("DELETE", DISPATCHES.item("probe", namespace))
    decided = {**body, "metadata": {"name": "decided", "finalizers": ["dispatcher.io/dispatch"]},
               "spec": {**body["spec"], "decision": {"cluster": "member-1", "attempt": 1}}}
    await controller.request("POST", DISPATCHES.collection(namespace), body=decided)
    with pytest.raises(errors.Invalid):
        await controller.request("PATCH", DISPATCHES.item("decided", namespace),
                                 content_type=JSON_MERGE_PATCH,
                                 body={"spec": {"decision": {"cluster": "member-2"}}})
    await controller.request("DELETE", DISPATCHES.item("decided", namespace))
    released = await controller.request(
        "PATCH", DISPATCHES.item("decided", namespace), content_type=JSON_MERGE_PATCH,
        body={"metadata": {"finalizers": None}})
    assert not released["metadata"].get("finalizers")
    assert await get_or_none(controller, DISPATCHES.item("decided", namespace)) is None
    with pytest.raises(errors.Forbidden):
        await controller.request("POST", "/apis/jobset.x-k8s.io/v1alpha2/namespaces/"
                                 f"{namespace}/jobsets", body={
                                     "apiVersion": "jobset.x-k8s.io/v1alpha2",
                                     "kind": "JobSet", "metadata": {"name": "x"}})
    await admin.request("DELETE", NAMESPACES.item(namespace))


def columns(output: str) -> list[dict[str, str]]:
    """Rows of a kubectl table, split on the header's column starts."""
    lines = output.splitlines()
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    names = header.split()
    rows = []
    for line in lines[1:]:
        cells = [line[s:e].strip() for s, e in zip(starts, [*starts[1:], None], strict=True)]
        rows.append(dict(zip(names, cells, strict=True)))
    return rows


async def test_kubectl_get_prints_useful_columns(installed: str, admin: KubeClient) -> None:
    member = f"columns-{uuid.uuid4().hex[:6]}"
    obj: dict[str, Any] = {
        "apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
        "metadata": {"name": member},
        "spec": {"kubeconfigSecretRef": {"namespace": SYSTEM, "name": f"{member}-kubeconfig"}}}
    await admin.request("POST", MEMBER_CLUSTERS.collection(), body=obj)
    await admin.request("PATCH", MEMBER_CLUSTERS.item(member, subresource="status"),
                        content_type=JSON_MERGE_PATCH, body={"status": {
                            "conditions": [{"type": "Ready", "status": "True",
                                            "reason": "Synced"}],
                            "kubernetesVersion": "v1.35.4",
                            "capacity": {"nodes": 3, "gpus": {"allocatable": 20, "free": 12,
                                                              "largestFreeBlock": 8}}}})
    namespace = f"cols-{uuid.uuid4().hex[:6]}"
    await admin.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await admin.request("POST", DISPATCHES.collection(namespace), body={
        "apiVersion": "dispatcher.io/v1alpha1", "kind": "Dispatch",
        "metadata": {"name": "jobset-train"},
        "spec": {"workload": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                              "name": "train", "uid": "u-1"}}})
    await admin.request("PATCH", DISPATCHES.item("jobset-train", namespace, "status"),
                        content_type=JSON_MERGE_PATCH, body={"status": {
                            "phase": "Running", "demand": {"pods": 2, "gpus": 16},
                            "decision": {"cluster": member, "attempt": 1}}})
    try:
        got = kubectl("get", "memberclusters", member, kubeconfig=installed)
        assert got.returncode == 0, got.stderr
        (row,) = columns(got.stdout)
        assert row["NAME"] == member
        assert (row["READY"], row["NODES"], row["GPUS"], row["FREE"]) == ("True", "3", "20", "12")
        assert row["AGE"]
        wide = kubectl("get", "memberclusters", member, "-o", "wide", kubeconfig=installed)
        (row,) = columns(wide.stdout)
        assert row["VERSION"] == "v1.35.4" and row["LARGEST-BLOCK"] == "8"

        got = kubectl("get", "dispatches", "-A", kubeconfig=installed)
        assert got.returncode == 0, got.stderr
        rows = [r for r in columns(got.stdout) if r["NAMESPACE"] == namespace]
        assert len(rows) == 1
        row = rows[0]
        assert (row["NAME"], row["WORKLOAD"], row["KIND"], row["GPUS"], row["CLUSTER"],
                row["STATUS"]) == ("jobset-train", "train", "JobSet", "16", member, "Running")
        short = kubectl("get", "dsp", "-n", namespace, "-o", "wide", kubeconfig=installed)
        (row,) = columns(short.stdout)
        assert (row["PODS"], row["ATTEMPT"]) == ("2", "1")
    finally:
        await admin.request("DELETE", MEMBER_CLUSTERS.item(member))
        await admin.request("DELETE", NAMESPACES.item(namespace))


async def test_in_cluster_kubeconfig_authenticates_with_the_mounted_token(
        installed: str, admin: KubeClient, tmp_path: Path) -> None:
    """deploy/base/in-cluster.kubeconfig (tokenFile + CA file) read the way the controller reads
    its hub kubeconfig; only the pod's mount paths and the server address are swapped."""
    token, _ = await minting.request_token(admin, namespace=SYSTEM, name="dispatcher",
                                            expiration_s=3600)
    hub_admin = yaml.safe_load(Path(installed).read_text())
    mount = "/var/run/secrets/kubernetes.io/serviceaccount"
    (tmp_path / "token").write_text(token)
    (tmp_path / "ca.crt").write_bytes(base64.b64decode(
        hub_admin["clusters"][0]["cluster"]["certificate-authority-data"]))
    text = (ROOT / "deploy" / "base" / "in-cluster.kubeconfig").read_text()
    assert text.count(mount) == 2
    kubeconfig = yaml.safe_load(text.replace(mount, str(tmp_path)).replace(
        "https://kubernetes.default.svc", hub_admin["clusters"][0]["cluster"]["server"]))
    async with await KubeClient.from_kubeconfig(kubeconfig, name="hub") as client:
        await client.request("GET", MEMBER_CLUSTERS.collection())
        with pytest.raises(errors.Forbidden):
            await client.request("GET", "/api/v1/namespaces/default/secrets")


async def test_the_controllers_writes_of_hub_workloads_are_fenced_to_finalizers_and_status(
        controller: KubeClient, admin: KubeClient) -> None:
    """Issue 35: the ClusterRole's cluster-wide ``patch`` let the controller's token
    rewrite any Deployment or Pod (a dry-run patch of a kube-system Deployment to a foreign
    image was accepted). The shipped ValidatingAdmissionPolicy lets its updates of the
    catalog's kinds change only finalizers (and status, through the status subresource),
    and nothing in kube-* namespaces; RBAC still allows the verbs."""
    namespace = f"fence-{uuid.uuid4().hex[:6]}"
    await admin.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    deployments = "/apis/apps/v1/namespaces/{ns}/deployments"
    body = {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "finalizers": ["dispatcher.io/dispatch"]},
            "spec": {"paused": True, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                         "containers": [{"name": "c", "image": "registry.invalid/web:1"}]}}}}
    for ns in (namespace, "kube-system"):
        await admin.request("POST", deployments.format(ns=ns), body=body)

    async def patch(ns: str, change: dict[str, Any], *, sub: str = "",
                    dry: bool = True) -> None:
        path = deployments.format(ns=ns) + "/web" + (f"/{sub}" if sub else "")
        await controller.request("PATCH", path, body=change, content_type=JSON_MERGE_PATCH,
                                 query=[("dryRun", "All")] if dry else [])

    try:
        foreign = {"spec": {"template": {"spec": {"containers": [
            {"name": "c", "image": "attacker.invalid/own:1"}], "serviceAccountName": "admin"}}}}
        for ns, change in ((namespace, foreign), ("kube-system", foreign),
                           (namespace, {"metadata": {"labels": {"x": "y"}}}),
                           (namespace, {"metadata": {"ownerReferences": [{
                               "apiVersion": "v1", "kind": "ConfigMap", "name": "c",
                               "uid": "u", "controller": True}]}}),
                           ("kube-system", {"metadata": {"finalizers": None}})):
            with pytest.raises(errors.KubeError) as caught:
                await patch(ns, change)
            assert "dispatcher-writes" in caught.value.detail, caught.value.detail
        with pytest.raises(errors.KubeError):
            await patch("kube-system", {"status": {"replicas": 0}}, sub="status")
        # what it needs: the status, and the legacy finalizer off
        await patch(namespace, {"status": {"observedGeneration": 1}}, sub="status")
        await patch(namespace, {"metadata": {"finalizers": None}}, dry=False)
        left = await admin.request("GET", deployments.format(ns=namespace) + "/web")
        assert not left["metadata"].get("finalizers")
    finally:
        for ns in (namespace, "kube-system"):
            with contextlib.suppress(errors.KubeError):
                await admin.request("PATCH", deployments.format(ns=ns) + "/web",
                                    body={"metadata": {"finalizers": None}},
                                    content_type=JSON_MERGE_PATCH)
                await admin.request("DELETE", deployments.format(ns=ns) + "/web")
        await admin.request("DELETE", NAMESPACES.item(namespace))
