"""The serving operators of a real member: KServe (RawDeployment mode, its
``inferenceservice-config`` and ClusterServingRuntimes) and Knative Serving (its ``config-*``
ConfigMaps and webhooks), configured as their release manifests do."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dispatcher.devfleet.binaries import OperatorBinary
from dispatcher.devfleet.operatorkit import (
    LOOPBACK_PROXY,
    WEBHOOK_PATHS,
    OperatorRun,
    crds_of,
    load_documents,
    namespace_object,
    release_files,
    serving_cert,
    webhook_configs,
)
from dispatcher.kube import pki

__all__ = ["KNATIVE_FEATURES", "KNATIVE_WEBHOOK_PATHS", "KSERVE_NAMESPACE", "knative_configmaps",
           "knative_webhooks", "kserve_config", "kserve_runtimes"]

KSERVE_NAMESPACE = "kserve"
"""Where KServe's manager reads ``inferenceservice-config`` (its default POD_NAMESPACE)."""
KSERVE_RUNTIMES = ("kserve-huggingfaceserver.yaml", "kserve-sklearnserver.yaml")


def kserve_config(op: OperatorBinary) -> dict[str, Any]:
    """The release's ``inferenceservice-config`` ConfigMap, RawDeployment by default: a
    predictor is a Deployment (+ Service, Ingress) instead of a Knative Service."""
    config = next(d for d in release_files(op, "inferenceservice.yaml")
                  if d.get("kind") == "ConfigMap")
    data = dict(config["data"])
    data.pop("_example", None)
    data["deploy"] = json.dumps({"defaultDeploymentMode": "RawDeployment"})
    return {**config, "metadata": {"name": config["metadata"]["name"],
                                   "namespace": KSERVE_NAMESPACE}, "data": data}


def kserve_runtimes(op: OperatorBinary) -> list[dict[str, Any]]:
    """The release's ClusterServingRuntimes of ``KSERVE_RUNTIMES`` with their images as the
    release's kustomization renders them (``huggingfaceserver:replace`` -> its newName:newTag):
    what an InferenceService with that model format resolves to."""
    images = {i["name"]: f"{i['newName']}:{i['newTag']}"
              for i in release_files(op, "kustomization.yaml")[0].get("images", [])}
    runtimes = []
    for name in KSERVE_RUNTIMES:
        for doc in release_files(op, name):
            runtime = copy.deepcopy(doc)
            for container in runtime["spec"].get("containers", []):
                repository = container["image"].split(":", 1)[0]
                container["image"] = images.get(repository, container["image"])
            runtimes.append(runtime)
    return runtimes


def _kserve(op: OperatorBinary, home: Path, kubeconfig: str, ca: pki.CertificateAuthority,
            free_port: Callable[[], int]) -> OperatorRun:
    """KServe's manager in RawDeployment mode (no Knative, no Istio): its config and two
    model-server ClusterServingRuntimes are created before it starts (it exits without the
    ConfigMap). Its webhook server has no certificate-directory flag and uses
    controller-runtime's default ``$TMPDIR/k8s-webhook-server/serving-certs``: TMPDIR is a
    directory of this member, holding a fleet-CA certificate, so members never share one.
    It binds its webhook port on every interface (no host flag); metrics are off."""
    webhook_port, health_port = free_port(), free_port()
    tmp = home / "kserve-tmp"
    serving_cert(tmp / "k8s-webhook-server", ca, "serving")
    webhooks = webhook_configs(op, port=webhook_port, ca_pem=ca.cert_pem,
                               pod_label="serving.kserve.io/inferenceservice")
    return OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"--kubeconfig={kubeconfig}", "--metrics-addr=0",
              f"--webhook-port={webhook_port}", f"--health-probe-addr=127.0.0.1:{health_port}",
              "--leader-elect=false"],
        env={"TMPDIR": str(tmp), "POD_NAMESPACE": KSERVE_NAMESPACE, **LOOPBACK_PROXY},
        health=f"http://127.0.0.1:{health_port}/readyz", crds=crds_of(op), webhooks=webhooks,
        objects=[namespace_object(KSERVE_NAMESPACE),
                 (f"/api/v1/namespaces/{KSERVE_NAMESPACE}/configmaps", kserve_config(op)),
                 *(("/apis/serving.kserve.io/v1alpha1/clusterservingruntimes", runtime)
                   for runtime in kserve_runtimes(op))])


KNATIVE_NAMESPACE = "knative-serving"
KNATIVE_VERSION = "v1.23.0"
"""The Knative release of knative.dev/serving v0.50.0 (its images' tag)."""
KNATIVE_QUEUE_IMAGE = f"gcr.io/knative-releases/knative.dev/serving/cmd/queue:{KNATIVE_VERSION}"
KNATIVE_TAG_RESOLUTION_SKIPPED = (
    "kind.local", "ko.local", "dev.local", "index.docker.io", "docker.io", "gcr.io",
    "ghcr.io", "nvcr.io", "quay.io", "registry.k8s.io", "public.ecr.aws", "mcr.microsoft.com")
