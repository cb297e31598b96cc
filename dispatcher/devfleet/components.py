"""The command lines of a dev cluster's components: kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (with its stages), per cluster profile."""

from __future__ import annotations

from pathlib import Path

import yaml

from dispatcher.devfleet.binaries import kwok_stages
from dispatcher.devfleet.state import LIGHT, REAL

__all__ = ["JOB_SECONDS", "KCM_CONTROLLERS", "KWOK_NODE_ANNOTATION", "apiserver_argv",
           "kcm_argv", "kwok_argv", "render_stages", "scheduler_argv"]

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""The annotation that hands a Node of a real member to its kwok (key, value)."""
JOB_SECONDS = 5.0
"""Default run time of a Job's pod on a real member (kwok's pod-complete stage)."""

# kube-controller-manager controllers of a real cluster: every default one except those that
# need a cloud provider or allocate node CIDRs (no CNI here; kwok assigns pod IPs itself).
KCM_CONTROLLERS = ",".join([
    "*", "-cloud-node-lifecycle-controller", "-node-route-controller",
    "-service-lb-controller", "-node-ipam-controller"])

# Gang scheduling on a real member through the Workload API (Kubernetes 1.35 alpha):
# the apiserver serves scheduling.k8s.io/v1alpha1 Workloads (GenericWorkload gate and the
# group; pkg/registry/scheduling/rest/storage_scheduling.go) and keeps pods' workloadRef
# (dropped without the gate: pkg/api/pod/util.go dropDisabledWorkloadRef); kube-scheduler
# adds the GangScheduling plugin to its default profile (GangScheduling gate, which needs
# GenericWorkload: pkg/features/kube_features.go; pkg/scheduler/apis/config/v1/
# default_plugins.go). The plugin acts only on pods with a workloadRef, so ordinary
# scheduling is unchanged.
GANG_GATES_APISERVER = "GenericWorkload=true"
GANG_RUNTIME_CONFIG = "scheduling.k8s.io/v1alpha1=true"
GANG_GATES_SCHEDULER = "GenericWorkload=true,GangScheduling=true"


def apiserver_argv(binary: Path, home: Path, *, etcd_url: str, prefix: str, port: int,
                   profile: str) -> list[str]:
    """kube-apiserver on loopback ``port``, its files in ``home``, its objects under
    ``prefix`` in the shared etcd."""
    argv = [
        str(binary),
        f"--etcd-servers={etcd_url}", f"--etcd-prefix={prefix}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--tls-cert-file={home / 'serving.crt'}",
        f"--tls-private-key-file={home / 'serving.key'}",
        f"--cert-dir={home}",
        "--service-cluster-ip-range=10.0.0.0/24",
        "--service-account-issuer=https://kubernetes.default.svc",
        f"--service-account-key-file={home / 'sa.key'}",
        f"--service-account-signing-key-file={home / 'sa.key'}",
        f"--token-auth-file={home / 'tokens.csv'}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        "--enable-priority-and-fairness=false",
        "--profiling=false",
        "--v=1",
    ]
    if profile == REAL:
        # The Workload API (Kubernetes 1.35 alpha) a real member's kube-scheduler
        # gang-schedules by (kube/gangapis.py): served only with the gate and the
        # group enabled; alpha, so off everywhere else.
        argv += [f"--feature-gates={GANG_GATES_APISERVER}",
                 f"--runtime-config={GANG_RUNTIME_CONFIG}"]
    if profile == LIGHT:
        # No ServiceAccount controller here; no node lifecycle controller to lift the
        # not-ready taint that TaintNodesByCondition would put on every new Node.
        argv.append("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition")
    return argv


def kcm_argv(binary: Path, home: Path, *, kubeconfig: str, port: int, ca_path: Path,
             controllers: str) -> list[str]:
    """kube-controller-manager running ``controllers``, each as its own ServiceAccount."""
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--cert-dir={home / 'kcm-certs'}",
        f"--service-account-private-key-file={home / 'sa.key'}",
        "--use-service-account-credentials=true", f"--root-ca-file={ca_path}",
        f"--controllers={controllers}", "--profiling=false", "--v=1",
    ]


def scheduler_argv(binary: Path, home: Path, *, kubeconfig: str, port: int) -> list[str]:
    """kube-scheduler with the gang scheduling gates (module constants)."""
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--cert-dir={home / 'scheduler-certs'}",
        f"--feature-gates={GANG_GATES_SCHEDULER}", "--profiling=false", "--v=1",
    ]


def kwok_argv(binary: Path, *, kubeconfig: str, stages: Path, port: int) -> list[str]:
    """kwok managing the Nodes annotated ``KWOK_NODE_ANNOTATION``, with ``stages``."""
    key, value = KWOK_NODE_ANNOTATION
    return [
        str(binary), f"--kubeconfig={kubeconfig}", f"--config={stages}",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--server-address=127.0.0.1:{port}", "--node-lease-duration-seconds=40",
        "--node-ip=127.0.0.1", "--cidr=10.244.0.0/16",
    ]


def render_stages(*, job_seconds: float = JOB_SECONDS) -> str:
    """The kwok stages of a real member, with pods of Jobs running ``job_seconds`` (+20%
    jitter) unless a pod's annotations say otherwise (see the stage file)."""
    docs = [d for d in yaml.safe_load_all(kwok_stages().read_text()) if d]
    for doc in docs:
        if doc["metadata"]["name"] == "pod-complete":
            delay = doc["spec"]["delay"]
            delay["durationMilliseconds"] = int(job_seconds * 1000)
            delay["jitterDurationMilliseconds"] = int(job_seconds * 1200)
    return yaml.safe_dump_all(docs, sort_keys=False)
