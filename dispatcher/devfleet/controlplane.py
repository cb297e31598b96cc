"""Start, inspect and stop local control planes: one etcd, N kube-apiservers on loopback.

Each cluster is a real kube-apiserver with its own ``--etcd-prefix``, port, serving
certificate and admin token; they share one etcd (what Kubernetes' own integration tests
do). Each cluster has one of three profiles (``ClusterInfo.profile``):

- ``light``: the apiserver only; nothing changes an object unless a client does.
- ``dedicated``: a control plane of intents, like Karmada's or Elotl Nova's: the apiserver
  plus a kube-controller-manager limited to ``DEDICATED_CONTROLLERS`` (namespace deletion,
  garbage collection, ServiceAccounts and their tokens, ClusterRole aggregation, Job TTLs),
  no workload controller, no scheduler, no nodes.
- ``real``: a full cluster: kube-controller-manager with every controller that needs no
  cloud, kube-scheduler, kwok (simulated kubelets for the Nodes annotated
  ``kwok.x-k8s.io/node=fake``) and the workload operators, so Jobs, Deployments and pods
  behave as on a real cluster.

The apiserver of a ``dedicated`` or ``real`` cluster keeps the default admission plugins;
a light one turns off ServiceAccount and TaintNodesByCondition (nothing would create the
``default`` ServiceAccount or lift a Node's not-ready taint).
Everything lives in one state directory with a ``state.json`` describing it (every process,
its argv, pid and log ``<cluster>/<process>.log``), so another process (``dispatcher dev
status|down``, a test) can find and stop exactly what was started. Processes run in their
own sessions and outlive the command that started them.
"""

from __future__ import annotations

import base64
import secrets
import shutil
import uuid
from collections.abc import Collection, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import operators
from dispatcher.devfleet.binaries import Binaries
from dispatcher.devfleet.components import (
    JOB_SECONDS,
    KCM_CONTROLLERS,
    KWOK_NODE_ANNOTATION,
    apiserver_argv,
    gang_flags,
    gate_flag,
    kcm_argv,
    kcm_controllers,
    kwok_argv,
    render_stages,
    scheduler_argv,
)
from dispatcher.devfleet.etcd import compact_etcd, start_etcd
from dispatcher.devfleet.processes import (
    free_port,
    is_alive,
    probe,
    respawn,
    spawn,
    stop_process,
    wait_http,
)
from dispatcher.devfleet.readiness import wait_components, wait_ready
from dispatcher.devfleet.state import DEDICATED, LIGHT, REAL, ClusterInfo, FleetState, ProcessInfo
from dispatcher.fleet.fleetfile import KubernetesSpec
from dispatcher.kube import pki

__all__ = ["DEDICATED", "DEDICATED_CONTROLLERS", "JOB_SECONDS", "KCM_CONTROLLERS",
           "KWOK_NODE_ANNOTATION", "LIGHT",
           "REAL", "ClusterInfo", "ControlPlanes", "FleetState", "ProcessInfo", "compact_etcd",
           "free_port", "is_alive", "probe", "render_stages", "stop_process"]

START_TIMEOUT_S = 120.0
START_WAVE = 8
"""Apiservers started at once: each writes its bootstrap objects to the shared etcd when it
starts, and 51 of them starting together on 2 cores timed etcd's requests out (an
apiserver's start-up hook then exits it); the fleet starts in waves of this many."""

DEDICATED_CONTROLLERS = (
    "namespace-controller",  # a deleted namespace is emptied, then finalized
    "garbage-collector-controller",  # dependents of a deleted owner go (a Dispatch, ...)
    "serviceaccount-controller",  # "default" in every namespace: ServiceAccount admission
    "serviceaccount-token-controller",  # legacy token Secrets users may still create
    "clusterrole-aggregation-controller",  # admin/edit/view get the CRDs' aggregated rules
    # Kept, as Karmada keeps it: the hub object is the user's intent, and a Job finishing
    # on a member finishes on the hub through the mirrored status; its
    # ttlSecondsAfterFinished then deletes the hub Job as it would on a single cluster
    # (Nova and a bare apiserver keep it forever, with its copy long gone on the member).
    "ttl-after-finished-controller",
)
"""kube-controller-manager controllers of a dedicated hub (canonical names of k8s 1.35; the
old aliases ``namespace``, ``garbagecollector``, ... still work there). Karmada's list minus
the ones for kubelets joining (bootstrap-signer, token-cleaner, the CSR signer/cleaner):
no node ever joins a hub. No workload controller (job, replicaset, deployment, ...): what
the hub stores is an intent that runs on a member."""


