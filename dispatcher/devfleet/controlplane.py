"""Start, inspect and stop local control planes: one etcd, N kube-apiservers on loopback.

Each cluster is a real kube-apiserver with its own ``--etcd-prefix``, port, serving
certificate and admin token; they share one etcd (what Kubernetes' own integration tests
do). Everything lives in one state directory with a ``state.json`` describing it, so another
process (``dispatcher dev status|down``, a test) can find and stop exactly what was started.
Processes run in their own sessions and outlive the command that started them.
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
import subprocess
import time
import urllib.request
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.devfleet import pki
from dispatcher.devfleet.binaries import Binaries
from dispatcher.devfleet.rest import Rest

__all__ = ["ClusterInfo", "ControlPlanes", "FleetState", "ProcessInfo", "compact_etcd"]

STATE_FILE = "state.json"
START_TIMEOUT_S = 120.0


@dataclass(frozen=True, kw_only=True)
class ProcessInfo:
    """A started process: how to recognise it again and how to start it the same way."""

    pid: int
    argv: list[str]
    log: str


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
            kubeconfig=raw["kubeconfig"],
            clusters=[ClusterInfo(**{**c, "process": ProcessInfo(**c["process"])})
                      for c in raw["clusters"]])

    def write(self) -> None:
        """Persist atomically."""
        path = Path(self.root) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


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


def _spawn(argv: list[str], log: Path) -> ProcessInfo:
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    _CHILDREN[proc.pid] = proc
    return ProcessInfo(pid=proc.pid, argv=argv, log=str(log))


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
    """Local control planes rooted at one state directory."""

    def __init__(self, *, root: Path, binaries: Binaries) -> None:
        self.root = root
        self.binaries = binaries

    def state(self) -> FleetState | None:
        """The saved state, or None."""
        return FleetState.read(self.root)

    def up(self, *, names: list[str], timeout: float = START_TIMEOUT_S) -> FleetState:
        """Start etcd and one apiserver per name; return when every one is ready.

        Idempotent: when a healthy fleet with the same names already runs here, it is returned
        as is. A half-dead one is stopped and started afresh.
        """
        existing = self.state()
        if existing is not None:
            if [c.name for c in existing.clusters] == names and self.healthy(existing):
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
                       "--unsafe-no-fsync=true", "--log-level=warn"], self.root / "etcd.log")
        clusters: list[ClusterInfo] = []
        ca_path = self.root / "ca.crt"
        ca_path.write_bytes(ca.cert_pem)
        try:
            _wait_http(f"{etcd_url}/health", timeout=30, proc=etcd)
            for name in names:
                clusters.append(self._start_apiserver(name=name, etcd_url=etcd_url, ca=ca,
                                                      sa_key=sa_key, ca_path=ca_path))
            for cluster in clusters:
                _wait_ready(cluster, timeout=timeout)
        except BaseException:
            for proc in [c.process for c in clusters] + [etcd]:
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
                         sa_key: bytes, ca_path: Path) -> ClusterInfo:
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
            # No ServiceAccount controller here; no node lifecycle controller to lift the
            # not-ready taint that TaintNodesByCondition would put on every new Node.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            "--v=1",
        ]
        process = _spawn(argv, home / "apiserver.log")
        kubeconfig = home / "kubeconfig"
        _write_private(kubeconfig, yaml.safe_dump(
            _kubeconfig([(name, server, token, ca.cert_pem)], name)))
        return ClusterInfo(name=name, server=server, token=token, ca_file=str(ca_path),
                           kubeconfig=str(kubeconfig), etcd_prefix=prefix, process=process)

    def healthy(self, state: FleetState) -> bool:
        """Whether etcd and every apiserver run and answer /readyz."""
        if not is_alive(state.etcd):
            return False
        for cluster in state.clusters:
            if not is_alive(cluster.process):
                return False
            try:
                cluster.rest().request("GET", "/readyz", timeout=3)
            except (OSError, RuntimeError):
                return False
        return True

    def stop_cluster(self, name: str) -> None:
        """Stop one apiserver (its data stays in etcd): a member outage."""
        state = self._require_state()
        stop_process(state.cluster(name).process)

    def start_cluster(self, name: str, *, timeout: float = START_TIMEOUT_S) -> ClusterInfo:
        """Start a stopped apiserver again with the same port, prefix and credentials."""
        state = self._require_state()
        old = state.cluster(name)
        if is_alive(old.process):
            return old
        process = _spawn(old.process.argv, Path(old.process.log))
        new = replace(old, process=process)
        replace(state, clusters=[new if c.name == name else c for c in state.clusters]).write()
        _wait_ready(new, timeout=timeout)
        return new

    def down(self) -> None:
        """Stop every process that ``up`` started here and remove the state directory."""
        state = self.state()
        if state is not None:
            for cluster in state.clusters:
                stop_process(cluster.process)
            stop_process(state.etcd)
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)

    def _require_state(self) -> FleetState:
        state = self.state()
        if state is None:
            raise RuntimeError(f"no dev fleet runs in {self.root} (run 'dispatcher dev up')")
        return state


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
