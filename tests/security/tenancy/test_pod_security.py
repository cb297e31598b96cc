"""The hub namespace's Pod Security level, carried on every path that makes a member
namespace and checked where one exists (issue 24, finding 1), on real apiservers.

The finding, replayed: (a) ``clusters add --create-identity --namespace NS
--create-namespaces`` made the member namespace with no Pod Security labels, and a
privileged, hostNetwork, hostPID, hostPath ``/`` Job from a hub namespace enforcing
``restricted`` ran; (b) the shipped hub ClusterRole could not read namespaces, the 403 was
swallowed and the member namespace got the ``baseline`` floor instead of the hub's
``restricted``. Now: (a) the command labels the member namespace ``restricted`` (one
listed but missing on the hub gets the floor, and the command says so) and the
controller, with the very identity the command minted, has that Job refused by the
member's own PodSecurity admission in the dry-run (``PodNotAdmitted``, no copy) while a
compliant Job is copied (so the identity may read its namespace); (b) the controller bound
by the shipped RBAC (``kubectl apply -k deploy/``, a TokenRequest token of its
ServiceAccount) reads the hub namespace and creates the member namespace ``restricted``;
bound by the same rules but ``get`` on namespaces, its Dispatch is Failed with
``HubNamespaceUnreadable`` and the apiserver's words, and no member namespace or copy
exists; (c) a member namespace that exists at ``privileged`` (or with no label) under a
hub namespace at ``restricted`` gets no copy, the reason naming both levels, and does with
``submit.weakerMemberNamespaces: allow``.
The PodSecurity plugin is kube-apiserver's built-in one (the dev fleet turns off only
ServiceAccount and TaintNodesByCondition): the refusals below quote it.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import identity, minting
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import DISPATCHES, MEMBER_CLUSTERS, NAMESPACES, SECRETS, ResourceRef
from tests.integration.harness import Harness, eventually, get_or_none, running

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SYSTEM = "dispatcher-system"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)
ENFORCE = "pod-security.kubernetes.io/enforce"
GPU = {"limits": {"nvidia.com/gpu": 1}}

# What ran in the finding: privileged, host network and PID, the node's root mounted.
ESCAPE = {"hostPID": True, "hostNetwork": True,
          "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
          "containers": [{"name": "c", "image": "busybox", "resources": GPU,
                          "securityContext": {"privileged": True},
                          "volumeMounts": [{"name": "root", "mountPath": "/host"}]}]}
# What the restricted profile admits.
COMPLIANT = {"securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                 "seccompProfile": {"type": "RuntimeDefault"}},
             "containers": [{"name": "c", "image": "busybox", "resources": GPU,
                             "securityContext": {"allowPrivilegeEscalation": False,
                                                 "capabilities": {"drop": ["ALL"]}}}]}
PLAIN = {"containers": [{"name": "c", "image": "busybox", "resources": GPU}]}


def _job(name: str, pod: dict[str, Any], *, pin: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if pin:
        meta["annotations"] = {"dispatcher.io/cluster": pin}
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": meta,
            "spec": {"template": {"spec": {"restartPolicy": "Never", **pod}}}}


async def _record(h: Harness, name: str, phase: str) -> dict[str, Any]:
    async def reached() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item(f"job-{name}", h.namespace))
        return record if (record or {}).get("status", {}).get("phase") == phase else None
    found: dict[str, Any] = await eventually(reached, what=f"job {name} {phase}")
    return found


async def _submitted(h: Harness, name: str) -> dict[str, Any]:
    """The Dispatch once the copy exists (Submitted=True; kwok-less members stay there)."""
    async def copied() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item(f"job-{name}", h.namespace))
        conditions = {c["type"]: c for c in
                      (record or {}).get("status", {}).get("conditions") or ()}
        failed = (record or {}).get("status", {}).get("phase") == "Failed"
        assert not failed, record["status"]
        return record if conditions.get("Submitted", {}).get("status") == "True" else None
    found: dict[str, Any] = await eventually(copied, what=f"job {name} copied")
    return found


async def _label(client: KubeClient, namespace: str, labels: dict[str, str | None]) -> None:
    await client.request("PATCH", NAMESPACES.item(namespace), content_type=JSON_MERGE_PATCH,
                         body={"metadata": {"labels": labels}})


def _submitted_message(record: dict[str, Any]) -> str:
    conditions = {c["type"]: c for c in record["status"]["conditions"]}
    assert conditions["Submitted"]["reason"] == "Rejected"
    return str(conditions["Submitted"]["message"])


# -- (a) clusters add --create-identity --namespace NS --create-namespaces -----------------

def test_clusters_add_carries_the_hub_level_and_the_escape_is_refused(
        dev_fleet: FleetState, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    suffix = uuid.uuid4().hex[:6]
    namespace, name = f"team-a-{suffix}", f"psa-{suffix}"
    nowhere = f"team-b-{suffix}"  # listed, but no such namespace on the hub
    hub, member = dev_fleet.cluster("hub"), dev_fleet.cluster("member-1")
    hub.rest().request("POST", NAMESPACES.collection(), {
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": namespace, "labels": {ENFORCE: "restricted"}}})
    try:
        code = main(["clusters", "add", name, "--kubeconfig", member.kubeconfig,
                     "--create-identity", "--namespace", namespace, "--namespace", nowhere,
                     "--create-namespaces",
                     "--token-source", "request", "--hub-kubeconfig", hub.kubeconfig])
        out = capsys.readouterr().out
        assert code == 0, out
        assert (f"namespace/{namespace} created on {name}: Pod Security enforce "
                f"restricted:latest (hub namespace {namespace})") in out
        assert (f"namespace/{nowhere} created on {name}: Pod Security enforce "
                f"baseline:latest (no hub namespace {nowhere}: the floor, "
                f"--pod-security-floor baseline)") in out
        labels = member.rest().get(NAMESPACES.item(namespace))["metadata"]["labels"]
        assert labels[ENFORCE] == "restricted"
        labels = member.rest().get(NAMESPACES.item(nowhere))["metadata"]["labels"]
        assert labels[ENFORCE] == "baseline"
        # the controller with the identity the command registered, not the admin
        secret = hub.rest().get(SECRETS.item(f"{name}-kubeconfig", SYSTEM))
        minted = tmp_path / "minted.kubeconfig"
        minted.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
        asyncio.run(_escape_refused_with_the_minted_identity(dev_fleet, namespace, minted))
    finally:
        main(["clusters", "remove", name, "--hub-kubeconfig", hub.kubeconfig])
        for rest, names in ((hub.rest(), [namespace]), (member.rest(), [namespace, nowhere])):
            for ns in names:
                rest.request("DELETE", NAMESPACES.item(ns))


async def _escape_refused_with_the_minted_identity(dev_fleet: FleetState, namespace: str,
                                                   minted: Path) -> None:
    async with running(dev_fleet, namespace=namespace, create_namespaces=False,
                       kubeconfigs={"member-1": str(minted)}) as h:
        await h.hub.request("POST", JOBS.collection(namespace),
                            body=_job("escape", ESCAPE, pin="member-1"))
        await h.hub.request("POST", JOBS.collection(namespace),
                            body=_job("fine", COMPLIANT, pin="member-1"))
        record = await _record(h, "escape", "Failed")
        message = _submitted_message(record)
        assert "PodNotAdmitted" in message and "PodSecurity" in message
        assert '"restricted:latest"' in message and "privileged" in message
        assert await get_or_none(h.members["member-1"], JOBS.item("escape", namespace)) is None
        await _submitted(h, "fine")
        assert await get_or_none(h.members["member-1"], JOBS.item("fine", namespace))


# -- (b) the controller bound by the shipped hub RBAC --------------------------------------

def _kubectl(*args: str, kubeconfig: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    return subprocess.run([str(ensure_binaries().kubectl), "--kubeconfig", kubeconfig, *args],
                          capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.fixture(scope="module")
def shipped(dev_fleet: FleetState) -> dict[str, Any]:
    """deploy/ applied on the hub (as an operator does); the hub's admin kubeconfig."""
    hub = dev_fleet.cluster("hub")
    done = _kubectl("apply", "-k", str(ROOT / "deploy"), kubeconfig=hub.kubeconfig)
    assert done.returncode == 0, done.stderr
    rest = hub.rest()
    for _ in range(3):  # a changed CRD re-initialises its storage for a moment
        time.sleep(0.3)
        for ref in (MEMBER_CLUSTERS, DISPATCHES):
            rest.wait_ok(ref.collection(), timeout=30)
    loaded: dict[str, Any] = yaml.safe_load(Path(hub.kubeconfig).read_text())
    return loaded


