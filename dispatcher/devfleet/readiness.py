"""Waiting for a started cluster: its apiserver ready, then its components healthy and, where
a kube-controller-manager runs, the ``default`` ServiceAccount made (pods are admitted)."""

from __future__ import annotations

import time

from dispatcher.devfleet.processes import is_alive, log_tail, probe
from dispatcher.devfleet.rest import ApiError
from dispatcher.devfleet.state import ClusterInfo

__all__ = ["wait_components", "wait_ready"]


def wait_ready(cluster: ClusterInfo, *, timeout: float) -> None:
    rest = cluster.rest()
    deadline = time.monotonic() + timeout
    for path in ("/readyz", "/api/v1/namespaces/default", "/api/v1/namespaces/kube-system"):
        while True:
            if not is_alive(cluster.process):
                raise RuntimeError(f"kube-apiserver {cluster.name} exited; log "
                                   f"{cluster.process.log}:\n{log_tail(cluster.process)}")
            try:
                rest.request("GET", path, timeout=5)
                break
            except (OSError, RuntimeError) as exc:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{cluster.name}: {path} not ready after {timeout:.0f}s "
                                       f"({exc}); log {cluster.process.log}") from exc
                time.sleep(0.2)


def wait_components(cluster: ClusterInfo, *, timeout: float) -> None:
    """Wait until every component answers its health URL and, where a kube-controller-manager
    runs, its ServiceAccount controller has made ``default/default`` (pods are admitted from
    then on)."""
    deadline = time.monotonic() + timeout
    for proc in cluster.components:
        while not probe(proc):
            if not is_alive(proc):
                raise RuntimeError(f"{proc.role} of {cluster.name} exited; log {proc.log}:\n"
                                   f"{log_tail(proc)}")
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
