"""The workload operators of a real member: how each one is configured, installed and run.

A real member runs, besides kube-controller-manager, kube-scheduler and kwok, the operators
built by ``binaries.ensure_operators()`` (JobSet, ...). Each gets, under the member's state
directory, its own ports (webhook, health, metrics off), its own serving certificate issued
by the dev fleet CA (``<op>-certs/tls.{crt,key}``), its own config file and log. Installing
one on a member means what its release manifests do on a cluster, minus the Deployment:

- its CRDs, from the same module version (large: created, never client-side applied);
- what it reads at start-up from the release (KServe's ``inferenceservice-config`` and
  ClusterServingRuntimes, Knative's ``config-*`` ConfigMaps), created before it starts;
- its Mutating/ValidatingWebhookConfigurations, taken from the module's webhook manifests,
  with ``clientConfig.url`` pointing at the operator's loopback port and the fleet CA as
  ``caBundle`` (pod webhooks narrowed to the operator's own pods with an objectSelector, so
  an operator that is down never blocks unrelated pods).

The hub gets the same CRDs (``hub_crds``) and nothing else: no operator, no webhook, no
conversion webhook.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet.binaries import OperatorBinary, cache_root
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.devfleet.workload_crds import install_crds
from dispatcher.kube import pki

__all__ = ["OperatorRun", "crds_of", "hub_crds", "install", "prepare", "serving_cert",
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


def _load(path: Path) -> list[dict[str, Any]]:
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
    return [_without_conversion(d) for path in op.crd_files() for d in _load(path)
            if d.get("kind") == "CustomResourceDefinition"]


def hub_crds(operators: tuple[OperatorBinary, ...]) -> list[dict[str, Any]]:
    """The real CRDs of every operator, for the hub (which runs none of them)."""
    return [crd for op in operators for crd in crds_of(op)]


def webhook_configs(op: OperatorBinary, *, port: int, ca_pem: bytes, pod_label: str | None,
                    names: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The module's webhook configurations, pointed at ``https://127.0.0.1:port``, named
    ``<op>-<name>`` unless ``names`` maps the upstream name to another one."""
    path = op.crds_dir.parent / "webhooks.yaml"
    if not path.exists():
        return []
    bundle = base64.b64encode(ca_pem).decode()
    configs = []
    for loaded in _load(path):
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


def _kubebuilder_operator(op: OperatorBinary, home: Path, kubeconfig: str,
                          ca: pki.CertificateAuthority, free_port: Callable[[], int], *,
                          config_api: str, webhook_path: str, pod_label: str) -> OperatorRun:
    """A kubebuilder-style operator configured by a ``Configuration`` file (JobSet, LWS):
    internal cert management and leader election off, the webhook server on loopback with
    the fleet-issued certificate, health probes on loopback, metrics off. Ready once the
    webhook at ``webhook_path`` answers (its handler is registered after the manager
    starts, so the manager's own readyz is not enough)."""
    webhook_port, health_port = free_port(), free_port()
    certs = serving_cert(home, ca, op.name)
    config = home / f"{op.name}-config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": config_api, "kind": "Configuration",
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(certs)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
    }, sort_keys=False))
    return OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"--config={config}", f"--kubeconfig={kubeconfig}",
              "--zap-log-level=info"],
        health=f"https://127.0.0.1:{webhook_port}{webhook_path}", crds=crds_of(op),
        webhooks=webhook_configs(op, port=webhook_port, ca_pem=ca.cert_pem,
                                 pod_label=pod_label))


def _jobset(op: OperatorBinary, home: Path, kubeconfig: str, ca: pki.CertificateAuthority,
            free_port: Callable[[], int]) -> OperatorRun:
    """JobSet: its webhook server always starts; its controller needs the mutating webhook's
    defaults (it panics on a JobSet without them)."""
    return _kubebuilder_operator(op, home, kubeconfig, ca, free_port,
                                 config_api="config.jobset.x-k8s.io/v1alpha1",
                                 webhook_path="/mutate-jobset-x-k8s-io-v1alpha2-jobset",
                                 pod_label="jobset.sigs.k8s.io/jobset-name")


def _lws(op: OperatorBinary, home: Path, kubeconfig: str, ca: pki.CertificateAuthority,
         free_port: Callable[[], int]) -> OperatorRun:
    """LeaderWorkerSet: its pod webhook sets the group labels its pod controller reads."""
    return _kubebuilder_operator(op, home, kubeconfig, ca, free_port,
                                 config_api="config.lws.x-k8s.io/v1alpha1",
                                 webhook_path="/mutate-leaderworkerset-x-k8s-io-v1-leaderworkerset",
                                 pod_label="leaderworkerset.sigs.k8s.io/name")


