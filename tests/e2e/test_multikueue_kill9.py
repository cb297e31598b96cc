"""MultiKueue's dispatcher killed -9 mid-burst (issue 37): nothing lost, nothing run twice.

The ``--with-kueue --kueue-dispatcher ours`` profile; ``dispatcher run --mode
multikueue-dispatcher`` as its own process. 12 Jobs labelled with the hub's LocalQueue are
created back to back; once the first nomination is on the hub the controller is killed -9
and started again. The nominations already written stay (they are on the hub, and a
nominee gets ``multiKueue.admitWithin`` from when it is seen again: never a second worker
meanwhile), the rest are nominated by the new process: every Job gets a worker, runs there,
and exactly one copy of each is ever made (every member's Jobs watched from before the
burst).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher.devfleet import multikueue
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from tests.integration.test_kueue_multikueue import JOBS, NAMESPACE, WORKLOADS

from .conftest import ControllerProcess, _controller
from .conftest import eventually as shared_eventually
from .test_real_fleet import open_clients, start

pytestmark = pytest.mark.e2e

BURST = 12
DELAY = "pod-complete.stage.kwok.x-k8s.io/delay"


@pytest.fixture
def mk_controller(mk_dispatcher_fleet: FleetState, tmp_path: Path,
                  request: pytest.FixtureRequest) -> Iterator[ControllerProcess]:
    yield from _controller(mk_dispatcher_fleet, tmp_path, request, extra=lambda _: {
        "mode": "multikueue-dispatcher", "watch": {"namespaces": [NAMESPACE]}})


def _job(name: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": NAMESPACE,
                         "labels": {"kueue.x-k8s.io/queue-name": multikueue.QUEUE}},
            "spec": {"parallelism": 1, "completions": 1, "backoffLimit": 0, "template": {
                "metadata": {"labels": {"test": name}, "annotations": {DELAY: "15s"}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "c", "image": "registry.invalid/c:1",
                    "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}


async def _workloads(hub: KubeClient, names: set[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for item in (await hub.request("GET", WORKLOADS.collection(NAMESPACE)))["items"]:
        for owner in item["metadata"].get("ownerReferences") or ():
            if owner.get("name") in names:
                out[owner["name"]] = item.get("status") or {}
    return out


async def test_killed_mid_burst_every_job_runs_once(
        mk_dispatcher_fleet: FleetState, mk_controller: ControllerProcess) -> None:
    names = {f"kill-{i:02d}" for i in range(BURST)}
    made: list[tuple[str, str]] = []
    async with contextlib.AsyncExitStack() as stack:
        clients = await stack.enter_async_context(_opened(mk_dispatcher_fleet))
        hub = clients["hub"]
        tasks = []
        for member in ("member-1", "member-2"):
            listed = await watch.list_objects(clients[member], JOBS, namespace=NAMESPACE)
            made += [(member, o["metadata"]["name"]) for o in listed.objects
                     if o["metadata"]["name"] in names]
            tasks.append(asyncio.create_task(_record(clients[member], member,
                                                     listed.resource_version, names, made)))
        try:
            await start(mk_controller)
            for name in sorted(names):
                await hub.request("POST", JOBS.collection(NAMESPACE), body=_job(name))

            async def some_nominated() -> bool:
                return any(s.get("nominatedClusterNames") or s.get("clusterName")
                           for s in (await _workloads(hub, names)).values())

            await shared_eventually(some_nominated, what="a first nomination", within=120)
            mk_controller.kill9()
            await start(mk_controller)

            async def all_chosen() -> dict[str, dict[str, Any]] | None:
                found = await _workloads(hub, names)
                done = len(found) == BURST and all(s.get("clusterName") for s in found.values())
                return found if done else None

            chosen = await shared_eventually(all_chosen, what="every Job on a worker",
                                             within=240)
            await asyncio.sleep(3)  # a late second copy would be seen by now
        finally:
            for task in tasks:
                task.cancel()
            with contextlib.suppress(Exception):
                await hub.request("DELETE", JOBS.collection(NAMESPACE),
                                  query=[("labelSelector", "kueue.x-k8s.io/queue-name"),
                                         ("propagationPolicy", "Background")])
    assert sorted(n for _, n in made) == sorted(names), made  # one copy each, none lost
    assert {n: m for m, n in made} == {n: s["clusterName"] for n, s in chosen.items()}


@contextlib.asynccontextmanager
async def _opened(fleet: FleetState) -> Any:
    async for clients in open_clients(fleet):
        yield clients


async def _record(client: KubeClient, member: str, version: str, names: set[str],
                  made: list[tuple[str, str]]) -> None:
    with contextlib.suppress(asyncio.CancelledError):
        async for item in watch.watch_from(client, JOBS, resource_version=version,
                                           namespace=NAMESPACE):
            name = item.object["metadata"]["name"]
            if item.type == "ADDED" and name in names:
                made.append((member, name))
