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
conversion webhook. What every operator is made of is ``devfleet/operatorkit.py``; the
serving operators (KServe, Knative) are ``devfleet/servingoperators.py``; the batch ones
(JobSet, LWS, KubeRay, training, MPI) are here, with ``prepare`` and ``install``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from pathlib import Path

import yaml

from dispatcher.devfleet.binaries import OperatorBinary, cache_root
from dispatcher.devfleet.operatorkit import (
    WEBHOOK_PATHS,
    OperatorRun,
    Preparer,
    crds_of,
    hub_crds,
    serving_cert,
    webhook_configs,
)
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.devfleet.servingoperators import _knative_serving, _kserve
from dispatcher.devfleet.workload_crds import install_crds
from dispatcher.kube import pki

__all__ = ["OperatorRun", "crds_of", "hub_crds", "install", "prepare", "serving_cert",
           "webhook_configs"]

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
