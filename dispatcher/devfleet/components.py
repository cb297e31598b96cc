"""The command lines of a dev cluster's components: kube-apiserver, kube-controller-manager,
kube-scheduler and kwok (with its stages), per cluster profile."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dispatcher.devfleet.binaries import kwok_stages
from dispatcher.devfleet.state import LIGHT, REAL

__all__ = ["DEFAULT_MINOR", "GANG_FLAGS", "JOB_SECONDS", "KCM_CONTROLLERS",
           "KWOK_NODE_ANNOTATION", "GangFlags", "apiserver_argv", "gang_flags", "gate_flag",
           "kcm_argv",
           "kcm_controllers", "kwok_argv", "render_stages", "scheduler_argv"]

KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""The annotation that hands a Node of a real member to its kwok (key, value)."""
JOB_SECONDS = 5.0
"""Default run time of a Job's pod on a real member (kwok's pod-complete stage)."""

# kube-controller-manager controllers of a real cluster: every default one except those that
# need a cloud provider or allocate node CIDRs (no CNI here; kwok assigns pod IPs itself).
# 1.37 no longer has the cloud ones (an unknown name in --controllers is a start-up error:
# controller-manager/options/generic.go Validate).
_KCM_CONTROLLERS = {
    "1.35": ",".join(["*", "-cloud-node-lifecycle-controller", "-node-route-controller",
                      "-service-lb-controller", "-node-ipam-controller"]),
    "1.37": "*,-node-ipam-controller",
}
KCM_CONTROLLERS = _KCM_CONTROLLERS["1.35"]
DEFAULT_MINOR = "1.35"


@dataclass(frozen=True, kw_only=True)
class GangFlags:
    """What a real cluster of one minor is started with so its scheduler holds gangs.

    1.35: the apiserver serves ``scheduling.k8s.io/v1alpha1`` Workloads with its group
    enabled and the ``GenericWorkload`` gate (pkg/registry/scheduling/rest/
    storage_scheduling.go) and keeps pods' ``workloadRef`` (dropped without the gate:
    pkg/api/pod/util.go); kube-scheduler adds the GangScheduling plugin under the gates
    ``GenericWorkload,GangScheduling`` (pkg/scheduler/apis/config/v1/default_plugins.go).
    1.37: ``scheduling.k8s.io/v1beta1`` Workload and PodGroup (group off by default, gate
    Beta but off: pkg/controlplane/instance.go, pkg/features/kube_features.go); the
    ``GangScheduling`` gate is gone (naming it stops kube-scheduler), the plugin comes with
    ``GenericWorkload``; kube-controller-manager needs the gate too, or no one lifts the
    ``podgroup-protection`` finalizer the apiserver's admission puts on every PodGroup.
    The plugin acts only on pods that name a group, so ordinary scheduling is unchanged.
    """

    runtime_config: str
    gates: Mapping[str, bool]
    """Every component's gates (the scheduler's; the others drop ``scheduler_only``)."""
    scheduler_only: frozenset[str] = frozenset()
    kcm_gated: bool = False
    """Whether kube-controller-manager takes the gates too."""
    gated_groups: Mapping[str, str] = field(default_factory=dict)
    """Gate -> the API group version served with it (1.37's ``CompositePodGroup`` is in
    ``scheduling.k8s.io/v1alpha3`` only: pkg/registry/scheduling/rest)."""

    def runtime(self, extra: Mapping[str, bool]) -> str:
        """``--runtime-config``: the gang group, and a gated one whose gate is set on."""
        return ",".join([self.runtime_config, *(
            group for gate, group in self.gated_groups.items() if extra.get(gate))])

    def apiserver(self, extra: Mapping[str, bool]) -> str:
        return gate_flag({k: v for k, v in {**self.gates, **extra}.items()
                           if k not in self.scheduler_only})

    def scheduler(self, extra: Mapping[str, bool]) -> str:
        gates = {**self.gates, **extra}
        if not gates.get("GenericWorkload", True):
            # GangScheduling needs GenericWorkload (kube_features.go dependencies)
            gates = {k: v for k, v in gates.items() if k not in self.scheduler_only}
        return gate_flag(gates)

    def kcm(self, extra: Mapping[str, bool]) -> str:
        return self.apiserver(extra) if self.kcm_gated else gate_flag(extra)


