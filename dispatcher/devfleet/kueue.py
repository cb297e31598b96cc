"""Kueue on the dev fleet (the ``--with-kueue`` profile): one Kueue manager per cluster.

The hub's Kueue is the MultiKueue *manager*, each real member's a *worker*; queues and
MultiKueue objects are ``multikueue.py``'s business. Each instance is installed the way
Kueue's release manifests install it, minus the Deployment (like the workload operators of
``operators.py``):

- every CRD of the release (``v1beta2`` is their storage version and they carry no
  conversion webhook, so only ``v1beta2`` objects are written);
- its webhook configurations with ``clientConfig.url`` on the instance's loopback port and
  the fleet CA as ``caBundle``, kept only for Kueue's own kinds and the integrations
  enabled here (``batch/job``, ``jobset.x-k8s.io/jobset``; a member's own Kueue, the
  ``--member-kueue`` profile, also ``kubeflow.org/pytorchjob``): Kueue answers the others with
  no-op handlers, but registering them would put every Pod, Deployment, ... of the cluster
  behind one more process for nothing. The Job mutating webhook must be registered: it is
  what suspends a queued Job at creation (and, on the hub, sets ``spec.managedBy`` to
  MultiKueue);
- a ``Configuration`` file: internal cert management and leader election off (out of
  cluster there is no Service to issue for, no namespace to elect in), the webhook server on
  loopback with the fleet-issued certificate, metrics and the visibility server off
  (``VisibilityOnDemand`` binds the fixed port 8082 otherwise: two instances on one machine
  would clash), client QPS/burst as asked (Kueue's defaults, 20/30, unless tuned).

With internal cert management off, ``cmd/kueue`` reads the metrics server's certificate from
the hard-coded ``/etc/kueue/metrics/certs/tls.{crt,key}`` even when metrics are off (the
``Configuration`` API has no field for it in v0.17.0: only the webhook's ``certDir``), and
exits when they are missing. So there is one self-signed pair per machine, cached beside the
binaries and written there if absent or different; nothing serves it.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import operators
from dispatcher.devfleet.binaries import OperatorBinary, cache_root
from dispatcher.kube import pki

__all__ = ["CONFIG_API", "INTEGRATIONS", "MEMBER_INTEGRATIONS", "NAMESPACE", "ClientLimits",
           "prepare"]

CONFIG_API = "config.kueue.x-k8s.io/v1beta2"
NAMESPACE = "kueue-system"
"""Kueue's namespace: where the manager looks for MultiKueue kubeconfig Secrets."""
INTEGRATIONS = ("batch/job", "jobset.x-k8s.io/jobset")
MEMBER_INTEGRATIONS = (*INTEGRATIONS, "kubeflow.org/pytorchjob")
"""A member's own Kueue (``--member-kueue``): the kinds it queues there."""
WEBHOOK_GROUPS = frozenset({"kueue.x-k8s.io", "batch", "jobset.x-k8s.io"})
MEMBER_WEBHOOK_GROUPS = WEBHOOK_GROUPS | {"kubeflow.org"}
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
"""Hard-coded in cmd/kueue/main.go (v0.17.0) for internal cert management off."""


@dataclass(frozen=True)
class ClientLimits:
    """The Kubernetes client rate limits of one Kueue instance (None: Kueue's default), and
    the MultiKueue dispatcher its manager hands workloads to (None: Kueue's own, all at
    once; ``control.nominator.DISPATCHER_NAME``: ours)."""

    qps: float | None = None
    burst: int | None = None
    dispatcher_name: str | None = None


def _metrics_certs() -> None:
    """The one metrics certificate of this machine, where cmd/kueue insists on reading it."""
    home = cache_root() / "kueue-metrics-certs"
    names = ("tls.crt", "tls.key")
    if not all((home / n).exists() for n in names):
        home.mkdir(parents=True, exist_ok=True)
        cert, key = pki.new_ca("kueue-metrics-ca", days=3 * 365).issue_serving(
            "kueue-metrics", days=3 * 365)
        for name, pem in zip(names, (cert, key), strict=True):
            (home / name).write_bytes(pem)
            (home / name).chmod(0o600)
    METRICS_CERT_DIR.mkdir(parents=True, exist_ok=True)
    for name in names:
        data, target = (home / name).read_bytes(), METRICS_CERT_DIR / name
        if not target.exists() or target.read_bytes() != data:
            tmp = target.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.chmod(0o600)
            tmp.replace(target)  # atomic: another fleet's Kueue may be reading it


