"""The install manifests themselves, read from deploy/ (no apiserver needed).

Covers: no wildcard in any Role or ClusterRole; the hub ClusterRole and the member
ClusterRoles (read, bound cluster-wide; write, bound per namespace) grant each catalog
workload kind exactly the verbs the controller uses (pods create: the admission dry-run;
namespaces get: the Pod Security labels, hub and member), and no resource outside the
catalog; every CRD of deploy/base/crds is installed by the
kustomization; the Deployment is hardened (non-root, read-only root, no capabilities, RuntimeDefault
seccomp, probes on the config's server port) and runs as the ServiceAccount the RBAC
binds; the in-cluster config is config/default.yaml but for the hub kubeconfig.
Not covered here: what an apiserver makes of them (test_rbac_hub.py, test_rbac_member.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher import config as configmod
from dispatcher.devfleet.workload_crds import WORKLOAD_KINDS
from dispatcher.kube.gangapis import API_OF

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"

# Plurals of the catalog's built-in (non-CRD) kinds; CRD kinds come from the dev fleet's
# stand-in CRDs, which carry each framework's real plural.
BUILTIN_PLURALS = {("batch", "Job"): "jobs", ("batch", "CronJob"): "cronjobs",
                   ("apps", "Deployment"): "deployments",
                   ("apps", "StatefulSet"): "statefulsets", ("", "Pod"): "pods"}

# What the controller's requests need (grep dispatcher/control and dispatcher/fleet):
# hub workloads are watched, read (a conflict; a record whose workload left the cache) and
# merge-patched (a legacy finalizer removed), their status merge-patched (mirroring);
# Dispatches are created with our finalizer and merge-patched to take it off; member copies
# are created, watched, read, merge-patched (hub spec changes) and deleted.
HUB_WORKLOAD_VERBS = {"get", "list", "watch", "patch"}
HUB_STATUS_VERBS = {"patch"}
MEMBER_WORKLOAD_VERBS = {"create", "get", "list", "watch", "patch", "delete"}
# ... split on the member: reads (copies are watched across namespaces by label) are bound
# cluster-wide, writes per namespace; pods are created as an admission dry-run.
MEMBER_READ_VERBS = {"get", "list", "watch"}
MEMBER_WRITE_VERBS = {"create", "patch", "delete"}


def load(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def kustomized(directory: Path) -> Iterator[dict[str, Any]]:
    """The documents of a kustomization's ``resources`` (files, and folders as bases)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    for entry in kustomization["resources"]:
        path = directory / entry
        yield from kustomized(path) if path.is_dir() else load(path)


def one(docs: Iterator[dict[str, Any]] | list[dict[str, Any]], kind: str, name: str
        ) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} found"
    return found[0]


def catalog_kinds() -> set[tuple[str, str]]:
    """(group, kind) of every definition's root component in definitions/ (read as YAML,
    so a definition being edited elsewhere cannot break these checks)."""
    kinds = set()
    for path in (ROOT / "definitions").glob("*.yaml"):
        doc = yaml.safe_load(path.read_text())
        kind = doc["spec"]["structureDefinition"]["rootComponent"]["kind"]
        kinds.add((kind.get("group", ""), kind["kind"]))
    return kinds


def catalog_resources() -> set[tuple[str, str]]:
    """(group, plural) of every root kind of the built-in catalog."""
    plurals = {(g, k): p for g, _, k, p in WORKLOAD_KINDS} | BUILTIN_PLURALS
    return {(group, plurals[(group, kind)]) for group, kind in catalog_kinds()}