def _kuberay(op: OperatorBinary, home: Path, kubeconfig: str, ca: pki.CertificateAuthority,
             free_port: Callable[[], int]) -> OperatorRun:
    """KubeRay: flags only; its webhooks stay off (``ENABLE_WEBHOOKS`` unset), so no
    certificate and no webhook registration. Ready once its readyz answers."""
    health_port = free_port()
    return OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"--kubeconfig={kubeconfig}", "--metrics-addr=0",
              f"--health-probe-bind-address=127.0.0.1:{health_port}",
              "--enable-leader-election=false", "--log-stdout-encoder=console"],
        health=f"http://127.0.0.1:{health_port}/readyz", crds=crds_of(op), webhooks=[])


TRAINING_NAMESPACE = "kubeflow"
TRAINING_SECRET = "training-operator-webhook-cert"
TRAINING_SERVICE_DNS = f"training-operator.{TRAINING_NAMESPACE}.svc"
TRAINING_VWC = "validator.training-operator.kubeflow.org"
TRAINING_SCHEMES = ("pytorchjob", "tfjob")
"""Its v1 MPIJob is left out: the MPI operator's v2beta1 CRD has the same name."""


TRAINING_CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
"""Where training-operator's cert rotator expects the Secret mounted (hard-coded)."""


def _training_certs() -> dict[str, bytes]:
    """The Secret data training-operator's cert rotator accepts as is, also written where it
    expects the Secret mounted.

    The rotator (always on) keeps the Secret's CA and server certificate only when the CA
    (RSA, PKCS#1) verifies for the name ``training-operator-ca`` and the server certificate
    for ``training-operator.kubeflow.svc``, both 90 days ahead (else it makes its own,
    without the loopback address the apiserver calls); then it waits for them in the
    hard-coded directory ``/tmp/k8s-webhook-server/serving-certs``, which every instance on
    the machine shares. So there is one set per machine (cached beside the binaries, valid
    3 years): every member of every dev fleet serves the same files and none fights another
    over them."""
    home = cache_root() / "training-operator-certs"
    names = ("ca.crt", "ca.key", "tls.crt", "tls.key")
    if not all((home / n).exists() for n in names):
        home.mkdir(parents=True, exist_ok=True)
        ca = pki.new_ca("training-operator-ca", dns_name="training-operator-ca",
                        days=3 * 365, rsa_key=True)  # it parses the CA key as PKCS#1
        cert, key = ca.issue_serving(TRAINING_SERVICE_DNS, dns_names=(TRAINING_SERVICE_DNS,),
                                     days=3 * 365)
        for name, pem in zip(names, (ca.cert_pem, ca.key_pem, cert, key), strict=True):
            (home / name).write_bytes(pem)
            (home / name).chmod(0o600)
    data = {n: (home / n).read_bytes() for n in names}
    TRAINING_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in ("tls.crt", "tls.key"):
        target = TRAINING_CERT_DIR / name
        if not target.exists() or target.read_bytes() != data[name]:
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data[name])
            tmp.chmod(0o600)
            tmp.replace(target)
    return data


def _training_operator(op: OperatorBinary, home: Path, kubeconfig: str,
                       ca: pki.CertificateAuthority,
                       free_port: Callable[[], int]) -> OperatorRun:
    """Kubeflow training-operator (PyTorchJob, TFJob): its cert rotator cannot be turned
    off and blocks the controllers until the CA is injected into the validating webhook
    configuration ``validator.training-operator.kubeflow.org``, from the Secret
    ``kubeflow/training-operator-webhook-cert``; both are created before it starts."""
    webhook_port, health_port = free_port(), free_port()
    data = _training_certs()
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": TRAINING_SECRET, "namespace": TRAINING_NAMESPACE},
              "data": {k: base64.b64encode(v).decode() for k, v in data.items()}}
    namespace = {"apiVersion": "v1", "kind": "Namespace",
                 "metadata": {"name": TRAINING_NAMESPACE}}
    webhooks = webhook_configs(op, port=webhook_port, ca_pem=data["ca.crt"], pod_label=None,
                               names={"validating-webhook-configuration": TRAINING_VWC})
    for config in webhooks:
        config["webhooks"] = [h for h in config["webhooks"]
                              if any(s in h["name"] for s in TRAINING_SCHEMES)]
    return OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"--kubeconfig={kubeconfig}", "--metrics-bind-address=0",
              f"--health-probe-bind-address=127.0.0.1:{health_port}",
              f"--webhook-server-port={webhook_port}", "--leader-elect=false",
              *(f"--enable-scheme={s}" for s in TRAINING_SCHEMES)],
        env={"MY_POD_NAMESPACE": TRAINING_NAMESPACE, "TMPDIR": "/tmp"},
        health=f"https://127.0.0.1:{webhook_port}/validate-kubeflow-org-v1-pytorchjob",
        crds=[c for c in crds_of(op)
              if c["spec"]["names"]["plural"] in {f"{s}s" for s in TRAINING_SCHEMES}],
        webhooks=webhooks,
        objects=[("/api/v1/namespaces", namespace),
                 (f"/api/v1/namespaces/{TRAINING_NAMESPACE}/secrets", secret)])


