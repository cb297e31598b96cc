"""The controller as a separate process (``python -m dispatcher run --config FILE``).

``controller`` (light fleet) and ``real_controller`` (real fleet) prepare one with a config
written for the session's fleet (its own hub id and namespace, short failover timings, a
free metrics port) and kill it after the test; ``start()`` starts it (again, with the same
config), ``kill9()`` ends it without any cleanup. Logs go to a file per process, printed
when a test fails.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState, free_port
from dispatcher.kube.errors import KubeError

pytestmark = pytest.mark.e2e


@dataclass
class ControllerProcess:
    config: Path
    namespace: str
    hub_id: str
    port: int
    logs: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    files: list[IO[bytes]] = field(default_factory=list)

    def start(self) -> subprocess.Popen[bytes]:
        log = (self.logs / f"controller-{len(self.procs)}.log").open("wb")
        self.files.append(log)
        proc = subprocess.Popen([sys.executable, "-m", "dispatcher", "run", "--config",
                                 str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.procs.append(proc)
        return proc

    def kill9(self) -> None:
        self.procs[-1].send_signal(signal.SIGKILL)
        self.procs[-1].wait(timeout=10)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
        for file in self.files:
            file.close()

    def output(self) -> str:
        return "\n".join(p.read_text(errors="replace")[-4000:]
                         for p in sorted(self.logs.glob("controller-*.log")))


def write_config(path: Path, *, state: FleetState, hub_id: str, namespace: str,
                 port: int, extra: dict[str, Any] | None = None) -> None:
    """The controller's config file for a test; ``extra`` is merged in, section by section."""
    config: dict[str, Any] = {
        "hubId": hub_id,
        "hub": {"kubeconfig": state.cluster("hub").kubeconfig},
        "watch": {"namespaces": [namespace]},
        "submit": {"createNamespaces": True},
        "reservations": {"ttl": 600},
        "failover": {"policy": "if-not-started", "memberLostAfter": 3, "maxAttempts": 3},
        "sweep": {"interval": 5},
        "leaderElection": {"namespace": "dispatcher-system", "name": f"lease-{hub_id}",
                           "leaseDuration": 2, "renewEvery": 0.5},
        "server": {"address": "127.0.0.1", "port": port},
        "fleet": {"watchMemberClusters": False, "unreachableAfter": 1.5, "probeInterval": 0.5,
                  "reconnectMax": 1,
                  "staticMembers": [{"name": n, "kubeconfig": state.cluster(n).kubeconfig}
                                    for n in ("member-1", "member-2")]},
    }
    for key, value in (extra or {}).items():
        base = config.get(key)
        config[key] = {**base, **value} if isinstance(base, dict) else value
    path.write_text(yaml.safe_dump(config))


def _controller(state: FleetState, tmp_path: Path, request: pytest.FixtureRequest,
                extra: Callable[[str], dict[str, Any]] | None = None
                ) -> Iterator[ControllerProcess]:
    hub_id = f"e2e-{uuid.uuid4().hex[:6]}"
    namespace = f"e2e-{uuid.uuid4().hex[:8]}"
    port = free_port()
    config = tmp_path / "config.yaml"
    write_config(config, state=state, hub_id=hub_id, namespace=namespace, port=port,
                 extra=extra(hub_id) if extra else None)
    proc = ControllerProcess(config=config, namespace=namespace, hub_id=hub_id, port=port,
                             logs=tmp_path)
    try:
        yield proc
    finally:
        proc.stop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(proc.output())


@pytest.fixture
def controller(dev_fleet: FleetState, tmp_path: Path, request: pytest.FixtureRequest
               ) -> Iterator[ControllerProcess]:
    """A controller process (not started) for the light fleet."""
    yield from _controller(dev_fleet, tmp_path, request)


@pytest.fixture
def real_controller(real_fleet: FleetState, tmp_path: Path, request: pytest.FixtureRequest
                    ) -> Iterator[ControllerProcess]:
    """A controller process (not started) for the real fleet (scheduler, kcm, kwok and
    operators on the members)."""
    yield from _controller(real_fleet, tmp_path, request)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


async def eventually(check: Callable[[], Awaitable[Any]], *, what: str,
                     within: float = 30.0, interval: float = 0.05) -> Any:
    """Poll ``check`` until truthy; fail after ``within`` seconds (a functional bound)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        try:
            value = await check()
        except KubeError:
            value = None
        if value:
            return value
        if loop.time() > deadline:
            pytest.fail(f"timed out after {within:.0f}s waiting for {what}")
        await asyncio.sleep(interval)