"""Registries whose tags the revision reconciler does not resolve to digests (upstream's
three plus the public ones): nothing can be fetched from here, and an image of another
registry fails its Revision (``Unable to fetch image``) as on an air-gapped cluster."""
KNATIVE_FEATURES = {"kubernetes.podspec-nodeselector": "enabled",
                    "kubernetes.podspec-tolerations": "enabled",
                    "kubernetes.podspec-affinity": "enabled"}
"""PodSpec fields Knative refuses by default, enabled as a GPU cluster's operator would:
the GPU product is a nodeSelector (and the dispatcher may add tolerations)."""
KNATIVE_WEBHOOK_PATHS = {"webhook.serving.knative.dev": "/defaulting",
                         "validation.webhook.serving.knative.dev": "/resource-validation",
                         "config.webhook.serving.knative.dev": "/config-validation"}


def knative_configmaps(op: OperatorBinary) -> list[dict[str, Any]]:
    """The release's config-* ConfigMaps (serving's and networking's config-network), with
    the queue-proxy image set (the release's ``ko://`` reference is resolved at build time
    upstream), tag resolution skipped for ``KNATIVE_TAG_RESOLUTION_SKIPPED`` and the PodSpec
    features of ``KNATIVE_FEATURES`` on."""
    configmaps = [d for path in sorted(op.files_dir.glob("*.yaml")) for d in load_documents(path)
                  if d.get("kind") == "ConfigMap"]
    for config in configmaps:
        data = {k: v for k, v in (config.get("data") or {}).items() if k != "_example"}
        name = config["metadata"]["name"]
        if name == "config-deployment":
            data["queue-sidecar-image"] = KNATIVE_QUEUE_IMAGE
            data["registries-skipping-tag-resolving"] = ",".join(KNATIVE_TAG_RESOLUTION_SKIPPED)
        elif name == "config-features":
            data.update(KNATIVE_FEATURES)
        config["data"] = data
        config["metadata"] = {"name": name, "namespace": KNATIVE_NAMESPACE,
                              "labels": config["metadata"].get("labels", {})}
    return configmaps


def knative_webhooks(op: OperatorBinary, *, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The release's three webhook configurations, same names, pointed at loopback.

    Knative's admission controllers reconcile the configuration of their own name and, in
    it, only the webhook entry of that same name (rules, caBundle, and a service reference
    they insist on); the entry is renamed ``devfleet.<name>`` so they leave the URL alone
    and keep the release's rules, which already cover the same resources."""
    bundle = base64.b64encode(ca_pem).decode()
    configs = []
    for name in ("configmap-validation.yaml", "defaulting.yaml", "resource-validation.yaml"):
        for doc in release_files(op, name):
            if f"{doc.get('apiVersion')}/{doc.get('kind')}" not in WEBHOOK_PATHS:
                continue
            config = copy.deepcopy(doc)
            upstream = config["metadata"]["name"]
            config["metadata"] = {"name": upstream, "labels": {
                **config["metadata"].get("labels", {}),
                "dispatcher.io/devfleet-operator": op.name}}
            for hook in config["webhooks"]:
                hook["name"] = f"devfleet.{hook['name']}"
                hook["clientConfig"] = {
                    "url": f"https://127.0.0.1:{port}{KNATIVE_WEBHOOK_PATHS[upstream]}",
                    "caBundle": bundle}
            configs.append(config)
    return configs


def _knative_serving(op: OperatorBinary, home: Path, kubeconfig: str,
                     ca: pki.CertificateAuthority, free_port: Callable[[], int]) -> OperatorRun:
    """Knative Serving's controller + webhook (one process: the wrapper's main), no
    autoscaler, activator or networking layer. The webhook serves the Secret
    ``webhook-certs`` (fleet CA, loopback), created before it starts; its port (every
    interface: knative.dev/pkg binds ``:port``) and the profiling port are chosen here (the
    defaults are constants). Registries are out of reach (``LOOPBACK_PROXY``)."""
    webhook_port, health_port, profiling_port = free_port(), free_port(), free_port()
    cert, key = ca.issue_serving("knative-serving-webhook")
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": "webhook-certs", "namespace": KNATIVE_NAMESPACE},
              "data": {k: base64.b64encode(v).decode() for k, v in (
                  ("ca-cert.pem", ca.cert_pem), ("server-cert.pem", cert),
                  ("server-key.pem", key))}}
    configs = f"/api/v1/namespaces/{KNATIVE_NAMESPACE}/configmaps"
    return OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"--kubeconfig={kubeconfig}",
              f"--health-address=127.0.0.1:{health_port}"],
        env={"SYSTEM_NAMESPACE": KNATIVE_NAMESPACE, "POD_NAME": "knative-serving",
             "WEBHOOK_NAME": "webhook", "WEBHOOK_PORT": str(webhook_port),
             "PROFILING_PORT": str(profiling_port),
             "CONFIG_LOGGING_NAME": "config-logging",
             "CONFIG_OBSERVABILITY_NAME": "config-observability", **LOOPBACK_PROXY},
        health=f"http://127.0.0.1:{health_port}/readyz", crds=crds_of(op),
        webhooks=knative_webhooks(op, port=webhook_port, ca_pem=ca.cert_pem),
        objects=[namespace_object(KNATIVE_NAMESPACE),
                 (f"/api/v1/namespaces/{KNATIVE_NAMESPACE}/secrets", secret),
                 *((configs, config) for config in knative_configmaps(op))])