def _mpi_operator(op: OperatorBinary, home: Path, kubeconfig: str,
                  ca: pki.CertificateAuthority, free_port: Callable[[], int]) -> OperatorRun:
    """MPI operator (MPIJob v2beta1): klog-style flags, no webhooks; it always runs leader
    election (a Lease in ``-lock-namespace``, created here) and answers /healthz once it
    leads. Built from the wrapper's patched main (``-health-check-address``): upstream
    binds the constant port :8080, which two members on one machine cannot share."""
    health_port = free_port()
    lock = "mpi-operator"
    return OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"-kubeConfig={kubeconfig}", f"-lock-namespace={lock}",
              f"-health-check-address=127.0.0.1:{health_port}", "-monitoring-port=0",
              "-kube-api-qps=50", "-kube-api-burst=100"],
        health=f"http://127.0.0.1:{health_port}/healthz", crds=crds_of(op), webhooks=[],
        objects=[("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                         "metadata": {"name": lock}})])


LOOPBACK_PROXY = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
                  "NO_PROXY": "127.0.0.1,localhost", "https_proxy": "http://127.0.0.1:9",
                  "http_proxy": "http://127.0.0.1:9", "no_proxy": "127.0.0.1,localhost"}
"""Environment of an operator that would otherwise reach out of the machine (Knative
resolves image tags at registries): every HTTP(S) request but those to the member's
apiserver on loopback goes to the discard port and fails at once."""


def _files(op: OperatorBinary, name: str) -> list[dict[str, Any]]:
    """The documents of one release manifest copied by the build (``OperatorBuild.files``)."""
    return _load(op.files_dir / name)


def _namespace(name: str) -> tuple[str, dict[str, Any]]:
    return ("/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


KSERVE_NAMESPACE = "kserve"
"""Where KServe's manager reads ``inferenceservice-config`` (its default POD_NAMESPACE)."""
KSERVE_RUNTIMES = ("kserve-huggingfaceserver.yaml", "kserve-sklearnserver.yaml")


def kserve_config(op: OperatorBinary) -> dict[str, Any]:
    """The release's ``inferenceservice-config`` ConfigMap, RawDeployment by default: a
    predictor is a Deployment (+ Service, Ingress) instead of a Knative Service."""
    config = next(d for d in _files(op, "inferenceservice.yaml") if d.get("kind") == "ConfigMap")
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
              for i in _files(op, "kustomization.yaml")[0].get("images", [])}
    runtimes = []
    for name in KSERVE_RUNTIMES:
        for doc in _files(op, name):
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
        objects=[_namespace(KSERVE_NAMESPACE),
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
    configmaps = [d for path in sorted(op.files_dir.glob("*.yaml")) for d in _load(path)
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
        for doc in _files(op, name):
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
        objects=[_namespace(KNATIVE_NAMESPACE),
                 (f"/api/v1/namespaces/{KNATIVE_NAMESPACE}/secrets", secret),
                 *((configs, config) for config in knative_configmaps(op))])


PREPARERS: dict[str, Preparer] = {"jobset": _jobset, "lws": _lws, "kuberay": _kuberay,
                                  "training-operator": _training_operator,
                                  "mpi-operator": _mpi_operator, "kserve": _kserve,
                                  "knative-serving": _knative_serving}


def prepare(op: OperatorBinary, *, home: Path, kubeconfig: str, ca: pki.CertificateAuthority,
            free_port: Callable[[], int]) -> OperatorRun:
    """Write ``op``'s config and certificate under ``home`` and choose its ports."""
    return PREPARERS[op.name](op, home, kubeconfig, ca, free_port)


def install(rest: Rest, run: OperatorRun) -> None:
    """Create (or update) the operator's CRDs and webhook configurations on a member."""
    install_crds(rest, run.crds, timeout=60.0)
    for collection, obj in run.objects:
        rest.ensure(collection, obj)
    for config in run.webhooks:
        collection = WEBHOOK_PATHS[f"{config['apiVersion']}/{config['kind']}"]
        name = config["metadata"]["name"]
        try:
            rest.request("POST", collection, config)
        except ApiError as exc:
            if exc.status != 409:
                raise
            current = rest.get(f"{collection}/{name}")
            rest.request("PUT", f"{collection}/{name}", {**config, "metadata": {
                **config["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}})
