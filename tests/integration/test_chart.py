"""The Helm charts (deploy/chart, deploy/member-chart) against the kustomizations they mirror.

Covers: ``helm lint`` of both charts with their option sets; the hub chart renders exactly
the objects of ``kubectl kustomize deploy/`` (CRDs, RBAC, Deployment, config, Service) and,
with ``hub.mode: shared``, of ``deploy/shared-hub/`` (the webhook Service and
configuration, its RBAC, ``--hub-mode shared``), compared object by object after removing
only what is Helm's own (its labels, the config checksum, kustomize's name hash); the
member chart renders ``deploy/member/`` and, with ``clusterWide``, ``deploy/member/
cluster-wide/``, and its per-namespace RoleBindings are the ones ``clusters add
--create-identity`` makes; the cert-manager and ServiceMonitor options; values that would
run two controllers at once or bind kube-* fail the render; and ``helm template | kubectl
apply --dry-run=server -f -`` is accepted by the dev fleet's real hub (both modes) and a
member. Not covered: cert-manager and prometheus-operator themselves (their CRDs are not
on the dev fleet), an image actually running from the chart.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.binaries import ensure_binaries, ensure_helm
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet import identity

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "chart"
MEMBER_CHART = DEPLOY / "member-chart"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance",
               "app.kubernetes.io/version")
Key = tuple[str, str, str]


def run(*cmd: str | Path, stdin: str | None = None) -> str:
    done = subprocess.run([str(c) for c in cmd], input=stdin, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}: {done.stderr}"
    return done.stdout


def helm(*args: str) -> str:
    return run(ensure_helm(), *args)


def template(chart: Path, *sets: str, namespace: str = "dispatcher-system",
             crds: bool = True) -> list[dict[str, Any]]:
    args = ["template", "dispatcher", str(chart), "-n", namespace,
            *(["--include-crds"] if crds else [])]
    for value in sets:
        args += ["--set", value]
    return [d for d in yaml.safe_load_all(helm(*args)) if d]


def kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = ensure_binaries(members=False).kubectl
    return [d for d in yaml.safe_load_all(run(kubectl, "kustomize", directory)) if d]


def shared_hub_kustomized(tmp: Path) -> list[dict[str, Any]]:
    """What ``kubectl apply -k deploy/shared-hub/`` installs, rendered by kustomize itself
    (``tmp`` is unused: the overlay renders in place since the base moved to deploy/base)."""
    return kustomize(DEPLOY / "shared-hub")


def normalized(docs: list[dict[str, Any]]) -> dict[Key, dict[str, Any]]:
    """Objects by (kind, namespace, name), without what only Helm or kustomize adds: Helm's
    labels, the config checksum annotation, the ConfigMap name hash; the ConfigMap's files
    parsed (their comments differ)."""
    out: dict[Key, dict[str, Any]] = {}
    for raw in docs:
        doc = copy.deepcopy(raw)
        meta = doc["metadata"]
        labels = meta.get("labels") or {}
        for label in HELM_LABELS:
            labels.pop(label, None)
        if doc["kind"] == "ConfigMap" and meta["name"].startswith("dispatcher-config"):
            meta["name"] = "dispatcher-config"
            doc["data"] = {k: yaml.safe_load(v) for k, v in doc["data"].items()}
        if doc["kind"] == "Deployment":
            pod = doc["spec"]["template"]
            annotations = pod["metadata"].pop("annotations", {})
            annotations.pop("checksum/config", None)
            if annotations:
                pod["metadata"]["annotations"] = annotations
            for volume in pod["spec"]["volumes"]:
                if volume.get("configMap", {}).get("name", "").startswith("dispatcher-config"):
                    volume["configMap"]["name"] = "dispatcher-config"
        out[(doc["kind"], meta.get("namespace", ""), meta["name"])] = doc
    return out


def same_objects(chart: dict[Key, dict[str, Any]], kustomized: dict[Key, dict[str, Any]]
                 ) -> None:
    assert sorted(chart) == sorted(kustomized)
    for key, want in kustomized.items():
        assert chart[key] == want, f"{key} differs from the kustomization's"


def test_helm_lint_passes_for_every_option_set() -> None:
    for sets in ((), ("hub.mode=shared",), ("config.mode=multikueue-dispatcher",),
                 ("hub.mode=shared", "certManager.enabled=true", "serviceMonitor.enabled=true",
                  "replicas=2", "namespace.create=true")):
        out = helm("lint", "--strict", str(CHART), *(a for s in sets for a in ("--set", s)))
        assert "0 chart(s) failed" in out
    out = helm("lint", "--strict", str(MEMBER_CHART), "--set", "namespaces={team-a,team-b}")
    assert "0 chart(s) failed" in out


def test_the_hub_chart_renders_the_kustomization() -> None:
    chart = normalized(template(CHART, "namespace.create=true"))
    same_objects(chart, normalized(kustomize(DEPLOY)))
    kinds = {k[0] for k in chart}
    assert {"CustomResourceDefinition", "ClusterRole", "Role", "Deployment", "ConfigMap",
            "Service", "Namespace"} <= kinds
    assert len([k for k in chart if k[0] == "CustomResourceDefinition"]) == \
        len(list((DEPLOY / "base" / "crds").glob("*.yaml")))


def test_shared_mode_renders_the_shared_hub_kustomization(tmp_path: Path) -> None:
    chart = normalized(template(CHART, "namespace.create=true", "hub.mode=shared"))
    kustomized = normalized(shared_hub_kustomized(tmp_path))
    # kustomize's config file keeps hub.mode: dedicated and the --hub-mode shared argument
    # overrides it; the chart writes the mode into the file as well: the same setting
    config = kustomized[("ConfigMap", "dispatcher-system", "dispatcher-config")]
    assert config["data"]["config.yaml"]["hub"]["mode"] == "dedicated"
    config["data"]["config.yaml"]["hub"]["mode"] = "shared"
    same_objects(chart, kustomized)
    assert ("MutatingWebhookConfiguration", "", "dispatcher") in chart
    assert ("ClusterRole", "", "dispatcher-webhook") in chart


def test_multikueue_dispatcher_mode_renders_its_kustomization() -> None:
    """``config.mode=multikueue-dispatcher``: what ``kubectl apply -k
    deploy/multikueue-dispatcher/`` installs (the base, the Kueue rights, ``--mode``)."""
    chart = normalized(template(CHART, "namespace.create=true",
                                "config.mode=multikueue-dispatcher"))
    kustomized = normalized(kustomize(DEPLOY / "multikueue-dispatcher"))
    # as for hub.mode: kustomize's file keeps the default and the argument overrides it
    config = kustomized[("ConfigMap", "dispatcher-system", "dispatcher-config")]
    assert config["data"]["config.yaml"]["mode"] == "dispatch"
    config["data"]["config.yaml"]["mode"] = "multikueue-dispatcher"
    same_objects(chart, kustomized)
    assert ("ClusterRole", "", "dispatcher-multikueue") in chart
    args = chart[("Deployment", "dispatcher-system", "dispatcher")]["spec"]["template"][
        "spec"]["containers"][0]["args"]
    assert args[-2:] == ["--mode", "multikueue-dispatcher"]


def test_cert_manager_and_service_monitor() -> None:
    docs = normalized(template(CHART, "hub.mode=shared", "certManager.enabled=true",
                               "serviceMonitor.enabled=true",
                               "serviceMonitor.labels.release=prometheus", crds=False))
    ns = "dispatcher-system"
    cert = docs[("Certificate", ns, "dispatcher-webhook")]
    assert cert["spec"]["secretName"] == "dispatcher-webhook-cert"
    assert cert["spec"]["dnsNames"] == ["dispatcher-webhook.dispatcher-system.svc",
                                        "dispatcher-webhook.dispatcher-system.svc.cluster.local"]
    assert cert["spec"]["issuerRef"] == {"kind": "Issuer", "name": "dispatcher-selfsigned"}
    assert docs[("Issuer", ns, "dispatcher-selfsigned")]["spec"] == {"selfSigned": {}}
    hook = docs[("MutatingWebhookConfiguration", "", "dispatcher")]
    assert hook["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
        f"{ns}/dispatcher-webhook"
    pod = docs[("Deployment", ns, "dispatcher")]["spec"]["template"]["spec"]
    config = docs[("ConfigMap", ns, "dispatcher-config")]["data"]["config.yaml"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"]
                 if m["name"] == "webhook-certs")
    assert config["webhook"]["certDir"] == mount["mountPath"]
    assert next(v for v in pod["volumes"] if v["name"] == "webhook-certs")["secret"] == \
        {"secretName": "dispatcher-webhook-cert"}
    # cert-manager writes the Secret: the self-managed certificate's rights are not granted
    assert ("Role", ns, "dispatcher-webhook") not in docs
    monitor = docs[("ServiceMonitor", ns, "dispatcher")]
    service = docs[("Service", ns, "dispatcher-metrics")]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= \
        service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == service["spec"]["ports"][0]["name"]
    own = template(CHART, "hub.mode=shared", "certManager.enabled=true",
                   "certManager.issuerRef.kind=ClusterIssuer",
                   "certManager.issuerRef.name=corp-ca", crds=False)
    assert not [d for d in own if d["kind"] == "Issuer"]
    assert next(d for d in own if d["kind"] == "Certificate")["spec"]["issuerRef"] == \
        {"kind": "ClusterIssuer", "name": "corp-ca"}


def test_values_reach_the_objects() -> None:
    docs = normalized(template(
        CHART, "image.repository=registry.example.com/dispatcher", "image.tag=0.2.0",
        "replicas=2", "resources.limits.memory=2Gi", "config.workers=8",
        "config.server.port=9090", "config.leaderElection.name=lease-x", crds=False,
        namespace="gpu-ops"))
    deployment = docs[("Deployment", "gpu-ops", "dispatcher")]
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.example.com/dispatcher:0.2.0"
    assert deployment["spec"]["replicas"] == 2
    assert container["resources"]["limits"]["memory"] == "2Gi"
    assert container["ports"][0]["containerPort"] == 9090
    config = docs[("ConfigMap", "gpu-ops", "dispatcher-config")]["data"]["config.yaml"]
    assert config["workers"] == 8
    assert config["leaderElection"]["namespace"] == config["fleet"]["secretNamespace"] == \
        "gpu-ops"
    role = docs[("Role", "gpu-ops", "dispatcher")]
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
            "resourceNames": ["lease-x"], "verbs": ["get", "update"]} in role["rules"]
    binding = docs[("ClusterRoleBinding", "", "dispatcher")]
    assert binding["subjects"][0]["namespace"] == "gpu-ops"


@pytest.mark.parametrize("sets", [("replicas=2", "config.leaderElection.enabled=false"),
                                  ("hub.mode=mixed",)])
def test_values_that_cannot_work_fail_the_render(sets: tuple[str, ...]) -> None:
    args = [a for s in sets for a in ("--set", s)]
    done = subprocess.run([str(ensure_helm()), "template", "x", str(CHART), *args],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "execution error" in done.stderr


def test_the_member_chart_renders_the_member_kustomizations() -> None:
    same_objects(normalized(template(MEMBER_CHART, "namespace.create=true")),
                 normalized(kustomize(DEPLOY / "member")))
    same_objects(normalized(template(MEMBER_CHART, "namespace.create=true", "clusterWide=true",
                                     "createNamespaces=true")),
                 normalized(kustomize(DEPLOY / "member" / "cluster-wide")))
    docs = template(MEMBER_CHART, "namespaces={team-a,team-b}")
    bindings = [d for d in docs if d["kind"] == "RoleBinding"]
    for binding in bindings:
        for label in HELM_LABELS:
            binding["metadata"]["labels"].pop(label)
    assert bindings == identity.namespace_bindings(identity.load_manifests(DEPLOY / "member"),
                                                   ["team-a", "team-b"])
    for sets in (("namespaces={kube-system}",), ("createNamespaces=true",)):
        done = subprocess.run([str(ensure_helm()), "template", "x", str(MEMBER_CHART),
                               *(a for s in sets for a in ("--set", s))],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode != 0, sets


@pytest.mark.parametrize("sets", [(), ("hub.mode=shared",)], ids=["dedicated", "shared"])
def test_the_real_hub_accepts_the_rendered_chart(dev_fleet: FleetState,
                                                 sets: tuple[str, ...]) -> None:
    """``helm template deploy/chart | kubectl apply --dry-run=server -f -`` on the dev hub."""
    kubectl = ensure_binaries(members=False).kubectl
    rendered = helm("template", "dispatcher", str(CHART), "-n", "dispatcher-system",
                    "--include-crds", *(a for s in sets for a in ("--set", s)))
    out = run(kubectl, "--kubeconfig", dev_fleet.cluster("hub").kubeconfig, "apply",
              "--dry-run=server", "-f", "-", stdin=rendered)
    assert "deployment.apps/dispatcher" in out and "(server dry run)" in out
    assert ("mutatingwebhookconfiguration" in out) == bool(sets)


def test_a_real_member_accepts_the_rendered_member_chart(dev_fleet: FleetState) -> None:
    kubectl = ensure_binaries(members=False).kubectl
    rendered = helm("template", "dispatcher-member", str(MEMBER_CHART), "-n", "default",
                    "--set", "namespaces={default}")
    out = run(kubectl, "--kubeconfig", dev_fleet.cluster("member-1").kubeconfig, "apply",
              "--dry-run=server", "-f", "-", stdin=rendered)
    assert "clusterrole.rbac.authorization.k8s.io/dispatcher-member-write" in out
    assert "rolebinding.rbac.authorization.k8s.io/dispatcher-member" in out


@pytest.mark.parametrize("overlay", ["", "shared-hub", "multikueue-dispatcher"],
                         ids=["dedicated", "shared", "multikueue"])
def test_the_real_hub_accepts_each_kustomization(dev_fleet: FleetState, overlay: str) -> None:
    """``kubectl apply -k deploy/``, ``-k deploy/shared-hub/`` and ``-k
    deploy/multikueue-dispatcher/`` exactly as the operator guide says (server dry-run on
    the dev hub): kustomize itself renders them, so a layout it refuses (a base that
    contains its overlay) fails here."""
    kubectl = ensure_binaries(members=False).kubectl
    out = run(kubectl, "--kubeconfig", dev_fleet.cluster("hub").kubeconfig, "apply",
              "--dry-run=server", "-k", str(DEPLOY / overlay) if overlay else str(DEPLOY))
    assert "deployment.apps/dispatcher" in out and "(server dry run)" in out
    assert ("mutatingwebhookconfiguration" in out) == (overlay == "shared-hub")
    assert ("clusterrole.rbac.authorization.k8s.io/dispatcher-multikueue" in out) == (
        overlay == "multikueue-dispatcher")