GANG_FLAGS: Mapping[str, GangFlags] = {
    "1.35": GangFlags(runtime_config="scheduling.k8s.io/v1alpha1=true",
                      gates={"GenericWorkload": True, "GangScheduling": True},
                      scheduler_only=frozenset({"GangScheduling"})),
    "1.37": GangFlags(runtime_config="scheduling.k8s.io/v1beta1=true",
                      gates={"GenericWorkload": True}, kcm_gated=True,
                      gated_groups={"CompositePodGroup": "scheduling.k8s.io/v1alpha3=true"}),
}


def gang_flags(minor: str) -> GangFlags:
    """The gang flags of ``minor`` ("" for the default)."""
    return GANG_FLAGS[minor or DEFAULT_MINOR]


def kcm_controllers(minor: str) -> str:
    """A real cluster's kube-controller-manager controllers at ``minor``."""
    return _KCM_CONTROLLERS[minor or DEFAULT_MINOR]


def gate_flag(gates: Mapping[str, bool]) -> str:
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in gates.items())


def apiserver_argv(binary: Path, home: Path, *, etcd_url: str, prefix: str, port: int,
                   profile: str, minor: str = "",
                   feature_gates: Mapping[str, bool] | None = None) -> list[str]:
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
    gates = feature_gates or {}
    if profile == REAL:
        # The gang API a real member's kube-scheduler holds gangs by (kube/gangapis.py):
        # served only with its gate and its group enabled; off everywhere else.
        flags = gang_flags(minor)
        argv += [f"--feature-gates={flags.apiserver(gates)}",
                 f"--runtime-config={flags.runtime(gates)}"]
    elif gates:
        argv.append(f"--feature-gates={gate_flag(gates)}")
    if profile == LIGHT:
        # No ServiceAccount controller here; no node lifecycle controller to lift the
        # not-ready taint that TaintNodesByCondition would put on every new Node.
        argv.append("--disable-admission-plugins=ServiceAccount,TaintNodesByCondition")
    return argv


def kcm_argv(binary: Path, home: Path, *, kubeconfig: str, port: int, ca_path: Path,
             controllers: str, gates: str = "") -> list[str]:
    """kube-controller-manager running ``controllers``, each as its own ServiceAccount
    (``gates``: its --feature-gates, "" for none)."""
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--cert-dir={home / 'kcm-certs'}",
        f"--service-account-private-key-file={home / 'sa.key'}",
        "--use-service-account-credentials=true", f"--root-ca-file={ca_path}",
        f"--controllers={controllers}", "--profiling=false", "--v=1",
        *([f"--feature-gates={gates}"] if gates else []),
    ]


def scheduler_argv(binary: Path, home: Path, *, kubeconfig: str, port: int,
                   gates: str) -> list[str]:
    """kube-scheduler with ``gates`` (``GangFlags.scheduler``)."""
    return [
        str(binary), f"--kubeconfig={kubeconfig}",
        "--leader-elect=false", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--cert-dir={home / 'scheduler-certs'}",
        *([f"--feature-gates={gates}"] if gates else []), "--profiling=false", "--v=1",
    ]


def kwok_argv(binary: Path, *, kubeconfig: str, stages: Path, port: int,
              lease_seconds: int = 40) -> list[str]:
    """kwok managing the Nodes annotated ``KWOK_NODE_ANNOTATION``, with ``stages``; each
    node's Lease lasts ``lease_seconds`` (40: a kubelet's default)."""
    key, value = KWOK_NODE_ANNOTATION
    return [
        str(binary), f"--kubeconfig={kubeconfig}", f"--config={stages}",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        f"--server-address=127.0.0.1:{port}", f"--node-lease-duration-seconds={lease_seconds}",
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