def _profiles(names: list[str], *, real: Collection[str], dedicated: Collection[str]
              ) -> dict[str, str]:
    """Each cluster's profile (``real`` and ``dedicated`` name clusters of ``names``)."""
    unknown = (set(real) | set(dedicated)) - set(names)
    if unknown:
        raise ValueError(f"clusters {sorted(unknown)} are not among {names}")
    if set(real) & set(dedicated):
        raise ValueError(f"clusters {sorted(set(real) & set(dedicated))} cannot be both "
                         f"real and dedicated")
    return {name: REAL if name in real else DEDICATED if name in dedicated else LIGHT
            for name in names}


def _kubeconfig(clusters: list[tuple[str, str, str, bytes]], current: str) -> dict[str, Any]:
    """A kubeconfig with one context per (name, server, token, ca_pem)."""
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": current, "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": base64.b64encode(ca).decode()}}
            for name, server, _, ca in clusters],
        "users": [{"name": f"{name}-admin", "user": {"token": token}}
                  for name, _, token, _ in clusters],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}
                     for name, *_ in clusters],
    }


def _write_private(path: Path, data: bytes | str) -> None:
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(0o600)


class ControlPlanes:
    """Local control planes rooted at one state directory.

    ``binaries`` may be None for a handle that only inspects or stops (``down``,
    ``stop_cluster``); starting needs them.
    """

    def __init__(self, *, root: Path, binaries: Binaries | None,
                 job_seconds: float = JOB_SECONDS) -> None:
        self.root = root
        self._binaries = binaries
        self.job_seconds = job_seconds

    @property
    def binaries(self) -> Binaries:
        """The binaries to start processes from."""
        if self._binaries is None:
            raise RuntimeError("ControlPlanes was created without binaries: it cannot start")
        return self._binaries

    def state(self) -> FleetState | None:
        """The saved state, or None."""
        return FleetState.read(self.root)

    def up(self, *, names: list[str], real: Collection[str] = (),
           dedicated: Collection[str] = (),
           kubernetes: Mapping[str, KubernetesSpec] | None = None,
           timeout: float = START_TIMEOUT_S) -> FleetState:
        """Start etcd and one apiserver per name; return when every one is ready.

        The clusters named in ``real`` also get kube-controller-manager, kube-scheduler,
        kwok and the operators; those in ``dedicated`` a kube-controller-manager limited to
        ``DEDICATED_CONTROLLERS``. Either is ready once its components answer and the
        ``default`` ServiceAccount exists (Nodes are created later, by provisioning); the
        others are light. ``kubernetes`` gives a cluster its minor and feature gates
        (absent: the default minor, the dev fleet's gates). Idempotent: when a healthy fleet
        with the same names, profiles and Kubernetes already runs here, it is returned as
        is. A half-dead or different one is stopped and started afresh.
        """
        profiles = _profiles(names, real=real, dedicated=dedicated)
        kube = {name: (kubernetes or {}).get(name) or KubernetesSpec() for name in names}
        for spec in kube.values():
            self.binaries.at(spec.version or None)  # BuildError names an unbuilt minor
        existing = self.state()
        if existing is not None:
            if ({c.name: c.profile for c in existing.clusters} == profiles
                    and [c.name for c in existing.clusters] == names
                    and all((c.kubernetes, c.feature_gates)
                            == (kube[c.name].version, dict(kube[c.name].feature_gates))
                            for c in existing.clusters)
                    and self.healthy(existing)):
                return existing
            self.down()
        self.root.mkdir(parents=True, exist_ok=True)
        ca = pki.new_ca()
        sa_key = pki.rsa_key_pem()
        etcd, etcd_url = start_etcd(self.binaries.etcd, self.root)
        clusters: list[ClusterInfo] = []
        ca_path = self.root / "ca.crt"
        ca_path.write_bytes(ca.cert_pem)
        _write_private(self.root / "ca.key", ca.key_pem)  # for profiles added later (Kueue)
        try:
            wait_http(etcd.health, timeout=30, proc=etcd)
            self._start_clusters(clusters, profiles, kube, etcd_url=etcd_url, ca=ca,
                                 sa_key=sa_key, ca_path=ca_path, timeout=timeout)
        except BaseException:
            for proc in [p for c in clusters for p in reversed(c.processes())] + [etcd]:
                stop_process(proc)
            raise
        merged = self.root / "kubeconfig"
        _write_private(merged, yaml.safe_dump(_kubeconfig(
            [(c.name, c.server, c.token, ca.cert_pem) for c in clusters], names[0])))
        state = FleetState(root=str(self.root), etcd=etcd, etcd_url=etcd_url,
                           clusters=clusters, kubeconfig=str(merged))
        state.write()
        return state

    def _start_clusters(self, clusters: list[ClusterInfo], profiles: dict[str, str],
                        kube: Mapping[str, KubernetesSpec], *,
                        etcd_url: str, ca: pki.CertificateAuthority, sa_key: bytes,
                        ca_path: Path, timeout: float) -> None:
        """Every apiserver, then (once they are ready) each profile's components and a real
        cluster's operators, until all answer; ``clusters`` is filled as they start, so the
        caller can stop what started when this fails."""
        names = list(profiles)
        for start in range(0, len(names), START_WAVE):
            wave = [self._start_apiserver(name=name, etcd_url=etcd_url, ca=ca, sa_key=sa_key,
                                          ca_path=ca_path, profile=profiles[name],
                                          kubernetes=kube[name])
                    for name in names[start:start + START_WAVE]]
            clusters.extend(wave)
            for cluster in wave:
                wait_ready(cluster, timeout=timeout)
        for index, cluster in enumerate(clusters):
            if cluster.real:
                clusters[index] = replace(cluster, components=self._start_components(
                    cluster, ca_path=ca_path))
            elif cluster.profile == DEDICATED:
                clusters[index] = replace(cluster, components=[self._start_kcm(
                    cluster, ca_path=ca_path, controllers=",".join(DEDICATED_CONTROLLERS),
                    gates=gate_flag(cluster.feature_gates))])
        for index, cluster in enumerate(clusters):
            if cluster.real:
                clusters[index] = replace(cluster, components=[
                    *cluster.components, *self._start_operators(cluster, ca=ca)])
        for cluster in clusters:
            wait_components(cluster, timeout=timeout)

    def _start_apiserver(self, *, name: str, etcd_url: str, ca: pki.CertificateAuthority,
                         sa_key: bytes, ca_path: Path, profile: str,
                         kubernetes: KubernetesSpec) -> ClusterInfo:
        home = self.root / name
        home.mkdir(parents=True, exist_ok=True)
        cert, key = ca.issue_serving(name)
        _write_private(home / "serving.key", key)
        (home / "serving.crt").write_bytes(cert)
        _write_private(home / "sa.key", sa_key)
        token = secrets.token_hex(24)
        _write_private(home / "tokens.csv", f'{token},admin,admin-uid,"system:masters"\n')
        port = free_port()
        server = f"https://127.0.0.1:{port}"
        prefix = f"/{name}-{uuid.uuid4().hex[:8]}/registry"
        minor = kubernetes.version
        argv = apiserver_argv(self.binaries.at(minor or None).kube_apiserver, home,
                              etcd_url=etcd_url, prefix=prefix, port=port, profile=profile,
                              minor=minor, feature_gates=kubernetes.feature_gates)
        process = spawn(argv, home / "apiserver.log", role="kube-apiserver",
                        health=f"{server}/readyz")
        kubeconfig = home / "kubeconfig"
        _write_private(kubeconfig, yaml.safe_dump(
            _kubeconfig([(name, server, token, ca.cert_pem)], name)))
        return ClusterInfo(name=name, server=server, token=token, ca_file=str(ca_path),
                           kubeconfig=str(kubeconfig), etcd_prefix=prefix, process=process,
                           profile=profile, kubernetes=minor,
                           feature_gates=dict(kubernetes.feature_gates))

    def _start_kcm(self, cluster: ClusterInfo, *, ca_path: Path,
                   controllers: str, gates: str) -> ProcessInfo:
        """kube-controller-manager running ``controllers``, each as its own ServiceAccount
        ``kube-system/<controller>`` (``--use-service-account-credentials``, as kubeadm and
        every managed cluster do): its requests are then authorized by the bootstrap
        ``system:controller:*`` roles, not by the admin token, and which accounts exist
        shows which controllers run (``job-controller`` only where the Job controller does)."""
        home = self.root / cluster.name
        port = free_port()
        argv = kcm_argv(self._at(cluster).kube_controller_manager, home,
                        kubeconfig=cluster.kubeconfig, port=port, ca_path=ca_path,
                        controllers=controllers, gates=gates)
        return spawn(argv, home / "kube-controller-manager.log", role="kube-controller-manager",
                     health=f"https://127.0.0.1:{port}/healthz")

    def _start_components(self, cluster: ClusterInfo, *, ca_path: Path) -> list[ProcessInfo]:
        """kube-controller-manager, kube-scheduler and kwok for a real cluster."""
        bins = self._at(cluster)
        flags = gang_flags(cluster.kubernetes)
        home = self.root / cluster.name
        kubeconfig = cluster.kubeconfig
        stages = home / "kwok-stages.yaml"
        stages.write_text(render_stages(job_seconds=self.job_seconds))
        scheduler_port, kwok_port = free_port(), free_port()
        scheduler = scheduler_argv(bins.kube_scheduler, home, kubeconfig=kubeconfig,
                                   port=scheduler_port,
                                   gates=flags.scheduler(cluster.feature_gates))
        kwok = kwok_argv(bins.kwok, kubeconfig=kubeconfig, stages=stages, port=kwok_port)
        return [
            self._start_kcm(cluster, ca_path=ca_path,
                            controllers=kcm_controllers(cluster.kubernetes),
                            gates=flags.kcm(cluster.feature_gates)),
            spawn(scheduler, home / "kube-scheduler.log", role="kube-scheduler",
                  health=f"https://127.0.0.1:{scheduler_port}/healthz"),
            spawn(kwok, home / "kwok.log", role="kwok",
                  health=f"http://127.0.0.1:{kwok_port}/healthz"),
        ]

    def _start_operators(self, cluster: ClusterInfo, *,
                         ca: pki.CertificateAuthority) -> list[ProcessInfo]:
        """Install (CRDs, webhook configurations) and start each workload operator of a real
        member, one process each with its own ports, certificate, config and log."""
        home = self.root / cluster.name
        rest = cluster.rest()
        started = []
        minor = self._at(cluster).minor
        for op in self.binaries.operators:
            if not op.runs_on(minor):
                continue
            run = operators.prepare(op, home=home, kubeconfig=cluster.kubeconfig, ca=ca,
                                    free_port=free_port)
            operators.install(rest, run)
            started.append(spawn(run.argv, home / f"{op.name}.log", role=op.name,
                                 health=run.health, env=run.env))
        return started

    def _at(self, cluster: ClusterInfo) -> Binaries:
        """The binaries of ``cluster``'s Kubernetes minor."""
        return self.binaries.at(cluster.kubernetes or None)

    def add_processes(self, name: str, runs: list[operators.OperatorRun], *,
                      timeout: float = START_TIMEOUT_S) -> ClusterInfo:
        """Start ``runs`` as more components of cluster ``name`` (an optional profile: Kueue),
        recorded in the state like the others (so ``status``, ``down`` and ``healthy`` see
        them; logs ``<cluster>/<run.name>.log``); returns once each answers its health URL."""
        state = self._require_state()
        cluster = state.cluster(name)
        home = self.root / name
        started = [spawn(run.argv, home / f"{run.name}.log", role=run.name,
                         health=run.health, env=run.env) for run in runs]
        cluster = replace(cluster, components=[*cluster.components, *started])
        self._save(state, cluster)
        wait_components(cluster, timeout=timeout)
        return cluster

    def healthy(self, state: FleetState) -> bool:
        """Whether etcd and every apiserver and component run and answer their health URL."""
        if not is_alive(state.etcd):
            return False
        for cluster in state.clusters:
            if not all(is_alive(p) for p in cluster.processes()):
                return False
            try:
                cluster.rest().request("GET", "/readyz", timeout=3)
            except (OSError, RuntimeError):
                return False
            if not all(probe(p) for p in cluster.components):
                return False
        return True

    def stop_cluster(self, name: str) -> None:
        """A member outage: stop its apiserver, and on a real member its kube-controller-
        manager, kube-scheduler and kwok too (the whole cluster is down; its data stays in
        etcd)."""
        state = self._require_state()
        for proc in reversed(state.cluster(name).processes()):
            stop_process(proc)

    def start_cluster(self, name: str, *, timeout: float = START_TIMEOUT_S) -> ClusterInfo:
        """Start a stopped cluster again with the same ports, prefix and credentials.

        Whatever of it still runs is kept; returns once the apiserver is ready and the
        components answer.
        """
        state = self._require_state()
        old = state.cluster(name)
        process = old.process if is_alive(old.process) else respawn(old.process)
        new = replace(old, process=process)
        try:
            wait_ready(new, timeout=timeout)
        finally:
            self._save(state, new)
        new = replace(new, components=[p if is_alive(p) else respawn(p)
                                       for p in old.components])
        self._save(state, new)
        wait_components(new, timeout=timeout)
        return new

    def _save(self, state: FleetState, cluster: ClusterInfo) -> None:
        current = self.state() or state
        replace(current, clusters=[cluster if c.name == cluster.name else c
                                   for c in current.clusters]).write()

    def processes(self) -> list[ProcessInfo]:
        """Every process of the saved state: etcd, then each cluster's."""
        state = self.state()
        if state is None:
            return []
        return [state.etcd, *(p for c in state.clusters for p in c.processes())]

    def down(self) -> None:
        """Stop every process that ``up`` started here and remove the state directory."""
        state = self.state()
        if state is not None:
            for cluster in state.clusters:
                for proc in reversed(cluster.processes()):
                    stop_process(proc)
            stop_process(state.etcd)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def _require_state(self) -> FleetState:
        state = self.state()
        if state is None:
            raise RuntimeError(f"no dev fleet runs in {self.root} (run 'dispatcher dev up')")
        return state
