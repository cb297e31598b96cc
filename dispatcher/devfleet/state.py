"""What a dev fleet started, as plain data persisted in its state directory.

``FleetState`` (``state.json``) lists every process of every cluster with its argv, pid and
log, so another process (``dispatcher dev status|down``, a test) can find and stop exactly
what was started; ``ClusterInfo.profile`` is one of ``LIGHT``, ``DEDICATED``, ``REAL``
(``devfleet/controlplane.py`` says what each runs).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dispatcher.devfleet.rest import Rest

__all__ = ["DEDICATED", "LIGHT", "REAL", "STATE_FILE", "ClusterInfo", "FleetState",
           "ProcessInfo"]

STATE_FILE = "state.json"
LIGHT, DEDICATED, REAL = "light", "dedicated", "real"
"""The cluster profiles (see the module docstring)."""


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
    kubernetes: str = ""
    """Its Kubernetes minor ("1.37"; "" for the dev fleet's default)."""
    feature_gates: dict[str, bool] = field(default_factory=dict)
    """Gates set over the dev fleet's own (the fleet file's ``kubernetes.featureGates``)."""

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