def _webhooks(op: OperatorBinary, *, port: int, ca_pem: bytes,
              groups: frozenset[str]) -> list[dict[str, Any]]:
    """The release's webhook configurations for Kueue's kinds and the enabled integrations,
    on loopback (named ``kueue-<upstream name>``)."""
    configs = operators.webhook_configs(op, port=port, ca_pem=ca_pem, pod_label=None)
    for config in configs:
        config["webhooks"] = [hook for hook in config["webhooks"]
                              if all(set(rule.get("apiGroups", ())) <= groups
                                     for rule in hook.get("rules", ()))]
    return [c for c in configs if c["webhooks"]]


def config(*, webhook_port: int, health_port: int, cert_dir: Path,
           limits: ClientLimits, member: bool = False) -> dict[str, Any]:
    """The instance's ``Configuration`` (the same for a manager and a worker: MultiKueue is
    on by default, and a worker simply has no MultiKueue AdmissionCheck). ``member``: a
    member's own Kueue, as GPU platforms run it: ``manageJobsWithoutQueueName`` (nothing
    bypasses quota; a job with no queue label stays suspended unless its namespace has a
    LocalQueue ``default``) and ``MEMBER_INTEGRATIONS``."""
    body: dict[str, Any] = {
        "apiVersion": CONFIG_API, "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"port": webhook_port, "host": "127.0.0.1", "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "integrations": {"frameworks": list(MEMBER_INTEGRATIONS if member else INTEGRATIONS)},
        "featureGates": {"VisibilityOnDemand": False},
    }
    if member:
        body["manageJobsWithoutQueueName"] = True
    connection = {k: v for k, v in (("qps", limits.qps), ("burst", limits.burst))
                  if v is not None}
    if connection:
        body["clientConnection"] = connection
    if limits.dispatcher_name is not None:  # read by a manager only
        body["multiKueue"] = {"dispatcherName": limits.dispatcher_name}
    return body


def prepare(op: OperatorBinary, *, home: Path, kubeconfig: str, ca: pki.CertificateAuthority,
            free_port: Callable[[], int], limits: ClientLimits = ClientLimits(),
            member: bool = False) -> operators.OperatorRun:
    """Write one Kueue instance's config and certificate under ``home``, choose its ports.

    Ready once its Job mutating webhook answers (the handlers are registered after the
    manager starts, and a Job created before that would not be suspended)."""
    webhook_port, health_port = free_port(), free_port()
    _metrics_certs()
    certs = operators.serving_cert(home, ca, op.name)
    path = home / f"{op.name}-config.yaml"
    path.write_text(yaml.safe_dump(config(webhook_port=webhook_port, health_port=health_port,
                                          cert_dir=certs, limits=limits, member=member),
                                   sort_keys=False))
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    return operators.OperatorRun(
        name=op.name,
        argv=[str(op.binary), f"--config={path}", f"--kubeconfig={kubeconfig}",
              "--zap-log-level=info"],
        health=f"https://127.0.0.1:{webhook_port}/mutate-batch-v1-job",
        crds=operators.crds_of(op),
        webhooks=_webhooks(op, port=webhook_port, ca_pem=ca.cert_pem,
                           groups=MEMBER_WEBHOOK_GROUPS if member else WEBHOOK_GROUPS),
        objects=[("/api/v1/namespaces", namespace)])


def kubeconfig_secret(name: str, kubeconfig: bytes) -> dict[str, Any]:
    """The Secret a ``MultiKueueCluster`` names: the worker's kubeconfig under key
    ``kubeconfig`` in Kueue's namespace (inline CA data and a token: Kueue rejects
    file paths)."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "data": {"kubeconfig": base64.b64encode(kubeconfig).decode()}}
