"""Shared by the benchmarks that run ``dispatcher run`` against a dev fleet: clients for the
fleet's clusters and the controller process's readiness (one copy, so the benchmarks measure
the same way)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import urllib.request
from pathlib import Path

import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import KubeClient

__all__ = ["client_for", "percentile", "stop", "wait_ready"]


async def client_for(state: FleetState, name: str) -> KubeClient:
    """An admin client of cluster ``name`` of the fleet (hub or a member)."""
    path = Path(state.cluster(name).kubeconfig)
    kubeconfig = yaml.safe_load(await asyncio.to_thread(path.read_text))
    return await KubeClient.from_kubeconfig(kubeconfig, name=name)


async def wait_ready(port: int, proc: subprocess.Popen[bytes], *, within: float = 60.0
                     ) -> None:
    """Until the controller's ``/readyz`` answers 200 (it exited or ``within`` s: an
    error)."""
    def probe() -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
                return int(r.status)
        except OSError:
            return 0

    for _ in range(int(within * 10)):
        if proc.poll() is not None:
            raise RuntimeError("the controller exited")
        if await asyncio.to_thread(probe) == 200:
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"controller not ready after {within:g} s")


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile by nearest rank (``values`` not empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the controller drains), SIGKILL after 20 s."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
