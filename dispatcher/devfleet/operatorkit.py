"""What every workload operator of a real member is made of (``devfleet/operators.py`` runs
them): its run (argv, ports, health URL, CRDs, webhook configurations, objects made first),
its release documents read once, its CRDs without conversion webhooks (the hub gets the
same), its webhook configurations pointed at its loopback port, its serving certificate."""

from __future__ import annotations

import base64
import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet.binaries import OperatorBinary
from dispatcher.kube import pki

__all__ = ["LOOPBACK_PROXY", "WEBHOOK_PATHS", "OperatorRun", "Preparer", "crds_of", "hub_crds",
           "load_documents", "namespace_object", "release_files", "serving_cert",
           "webhook_configs"]

WEBHOOK_PATHS = {
    "admissionregistration.k8s.io/v1/MutatingWebhookConfiguration":
        "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
    "admissionregistration.k8s.io/v1/ValidatingWebhookConfiguration":
        "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
}


@dataclass(frozen=True, kw_only=True)
class OperatorRun:
    """Everything needed to install and start one operator on one member."""

    name: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    health: str
    """A loopback URL answering 200 once the operator (and its webhook server) is ready."""
    crds: list[dict[str, Any]]
    webhooks: list[dict[str, Any]]
    """Mutating/ValidatingWebhookConfigurations to register with the member's apiserver."""
    objects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(collection path, object) created before the operator starts and before its webhooks
    are registered (namespace, Secret, its config ConfigMaps, KServe's runtimes)."""


# libyaml's parser when PyYAML has it: the operators' CRDs are megabytes of YAML, read for
# the hub and for every real cluster (tens of seconds of `up` with the pure-Python one).
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.lru_cache(maxsize=64)
def _parsed(path: Path, mtime_ns: int) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d)


def load_documents(path: Path) -> list[dict[str, Any]]:
    """The documents of ``path``, parsed once per process (a fresh copy each call)."""
    return copy.deepcopy(list(_parsed(path, path.stat().st_mtime_ns)))


def _without_conversion(crd: dict[str, Any]) -> dict[str, Any]:
    """The CRD without a conversion webhook (nothing would answer it here)."""
    crd = copy.deepcopy(crd)
    crd["spec"].pop("conversion", None)
    crd["metadata"].pop("annotations", None)  # cert-manager injection, kustomize leftovers
    crd["metadata"].pop("creationTimestamp", None)
    crd.pop("status", None)
    return crd


def crds_of(op: OperatorBinary) -> list[dict[str, Any]]:
    """The CRDs of ``op``'s module, ready to create (no conversion webhook)."""
    return [_without_conversion(d) for path in op.crd_files() for d in load_documents(path)
            if d.get("kind") == "CustomResourceDefinition"]


def hub_crds(operators: tuple[OperatorBinary, ...], minor: str) -> list[dict[str, Any]]:
    """The real CRDs of every operator a cluster of Kubernetes ``minor`` runs: for a hub
    (which runs none of them) and a member (whose own operators installed the same)."""
    return [crd for op in operators if op.runs_on(minor) for crd in crds_of(op)]


def webhook_configs(op: OperatorBinary, *, port: int, ca_pem: bytes, pod_label: str | None,
                    names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The module's webhook configurations, pointed at ``https://127.0.0.1:port``, named
    ``<op>-<name>`` unless ``names`` maps the upstream name to another one."""
    path = op.crds_dir.parent / "webhooks.yaml"
    if not path.exists():
        return []
    bundle = base64.b64encode(ca_pem).decode()
    configs = []
    for loaded in load_documents(path):
        if f"{loaded.get('apiVersion')}/{loaded.get('kind')}" not in WEBHOOK_PATHS:
            continue
        doc = copy.deepcopy(loaded)
        upstream = doc["metadata"]["name"]
        doc["metadata"] = {"name": (names or {}).get(upstream, f"{op.name}-{upstream}"),
                           "labels": {"dispatcher.io/devfleet-operator": op.name}}
        for hook in doc.get("webhooks", []):
            service = hook["clientConfig"].get("service", {})
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{service.get('path', '/')}",
                                    "caBundle": bundle}
            hook["timeoutSeconds"] = 10
            pods = any("pods" in rule.get("resources", []) for rule in hook.get("rules", []))
            if pods and pod_label:
                hook["objectSelector"] = {"matchExpressions": [
                    {"key": pod_label, "operator": "Exists"}]}
        configs.append(doc)
    return configs


def serving_cert(home: Path, ca: pki.CertificateAuthority, name: str) -> Path:
    """A fleet-CA serving certificate for loopback in ``home/<name>-certs/tls.{crt,key}``."""
    certs = home / f"{name}-certs"
    certs.mkdir(parents=True, exist_ok=True)
    cert, key = ca.issue_serving(f"{name}-webhook")
    (certs / "tls.crt").write_bytes(cert)
    (certs / "tls.key").write_bytes(key)
    (certs / "tls.key").chmod(0o600)
    return certs


# One function per operator: (op, home, kubeconfig, ca, free_port) -> OperatorRun.
Preparer = Callable[[OperatorBinary, Path, str, pki.CertificateAuthority, Callable[[], int]],
                    OperatorRun]


LOOPBACK_PROXY = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
                  "NO_PROXY": "127.0.0.1,localhost", "https_proxy": "http://127.0.0.1:9",
                  "http_proxy": "http://127.0.0.1:9", "no_proxy": "127.0.0.1,localhost"}
"""Environment of an operator that would otherwise reach out of the machine (Knative
resolves image tags at registries): every HTTP(S) request but those to the member's
apiserver on loopback goes to the discard port and fails at once."""


def release_files(op: OperatorBinary, name: str) -> list[dict[str, Any]]:
    """The documents of one release manifest copied by the build (``OperatorBuild.files``)."""
    return load_documents(op.files_dir / name)


def namespace_object(name: str) -> tuple[str, dict[str, Any]]:
    return ("/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
