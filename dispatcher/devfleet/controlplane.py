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
import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Collection
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import operators
from dispatcher.devfleet.binaries import Binaries, kwok_stages
from dispatcher.devfleet.rest import ApiError, Rest
from dispatcher.kube import pki

__all__ = ["DEDICATED", "DEDICATED_CONTROLLERS", "JOB_SECONDS", "KWOK_NODE_ANNOTATION", "LIGHT",
           "REAL", "ClusterInfo", "ControlPlanes", "FleetState", "ProcessInfo", "compact_etcd",
           "is_alive", "probe", "render_stages", "stop_process"]

STATE_FILE = "state.json"
START_TIMEOUT_S = 120.0
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
"""The annotation that hands a Node of a real member to its kwok (key, value)."""
JOB_SECONDS = 5.0
"""Default run time of a Job's pod on a real member (kwok's pod-complete stage)."""

LIGHT, DEDICATED, REAL = "light", "dedicated", "real"
"""The cluster profiles (see the module docstring)."""

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


@dataclass(frozen=True, kw_only=True)
class ProcessInfo:
    """A started process: how to recognise it again and how to start it the same way."""

    pid: int
    argv: list[str]
    log: str
    role: str = ""
    """kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok or the name of a
    workload operator (jobset, ...)."""
    health: str = ""
    """A loopback URL answering 200 once the process is ready ("" when it has none)."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables set for the process on top of the inherited ones."""


@dataclass(frozen=True, kw_only=True)
class ClusterInfo:
    """One local cluster (hub or member)."""

    name: str
    server: str
    token: str
    ca_file: str
    kubeconfig: str
    etcd_prefix: str
    process: ProcessInfo
    """The kube-apiserver."""
    components: list[ProcessInfo] = field(default_factory=list)
    """What runs besides the apiserver: kube-controller-manager, kube-scheduler, kwok and the
    operators on a real cluster, kube-controller-manager on a dedicated one, nothing on a
    light one (plus Kueue with the ``--with-kueue`` profile)."""
    profile: str = LIGHT
    """``light``, ``dedicated`` or ``real`` (module docstring)."""

    @property
    def real(self) -> bool:
        """Whether this is a full cluster that runs pods (controllers, scheduler, kwok)."""
        return self.profile == REAL

    @property
    def controllers(self) -> bool:
        """Whether a kube-controller-manager runs here (a real or a dedicated cluster), so
        the ``default`` ServiceAccount of every namespace is made for it."""
        return self.profile in (REAL, DEDICATED)

    def processes(self) -> list[ProcessInfo]:
        """The apiserver then the components."""
        return [self.process, *self.components]

    def rest(self) -> Rest:
        """A synchronous admin client for set-up."""
        return Rest(server=self.server, token=self.token, ca_file=Path(self.ca_file))


@dataclass(frozen=True, kw_only=True)
class FleetState:
    """What ``up`` started; persisted as ``state.json`` in the state directory."""

    root: str
    etcd: ProcessInfo
    etcd_url: str
    clusters: list[ClusterInfo]
    kubeconfig: str
    hub_mode: str = ""
    """``dedicated`` or ``shared`` for a fleet of ``devfleet.up`` (how its hub runs), ""
    for control planes started without a hub."""

    def cluster(self, name: str) -> ClusterInfo:
        """The cluster called ``name``."""
        for cluster in self.clusters:
            if cluster.name == name:
                return cluster
        raise KeyError(f"no cluster {name!r} (have {', '.join(c.name for c in self.clusters)})")

    @staticmethod
    def read(root: Path) -> FleetState | None:
        """The saved state of ``root``, or None when nothing was started there."""
        try:
            raw = json.loads((root / STATE_FILE).read_text())
        except FileNotFoundError:
            return None
        return FleetState(
            root=raw["root"], etcd=ProcessInfo(**raw["etcd"]), etcd_url=raw["etcd_url"],
            kubeconfig=raw["kubeconfig"], hub_mode=raw.get("hub_mode", ""),
            clusters=[_cluster_info(c) for c in raw["clusters"]])

    def write(self) -> None:
        """Persist atomically."""
        path = Path(self.root) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


def _cluster_info(raw: dict[str, Any]) -> ClusterInfo:
    """A ClusterInfo from ``state.json``; a state written before profiles were recorded is
    read by what runs (a kube-controller-manager meant a real member then)."""
    components = [ProcessInfo(**p) for p in raw.get("components", [])]
    profile = raw.get("profile") or (
        REAL if any(p.role == "kube-controller-manager" for p in components) else LIGHT)
    return ClusterInfo(**{**raw, "process": ProcessInfo(**raw["process"]),
                          "components": components, "profile": profile})