async def _token_kubeconfig(admin_kubeconfig: dict[str, Any], account: str
                            ) -> dict[str, Any]:
    async with await KubeClient.from_kubeconfig(admin_kubeconfig, name="hub") as admin:
        token, _ = await minting.request_token(admin, namespace=SYSTEM, name=account,
                                                expiration_s=3600)
    return identity.token_kubeconfig(admin_kubeconfig, token=token, user=account)


async def test_the_shipped_rbac_reads_the_hub_namespace_and_carries_restricted(
        dev_fleet: FleetState, shipped: dict[str, Any]) -> None:
    kubeconfig = await _token_kubeconfig(shipped, "dispatcher")
    async with running(dev_fleet, hub_kubeconfig=kubeconfig) as h:
        await _label(h.hub, h.namespace, {ENFORCE: "restricted"})
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=_job("fine", COMPLIANT, pin="member-1"))
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=_job("escape", ESCAPE, pin="member-1"))
        await _submitted(h, "fine")
        made = await h.members["member-1"].request("GET", NAMESPACES.item(h.namespace))
        assert made["metadata"]["labels"][ENFORCE] == "restricted"  # not the baseline floor
        assert "PodNotAdmitted" in _submitted_message(await _record(h, "escape", "Failed"))


@pytest.fixture
async def without_namespace_read(shipped: dict[str, Any]) -> Any:
    """A ServiceAccount bound to the shipped hub ClusterRole minus its namespaces rule."""
    account = f"dispatcher-nons-{uuid.uuid4().hex[:6]}"
    role = next(d for d in yaml.safe_load_all((ROOT / "deploy" / "base" / "rbac.yaml").read_text())
                if d and d["kind"] == "ClusterRole")
    rules = [r for r in role["rules"] if "namespaces" not in r["resources"]]
    assert len(rules) == len(role["rules"]) - 1
    bodies = [
        (f"/api/v1/namespaces/{SYSTEM}/serviceaccounts",
         {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}}),
        (f"{RBAC}/clusterroles", {**copy.deepcopy(role), "metadata": {"name": account},
                                  "rules": rules}),
        (f"{RBAC}/clusterrolebindings", {
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": account},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                        "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": SYSTEM}]})]
    async with await KubeClient.from_kubeconfig(shipped, name="hub") as admin:
        for path, body in bodies:
            await admin.request("POST", path, body=body)
        try:
            yield await _token_kubeconfig(shipped, account)
        finally:
            for path, _ in reversed(bodies):
                await admin.request("DELETE", f"{path}/{account}")


async def test_an_unreadable_hub_namespace_is_a_condition_and_nothing_is_made(
        dev_fleet: FleetState, without_namespace_read: dict[str, Any]) -> None:
    async with running(dev_fleet, hub_kubeconfig=without_namespace_read) as h:
        await _label(h.hub, h.namespace, {ENFORCE: "restricted"})
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job("fine", COMPLIANT))
        record = await _record(h, "fine", "Failed")
        message = _submitted_message(record)
        assert "HubNamespaceUnreadable" in message and "forbidden" in message
        assert 'cannot get resource "namespaces"' in message
        assert sorted(record["status"]["excluded"]) == ["member-1", "member-2"]
        for client in h.members.values():  # no floor-only namespace, no copy
            assert await get_or_none(client, NAMESPACES.item(h.namespace)) is None


# -- (c) a member namespace that exists, weaker than the hub's -----------------------------

async def _weaker_members(h: Harness) -> None:
    """The hub namespace at restricted; on the members, one at privileged, one unlabelled."""
    await _label(h.hub, h.namespace, {ENFORCE: "restricted"})
    for member, labels in (("member-1", {ENFORCE: "privileged"}), ("member-2", {})):
        await h.members[member].request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": h.namespace, "labels": labels}})


async def test_a_weaker_member_namespace_is_refused_naming_both_levels(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet, create_namespaces=False) as h:
        await _weaker_members(h)
        await h.hub.request("POST", JOBS.collection(h.namespace), body=_job("plain", PLAIN))
        record = await _record(h, "plain", "Failed")
        assert sorted(record["status"]["excluded"]) == ["member-1", "member-2"]
        reasons = [str(a["reason"]) for a in record["status"]["attempts"]]
        for member, level in (("member-1", "privileged:latest,"),
                              ("member-2", "privileged:latest (no label),")):
            (said,) = [r for r in reasons if r.startswith(f"{member} rejected the copy")]
            assert "NamespaceWeaker" in said, said
            assert f"enforces Pod Security {level} weaker than hub namespace" in said, said
            assert "restricted:latest" in said, said
        for client in h.members.values():
            assert await get_or_none(client, JOBS.item("plain", h.namespace)) is None


async def test_a_weaker_member_namespace_is_used_with_the_opt_out(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet, create_namespaces=False,
                       changes={"weaker_member_namespaces": "allow"}) as h:
        await _weaker_members(h)
        await h.hub.request("POST", JOBS.collection(h.namespace),
                            body=_job("plain", PLAIN, pin="member-1"))
        await _submitted(h, "plain")
        assert await get_or_none(h.members["member-1"], JOBS.item("plain", h.namespace))