def grants(rules: list[dict[str, Any]]) -> dict[tuple[str, str], set[str]]:
    """(group, resource) -> verbs, over rules without resourceNames."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in rules:
        if rule.get("resourceNames"):
            continue
        for group in rule.get("apiGroups", []):
            for resource in rule.get("resources", []):
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def all_roles() -> list[tuple[Path, dict[str, Any]]]:
    roles = []
    paths = [*sorted((DEPLOY / "base").glob("*.yaml")),
             *sorted((DEPLOY / "shared-hub").glob("*.yaml")),
             *sorted((DEPLOY / "member").rglob("*.yaml"))]
    for path in paths:
        roles += [(path, d) for d in load(path) if d.get("kind") in ("Role", "ClusterRole")]
    return roles


def test_no_role_uses_a_wildcard() -> None:
    roles = all_roles()
    assert len(roles) >= 4
    for path, role in roles:
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "resourceNames",
                        "nonResourceURLs"):
                assert "*" not in rule.get(key, []), f"{path.name}: {rule}"
                assert not any("*" in str(v) for v in rule.get(key, [])), f"{path.name}"


def test_hub_role_grants_each_catalog_kind_exactly_what_the_controller_uses() -> None:
    role = one(kustomized(DEPLOY), "ClusterRole", "dispatcher")
    granted = grants(role["rules"])
    workloads = catalog_resources()
    assert len(workloads) == len(catalog_kinds()) >= 17
    for group, plural in workloads:
        assert granted.get((group, plural)) == HUB_WORKLOAD_VERBS, (group, plural)
        assert granted.get((group, f"{plural}/status")) == HUB_STATUS_VERBS, (group, plural)
    assert {r: granted.pop(r) for r in [
        ("dispatcher.io", "memberclusters"), ("dispatcher.io", "memberclusters/status"),
        ("dispatcher.io", "dispatches"), ("dispatcher.io", "dispatches/status"),
        ("apiextensions.k8s.io", "customresourcedefinitions"), ("", "events"),
        ("optimization.nvidia.com", "resourceinterfaces"),
        ("optimization.nvidia.com", "resourceinterfaces/status"),
        ("run.ai", "kartas"), ("run.ai", "kartas/status"), ("", "namespaces")]} == {
        ("dispatcher.io", "memberclusters"): {"list", "watch"},
        ("dispatcher.io", "memberclusters/status"): {"patch"},
        ("dispatcher.io", "dispatches"): {"get", "list", "watch", "create", "patch",
                                          "delete"},
        ("dispatcher.io", "dispatches/status"): {"patch"},
        ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
        ("", "events"): {"create"},
        ("optimization.nvidia.com", "resourceinterfaces"): {"list", "watch"},
        ("optimization.nvidia.com", "resourceinterfaces/status"): {"patch"},
        ("run.ai", "kartas"): {"list", "watch"}, ("run.ai", "kartas/status"): {"patch"},
        # the hub namespace's Pod Security labels, carried to the member (by name only)
        ("", "namespaces"): {"get"}}
    extra = set(granted) - workloads - {(g, f"{p}/status") for g, p in workloads}
    assert extra == set()


def test_hub_secrets_and_lease_are_namespaced_to_dispatcher_system() -> None:
    docs = list(kustomized(DEPLOY))
    role = one(docs, "Role", "dispatcher")
    assert role["metadata"]["namespace"] == "dispatcher-system"
    assert grants(role["rules"])[("", "secrets")] == {"get", "list", "watch"}
    named = [r for r in role["rules"] if r.get("resourceNames")]
    assert named == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "resourceNames": [configmod.load(DEPLOY / "base" / "config.yaml")
                                        .control.leader.name],
                      "verbs": ["get", "update"]}]
    cluster_role = one(docs, "ClusterRole", "dispatcher")
    assert ("", "secrets") not in grants(cluster_role["rules"])


def test_member_roles_grant_each_catalog_kind_and_read_only_capacity() -> None:
    docs = list(kustomized(DEPLOY / "member"))
    read = grants(one(docs, "ClusterRole", "dispatcher-member")["rules"])
    write = grants(one(docs, "ClusterRole", "dispatcher-member-write")["rules"])
    workloads = catalog_resources()
    for resource in workloads:
        assert read.get(resource) == MEMBER_READ_VERBS, resource
        assert write.get(resource) == MEMBER_WRITE_VERBS, resource
        assert read[resource] | write[resource] == MEMBER_WORKLOAD_VERBS
    assert read[("", "nodes")] == {"list", "watch"}
    # Pods: capacity (list, watch) and a catalog kind (bare Pods); create is also the pod
    # admission dry-run (?dryRun=All)
    assert read[("", "pods")] == MEMBER_READ_VERBS and write[("", "pods")] == MEMBER_WRITE_VERBS
    # the bound namespace's own Pod Security labels, compared with the hub namespace's
    assert write[("", "namespaces")] == {"get"}
    # the gang objects created with a copy (control/gangwrites), of every dialect the
    # dispatcher speaks (kube.gangapis.API_OF): no list, no watch
    gang_objects = {(gvk.group, f"{gvk.kind.lower()}s") for gvk in API_OF.values()}
    assert ("scheduling.k8s.io", "podgroups") in gang_objects  # 1.36+'s built-in ones
    for resource in gang_objects:
        assert write.get(resource) == {"create", "get", "patch", "delete"}, resource
    # a Kueue member's queues (quota as capacity) and Workloads (admission): read only
    kueue = {("kueue.x-k8s.io", r)
             for r in ("clusterqueues", "localqueues", "resourceflavors", "workloads")}
    for resource in kueue:
        assert read.get(resource) == {"list", "watch"} and resource not in write, resource
    assert set(read) - workloads - kueue - {("", "nodes"), ("", "pods")} == set()
    assert set(write) - workloads - gang_objects - {("", "pods"), ("", "namespaces")} == set()
    overlay = list(kustomized(DEPLOY / "member" / "cluster-wide"))
    create_ns = grants(one(overlay, "ClusterRole", "dispatcher-member-namespaces")["rules"])
    assert create_ns == {("", "namespaces"): {"create"}}
    assert not [d for d in docs if d["metadata"]["name"] == "dispatcher-member-namespaces"]


def test_every_crd_is_installed_by_the_kustomization() -> None:
    listed = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())["resources"]
    crds = sorted(f"crds/{p.name}" for p in (DEPLOY / "base" / "crds").glob("*.yaml"))
    assert crds and set(crds) <= set(listed)


def test_deployment_is_hardened_and_probes_the_configured_port() -> None:
    docs = list(kustomized(DEPLOY))
    pod = one(docs, "Deployment", "dispatcher")["spec"]["template"]["spec"]
    binding = one(docs, "ClusterRoleBinding", "dispatcher")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": "dispatcher-system"}]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    server = configmod.load(DEPLOY / "base" / "config.yaml").control.server
    (port,) = container["ports"]
    assert port["containerPort"] == server.port
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port["name"]}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port["name"]}
    assert container["args"][-1] == "/etc/dispatcher/config.yaml"
    service = one(docs, "Service", "dispatcher-metrics")
    labels = one(docs, "Deployment", "dispatcher")["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()


def test_in_cluster_config_is_the_default_but_for_the_hub_kubeconfig_and_binds() -> None:
    """Two differences: the pod's ServiceAccount, and the listen addresses (loopback by
    default, so a laptop's ``dispatcher run`` opens nothing to its network; the pod's IP
    in-cluster, fenced by the NetworkPolicy)."""
    deployed = yaml.safe_load((DEPLOY / "base" / "config.yaml").read_text())
    default = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    assert deployed["hub"].pop("kubeconfig") == "in-cluster.kubeconfig"
    default["hub"].pop("kubeconfig")
    for section in ("server", "webhook"):
        assert deployed[section].pop("address") == "0.0.0.0"
        assert default[section].pop("address") == "127.0.0.1"
    assert deployed == default
    loaded = configmod.load(DEPLOY / "base" / "config.yaml")
    assert loaded.hub_kubeconfig == str(DEPLOY / "base" / "in-cluster.kubeconfig")
    kubeconfig = yaml.safe_load((DEPLOY / "base" / "in-cluster.kubeconfig").read_text())
    assert kubeconfig["users"][0]["user"] == {
        "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}


@pytest.mark.parametrize("path", ["Dockerfile"])
def test_image_runs_as_non_root(path: str) -> None:
    text = (ROOT / path).read_text()
    assert "FROM python:3.11-slim" in text
    users = [line.split()[1] for line in text.splitlines() if line.startswith("USER ")]
    assert users and all(not u.startswith(("root", "0")) for u in users)


def test_shared_hub_overlay_holds_every_catalog_kind_and_fails_closed() -> None:
    """``deploy/shared-hub``: the webhook's rules name every kind of the catalog (so no
    dispatched kind is created unheld), it fails closed, skips the controller's namespace,
    and the controller may patch that one configuration and nothing else of its kind."""
    docs = list(kustomized(DEPLOY / "shared-hub"))
    hook = one(docs, "MutatingWebhookConfiguration", "dispatcher")["webhooks"][0]
    assert hook["failurePolicy"] == "Fail" and hook["sideEffects"] == "None"
    held = {(g, r) for rule in hook["rules"] for g in rule["apiGroups"]
            for r in rule["resources"]}
    assert held == catalog_resources()
    assert "dispatcher-system" in hook["namespaceSelector"]["matchExpressions"][0]["values"]
    role = one(docs, "ClusterRole", "dispatcher-webhook")
    assert role["rules"] == [{"apiGroups": ["admissionregistration.k8s.io"],
                              "resources": ["mutatingwebhookconfigurations"],
                              "resourceNames": ["dispatcher"], "verbs": ["get", "patch"]}]
    kustomization = yaml.safe_load((DEPLOY / "shared-hub" / "kustomization.yaml").read_text())
    patch = yaml.safe_load(kustomization["patches"][0]["patch"])
    assert [op["value"] for op in patch[:2]] == ["--hub-mode", "shared"]
    service = one(docs, "Service", "dispatcher-webhook")
    assert service["spec"]["ports"][0]["targetPort"] == patch[2]["value"]["name"]


def test_both_installs_fence_the_controllers_ports() -> None:
    """Issue 35: 8080 and 9443 were open to every pod of the hub. A NetworkPolicy lets
    the metrics and health port in only from namespaces labelled ``dispatcher.io/metrics``
    and, on a shared hub, the webhook port (from the apiserver, whose address is not a
    pod's); nothing else."""
    from tests.integration.test_chart import kustomize  # kustomize itself: patches applied

    for overlay, webhook in ((DEPLOY, False), (DEPLOY / "shared-hub", True)):
        policy = one(kustomize(overlay), "NetworkPolicy", "dispatcher")
        assert policy["spec"]["policyTypes"] == ["Ingress"]
        assert policy["spec"]["podSelector"]["matchLabels"] == {
            "app.kubernetes.io/name": "dispatcher", "app.kubernetes.io/component": "controller"}
        rules = policy["spec"]["ingress"]
        assert rules[0] == {"ports": [{"port": "http", "protocol": "TCP"}], "from": [
            {"namespaceSelector": {"matchLabels": {"dispatcher.io/metrics": "true"}}}]}
        assert rules[1:] == ([{"ports": [{"port": "webhook", "protocol": "TCP"}]}]
                             if webhook else [])


def test_the_write_fence_covers_every_kind_the_controller_may_patch() -> None:
    """The ValidatingAdmissionPolicy (``deploy/base/admission-policy.yaml``) must name
    every resource the ClusterRole lets the controller patch outside its own API group:
    a kind added to the RBAC but not to the policy would be patchable without a fence."""
    docs = list(kustomized(DEPLOY / "base"))
    role = one(docs, "ClusterRole", "dispatcher")
    patchable = {(g, r) for (g, r), verbs in grants(role["rules"]).items()
                 if "patch" in verbs
                 and g not in ("dispatcher.io", "optimization.nvidia.com", "run.ai")}
    policy = one(docs, "ValidatingAdmissionPolicy", "dispatcher-writes")
    fenced = {(g, r) for rule in policy["spec"]["matchConstraints"]["resourceRules"]
              for g in rule["apiGroups"] for r in rule["resources"]}
    assert patchable == fenced, (patchable - fenced, fenced - patchable)
    assert patchable >= {(g, r) for g, r in catalog_resources()}
    binding = one(docs, "ValidatingAdmissionPolicyBinding", "dispatcher-writes")
    assert binding["spec"] == {"policyName": "dispatcher-writes", "validationActions": ["Deny"]}