def free_port() -> int:
    """A currently free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def is_alive(proc: ProcessInfo) -> bool:
    """Whether ``proc`` is still the process we started (pid not reused by another binary)."""
    child = _CHILDREN.get(proc.pid)
    if child is not None:  # our own child: poll() is exact (and /proc may still show the
        return child.poll() is None  # pre-exec, empty cmdline right after the spawn)
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return cmdline == proc.argv[0] and state != "Z"


# Processes this interpreter started, kept so they can be reaped (and so Popen does not warn
# about dropping a running child: they are meant to outlive the command that started them).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _spawn(argv: list[str], log: Path, *, role: str, health: str = "",
           env: dict[str, str] | None = None) -> ProcessInfo:
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **env} if env else None)
    _CHILDREN[proc.pid] = proc
    return ProcessInfo(pid=proc.pid, argv=argv, log=str(log), role=role, health=health,
                       env=dict(env or {}))


def _respawn(proc: ProcessInfo) -> ProcessInfo:
    """Start ``proc`` again the same way (argv, environment, log, ports)."""
    return _spawn(proc.argv, Path(proc.log), role=proc.role, health=proc.health, env=proc.env)


def stop_process(proc: ProcessInfo, *, timeout: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL after ``timeout``; no-op when already gone."""
    if not is_alive(proc):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(proc):
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    child = _CHILDREN.pop(proc.pid, None)
    if child is not None:  # our own child: reap it
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)


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
           dedicated: Collection[str] = (), timeout: float = START_TIMEOUT_S) -> FleetState:
        """Start etcd and one apiserver per name; return when every one is ready.

        The clusters named in ``real`` also get kube-controller-manager, kube-scheduler,
        kwok and the operators; those in ``dedicated`` a kube-controller-manager limited to
        ``DEDICATED_CONTROLLERS``. Either is ready once its components answer and the
        ``default`` ServiceAccount exists (Nodes are created later, by provisioning); the
        others are light. Idempotent: when a healthy fleet with the same names and the same
        profiles already runs here, it is returned as is. A half-dead or different one is
        stopped and started afresh.
        """
        unknown = (set(real) | set(dedicated)) - set(names)
        if unknown:
            raise ValueError(f"clusters {sorted(unknown)} are not among {names}")
        if set(real) & set(dedicated):
            raise ValueError(f"clusters {sorted(set(real) & set(dedicated))} cannot be both "
                             f"real and dedicated")
        profiles = {name: REAL if name in real else DEDICATED if name in dedicated else LIGHT
                    for name in names}
        existing = self.state()
        if existing is not None:
            if ({c.name: c.profile for c in existing.clusters} == profiles
                    and [c.name for c in existing.clusters] == names
                    and self.healthy(existing)):
                return existing
            self.down()
        self.root.mkdir(parents=True, exist_ok=True)
        ca = pki.new_ca()
        sa_key = pki.rsa_key_pem()
        etcd_port, peer_port = free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        etcd = _spawn([str(self.binaries.etcd), "--name=devfleet",
                       f"--data-dir={self.root / 'etcd'}",
                       f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                       f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                       f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                       f"--initial-cluster=devfleet=http://127.0.0.1:{peer_port}",
                       "--unsafe-no-fsync=true", "--log-level=warn"], self.root / "etcd.log",
                      role="etcd", health=f"{etcd_url}/health")
        clusters: list[ClusterInfo] = []
        ca_path = self.root / "ca.crt"
        ca_path.write_bytes(ca.cert_pem)
        _write_private(self.root / "ca.key", ca.key_pem)  # for profiles added later (Kueue)
        try:
            _wait_http(etcd.health, timeout=30, proc=etcd)
            for name in names:
                clusters.append(self._start_apiserver(name=name, etcd_url=etcd_url, ca=ca,
                                                      sa_key=sa_key, ca_path=ca_path,
                                                      profile=profiles[name]))
            for cluster in clusters:
                _wait_ready(cluster, timeout=timeout)
            for index, cluster in enumerate(clusters):
                if cluster.real:
                    clusters[index] = replace(cluster, components=self._start_components(
                        cluster, ca_path=ca_path))
                elif cluster.profile == DEDICATED:
                    clusters[index] = replace(cluster, components=[self._start_kcm(
                        cluster, ca_path=ca_path, controllers=",".join(DEDICATED_CONTROLLERS))])
            for index, cluster in enumerate(clusters):
                if cluster.real:
                    clusters[index] = replace(cluster, components=[
                        *cluster.components, *self._start_operators(cluster, ca=ca)])
            for cluster in clusters:
                _wait_components(cluster, timeout=timeout)
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

    def _start_apiserver(self, *, name: str, etcd_url: str, ca: pki.CertificateAuthority,
                         sa_key: bytes, ca_path: Path, profile: str) -> ClusterInfo:
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
        argv = [
            str(self.binaries.kube_apiserver),
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
        process = _spawn(argv, home / "apiserver.log", role="kube-apiserver",
                         health=f"{server}/readyz")
        kubeconfig = home / "kubeconfig"
        _write_private(kubeconfig, yaml.safe_dump(
            _kubeconfig([(name, server, token, ca.cert_pem)], name)))
        return ClusterInfo(name=name, server=server, token=token, ca_file=str(ca_path),
                           kubeconfig=str(kubeconfig), etcd_prefix=prefix, process=process,
                           profile=profile)

    def _start_kcm(self, cluster: ClusterInfo, *, ca_path: Path,
                   controllers: str) -> ProcessInfo:
        """kube-controller-manager running ``controllers``, each as its own ServiceAccount
        ``kube-system/<controller>`` (``--use-service-account-credentials``, as kubeadm and
        every managed cluster do): its requests are then authorized by the bootstrap
        ``system:controller:*`` roles, not by the admin token, and which accounts exist
        shows which controllers run (``job-controller`` only where the Job controller does)."""
        home = self.root / cluster.name
        port = free_port()
        argv = [
            str(self.binaries.kube_controller_manager), f"--kubeconfig={cluster.kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={port}", f"--cert-dir={home / 'kcm-certs'}",
            f"--service-account-private-key-file={home / 'sa.key'}",
            "--use-service-account-credentials=true", f"--root-ca-file={ca_path}",
            f"--controllers={controllers}", "--profiling=false", "--v=1",
        ]
        return _spawn(argv, home / "kube-controller-manager.log", role="kube-controller-manager",
                      health=f"https://127.0.0.1:{port}/healthz")

    def _start_components(self, cluster: ClusterInfo, *, ca_path: Path) -> list[ProcessInfo]:
        """kube-controller-manager, kube-scheduler and kwok for a real cluster."""
        bins = self.binaries
        home = self.root / cluster.name
        kubeconfig = cluster.kubeconfig
        stages = home / "kwok-stages.yaml"
        stages.write_text(render_stages(job_seconds=self.job_seconds))
        scheduler_port, kwok_port = free_port(), free_port()
        key, value = KWOK_NODE_ANNOTATION
        scheduler = [
            str(bins.kube_scheduler), f"--kubeconfig={kubeconfig}",
            "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={scheduler_port}", f"--cert-dir={home / 'scheduler-certs'}",
            f"--feature-gates={GANG_GATES_SCHEDULER}", "--profiling=false", "--v=1",
        ]
        kwok = [
            str(bins.kwok), f"--kubeconfig={kubeconfig}", f"--config={stages}",
            f"--manage-nodes-with-annotation-selector={key}={value}",
            f"--server-address=127.0.0.1:{kwok_port}", "--node-lease-duration-seconds=40",
            "--node-ip=127.0.0.1", "--cidr=10.244.0.0/16",
        ]
        return [
            self._start_kcm(cluster, ca_path=ca_path, controllers=KCM_CONTROLLERS),
            _spawn(scheduler, home / "kube-scheduler.log", role="kube-scheduler",
                   health=f"https://127.0.0.1:{scheduler_port}/healthz"),
            _spawn(kwok, home / "kwok.log", role="kwok",
                   health=f"http://127.0.0.1:{kwok_port}/healthz"),
        ]

    def _start_operators(self, cluster: ClusterInfo, *,
                         ca: pki.CertificateAuthority) -> list[ProcessInfo]:
        """Install (CRDs, webhook configurations) and start each workload operator of a real
        member, one process each with its own ports, certificate, config and log."""
        home = self.root / cluster.name
        rest = cluster.rest()
        started = []
        for op in self.binaries.operators:
            run = operators.prepare(op, home=home, kubeconfig=cluster.kubeconfig, ca=ca,
                                    free_port=free_port)
            operators.install(rest, run)
            started.append(_spawn(run.argv, home / f"{op.name}.log", role=op.name,
                                  health=run.health, env=run.env))
        return started

    def add_processes(self, name: str, runs: list[operators.OperatorRun], *,
                      timeout: float = START_TIMEOUT_S) -> ClusterInfo:
        """Start ``runs`` as more components of cluster ``name`` (an optional profile: Kueue),
        recorded in the state like the others (so ``status``, ``down`` and ``healthy`` see
        them; logs ``<cluster>/<run.name>.log``); returns once each answers its health URL."""
        state = self._require_state()
        cluster = state.cluster(name)
        home = self.root / name
        started = [_spawn(run.argv, home / f"{run.name}.log", role=run.name,
                          health=run.health, env=run.env) for run in runs]
        cluster = replace(cluster, components=[*cluster.components, *started])
        self._save(state, cluster)
        _wait_components(cluster, timeout=timeout)
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
        process = old.process if is_alive(old.process) else _respawn(old.process)
        new = replace(old, process=process)
        try:
            _wait_ready(new, timeout=timeout)
        finally:
            self._save(state, new)
        new = replace(new, components=[p if is_alive(p) else _respawn(p)
                                       for p in old.components])
        self._save(state, new)
        _wait_components(new, timeout=timeout)
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


def probe(proc: ProcessInfo, *, timeout: float = 3.0) -> bool:
    """Whether ``proc`` runs and its health URL answers 200 (TLS unverified: the scheduler's
    and controller-manager's self-signed serving certificates)."""
    if not is_alive(proc):
        return False
    if not proc.health:
        return True
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(proc.health, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def compact_etcd(state: FleetState) -> int:
    """Compact etcd up to its current revision (through its HTTP gateway); returns it.

    Older resourceVersions are then gone for every cluster: watches from them get 410, the
    situation informers must survive.
    """
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(path: str, body: dict[str, Any]) -> Any:
        req = urllib.request.Request(f"{state.etcd_url}{path}", data=json.dumps(body).encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        with opener.open(req, timeout=10) as resp:
            return json.loads(resp.read())

    revision = int(post("/v3/kv/range", {"key": "AA==", "limit": 1})["header"]["revision"])
    post("/v3/kv/compaction", {"revision": str(revision), "physical": True})
    return revision


def _log_tail(proc: ProcessInfo, lines: int = 15) -> str:
    try:
        return "\n".join(Path(proc.log).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _wait_http(url: str, *, timeout: float, proc: ProcessInfo) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(proc):
            raise RuntimeError(f"{proc.argv[0]} exited; log {proc.log}:\n{_log_tail(proc)}")
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f}s; log {proc.log}")


def _wait_ready(cluster: ClusterInfo, *, timeout: float) -> None:
    rest = cluster.rest()
    deadline = time.monotonic() + timeout
    for path in ("/readyz", "/api/v1/namespaces/default", "/api/v1/namespaces/kube-system"):
        while True:
            if not is_alive(cluster.process):
                raise RuntimeError(f"kube-apiserver {cluster.name} exited; log "
                                   f"{cluster.process.log}:\n{_log_tail(cluster.process)}")
            try:
                rest.request("GET", path, timeout=5)
                break
            except (OSError, RuntimeError) as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{cluster.name}: {path} not ready after {timeout:.0f}s "
                                       f"({exc}); log {cluster.process.log}") from exc
                time.sleep(0.2)


def _wait_components(cluster: ClusterInfo, *, timeout: float) -> None:
    """Wait until every component answers its health URL and, where a kube-controller-manager
    runs, its ServiceAccount controller has made ``default/default`` (pods are admitted from
    then on)."""
    deadline = time.monotonic() + timeout
    for proc in cluster.components:
        while not probe(proc):
            if not is_alive(proc):
                raise RuntimeError(f"{proc.role} of {cluster.name} exited; log {proc.log}:\n"
                                   f"{_log_tail(proc)}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{cluster.name}: {proc.role} not healthy at {proc.health} "
                                   f"after {timeout:.0f}s; log {proc.log}")
            time.sleep(0.2)
    if not cluster.controllers:
        return
    rest = cluster.rest()
    while True:
        try:
            rest.request("GET", "/api/v1/namespaces/default/serviceaccounts/default", timeout=5)
            return
        except (ApiError, OSError) as exc:
            if time.monotonic() > deadline:
                kcm = next(p for p in cluster.components
                           if p.role == "kube-controller-manager")
                raise TimeoutError(f"{cluster.name}: no default ServiceAccount after "
                                   f"{timeout:.0f}s ({exc}); log {kcm.log}") from exc
            time.sleep(0.2)
