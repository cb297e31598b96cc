"""A waiting workload on real apiservers: its Dispatch is written when what its reason means
changes, and only refreshed (every ``queue.pendingRefresh`` at most) when numbers change.

A JobSet of one 8-GPU H100 pod waits because every H100 node of member-1 has a GPU taken
(largest free block 7) and member-2's H100 is tainted. Then the free GPUs change
``CHANGES`` times, one 1-GPU pod bound every half second, so each change moves the numbers
of its reason and nothing else. Checked on a watch of the Dispatch: any two Pending writes
are at least the refresh interval apart (the rewrite at every number change is gone), there
are fewer of them than changes, the message ends up with the last numbers (the refresh came),
and the hub holds one warning ``Pending`` Event for the workload (a refresh emits none).
Left out: figures (``benchmarks/peers.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from typing import Any

import pytest

from dispatcher.control.core.decide import Rules
from dispatcher.control.core.record import parse_time
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube import watch
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import DISPATCHES, EVENTS, NAMESPACES, NODES, PODS
from tests.builders import jobset
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_control_dispatch import JOBSETS

pytestmark = pytest.mark.integration

H100 = "NVIDIA-H100-80GB-HBM3"
REFRESH_S = 4.0
CHANGES = 10


def filler(name: str, node: str, namespace: str) -> dict[str, Any]:
    """A pod bound to ``node`` holding one GPU (no kubelet here: it stays bound)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{
                "name": "main", "image": "busybox",
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


async def fillers_on(member: KubeClient, namespace: str, nodes: list[str], count: int,
                     start: int = 0) -> None:
    for i in range(start, start + count):
        await member.request("POST", PODS.collection(namespace),
                             body=filler(f"filler-{i}", nodes[i % len(nodes)], namespace))


async def pending_writes(h: Harness, name: str, version: str, seen: list[dict[str, Any]]
                         ) -> None:
    """Every write of the Dispatch ``name`` after ``version``, as the watch saw it."""
    async for event in watch.watch_from(h.hub, DISPATCHES, resource_version=version,
                                        namespace=h.namespace,
                                        field_selector=f"metadata.name={name}"):
        if isinstance(event, watch.Changed) and event.type == "MODIFIED":
            seen.append(event.object)


def placed(record: dict[str, Any] | None) -> dict[str, Any]:
    conditions = ((record or {}).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c["type"] == "Placed"), {})


async def test_free_gpus_changing_n_times_write_once_plus_refreshes(
        dev_fleet: FleetState) -> None:
    async with running(dev_fleet, rules=Rules(pending_refresh_s=REFRESH_S)) as h:
        member = h.members["member-1"]
        listed = await member.request("GET", NODES.collection(), query=[
            ("labelSelector", f"nvidia.com/gpu.product={H100}")])
        nodes = sorted(n["metadata"]["name"] for n in listed["items"])
        assert nodes  # the integration fleet's member-1 has two
        free_h100 = 7 * len(nodes)
        with contextlib.suppress(KubeError):
            await member.request("POST", NAMESPACES.collection(), body={
                "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": h.namespace}})
        try:
            await fillers_on(member, h.namespace, nodes, len(nodes))  # largest block: 7

            async def seen_full() -> bool:
                snapshot = h.controller.fleet.snapshot("member-1")
                if snapshot is None:
                    return False
                free = [node.free if (node := snapshot.capacity.node(n)) else None
                        for n in nodes]
                return free == [7] * len(nodes)

            await eventually(seen_full, what="member-1's H100 nodes with 7 GPUs free")
            body = jobset("wide", namespace=h.namespace, replicas=1, gpus=8)
            pod_spec = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
            pod_spec["nodeSelector"] = {"nvidia.com/gpu.product": H100}
            created = await h.hub.request("POST", JOBSETS.collection(h.namespace), body=body)
            uid = created["metadata"]["uid"]

            async def waiting() -> dict[str, Any] | None:
                record = await get_or_none(h.hub, DISPATCHES.item("jobset-wide", h.namespace))
                return record if placed(record).get("reason") == "NoFeasibleMember" else None

            first = await eventually(waiting, what="Pending, NoFeasibleMember")
            assert f"{free_h100} GPUs free on nodes with product" in placed(first)["message"]
            first_at = parse_time(first["status"]["pending"]["writtenAt"])
            assert first_at is not None and first["status"]["pending"]["key"]
            seen: list[dict[str, Any]] = []
            watcher = asyncio.create_task(pending_writes(
                h, "jobset-wide", first["metadata"]["resourceVersion"], seen))
            try:
                for change in range(CHANGES):
                    await fillers_on(member, h.namespace, nodes, 1, start=len(nodes) + change)
                    await asyncio.sleep(0.5)
                last = f"{free_h100 - CHANGES} GPUs free on nodes with product"

                async def refreshed() -> dict[str, Any] | None:
                    record = await get_or_none(h.hub,
                                               DISPATCHES.item("jobset-wide", h.namespace))
                    return record if last in placed(record).get("message", "") else None

                final = await eventually(refreshed, what="the last numbers, refreshed",
                                         within=REFRESH_S + 20)
                await asyncio.sleep(0.5)  # the watch delivers the write it came with
            finally:
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher
            times = [first_at] + [parse_time(r["status"]["pending"]["writtenAt"])
                                  for r in seen]
            written = sorted({t for t in times if t is not None})
            gaps = [b - a for a, b in itertools.pairwise(written)]
            assert written[1:], "the numbers were never refreshed"
            assert all(gap >= REFRESH_S - 0.01 for gap in gaps), gaps
            assert len(written) - 1 < CHANGES / 2, written
            assert placed(final)["reason"] == "NoFeasibleMember"
            assert final["status"]["pending"]["key"] == first["status"]["pending"]["key"]
            events = await h.hub.request("GET", EVENTS.collection(h.namespace), query=[
                ("fieldSelector", f"involvedObject.uid={uid}")])
            pending = [e for e in events["items"] if e["reason"] == "Pending"]
            assert len(pending) == 1 and pending[0]["type"] == "Warning"
            assert pending[0].get("count", 1) == 1
        finally:
            listed = await member.request("GET", PODS.collection(h.namespace))
            for item in listed.get("items", []):
                await member.request("DELETE", PODS.item(item["metadata"]["name"],
                                                          h.namespace),
                                     query=[("gracePeriodSeconds", "0")])
