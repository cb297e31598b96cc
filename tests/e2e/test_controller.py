"""End to end: ``dispatcher run`` as its own process against the dev fleet's apiservers.

Covers the issue's "done when" list: placement on the member with the most free GPUs; a
16-GPU gang that fits only on one member; member status on the hub within 2 s; hub
deletion removing the copy; Pending with a reason until a node with room is added; kill -9
during a burst of 100 workloads, then exactly 100 copies; a member outage turning
workloads Unknown, the failover policy moving them, and no duplicate once the member is
back; /healthz, /readyz, /metrics. Expectations are computed from the fleet (nodes listed
on each member, placed by the placement core), not hard-coded.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.kube import watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, NODES, ResourceRef
from dispatcher.placement import engine
from dispatcher.placement.model import MemberSnapshot, PlacementRequest
from dispatcher.workloads.catalog import Catalog
from tests.builders import jobset

from .conftest import ControllerProcess, eventually

pytestmark = pytest.mark.e2e

JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)
MEMBERS = ("member-1", "member-2")


class Clusters:
    def __init__(self, clients: dict[str, KubeClient], namespace: str) -> None:
        self.hub = clients["hub"]
        self.members = {n: clients[n] for n in MEMBERS}
        self.namespace = namespace

    async def copies(self, name: str) -> dict[str, dict[str, Any]]:
        found = {}
        for member, client in self.members.items():
            with contextlib.suppress(NotFound):
                found[member] = await client.request("GET",
                                                     JOBSETS.item(name, self.namespace))
        return found

    async def record(self, name: str) -> dict[str, Any] | None:
        try:
            got: dict[str, Any] = await self.hub.request(
                "GET", DISPATCHES.item(f"jobset-{name}", self.namespace))
            return got
        except NotFound:
            return None

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.hub.request(
            "POST", JOBSETS.collection(self.namespace), body=body)
        return created


@pytest.fixture
async def clusters(dev_fleet: FleetState, controller: ControllerProcess
                   ) -> AsyncIterator[Clusters]:
    clients = {}
    for name in ("hub", *MEMBERS):
        kubeconfig = yaml.safe_load(Path(dev_fleet.cluster(name).kubeconfig).read_text())
        clients[name] = await KubeClient.from_kubeconfig(kubeconfig, name=name)
    await clients["hub"].request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": controller.namespace}})
    try:
        yield Clusters(clients, controller.namespace)
    finally:
        for client in clients.values():
            await client.close()


async def member_snapshots(c: Clusters) -> list[MemberSnapshot]:
    """The members as placement sees them, built from their Nodes (no pods, no dispatches)."""
    out = []
    for name, client in c.members.items():
        capacity = ClusterCapacity()
        for node in (await watch.list_objects(client, NODES)).objects:
            capacity.upsert_node(node)
        out.append(MemberSnapshot(name=name, capacity=capacity))
    return out


def expected_member(body: dict[str, Any], snapshots: list[MemberSnapshot]) -> str | None:
    resolution = Catalog.builtin().resolve(body)
    return engine.decide(snapshots, PlacementRequest(
        demand=resolution.demand, api_version=resolution.api_version,
        kind=resolution.kind)).chosen


def http_get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, ""


async def test_placement_gang_mirror_delete_and_pending(controller: ControllerProcess,
                                                        clusters: Clusters) -> None:
    c = clusters
    controller.start()
    base = f"http://127.0.0.1:{controller.port}"

    async def ready() -> bool:
        try:
            status, _ = await asyncio.to_thread(http_get, f"{base}/readyz")
        except OSError:
            return False
        return status == 200

    await eventually(ready, what="/readyz")

    # 1. The member with the most free GPUs.
    first = jobset("train", replicas=2, gpus=4)
    expected = expected_member(first, await member_snapshots(c))
    await c.create(first)
    copies = await eventually(lambda: c.copies("train"), what="the JobSet on a member")
    assert list(copies) == [expected]

    # 2. A 16-GPU gang of 8-GPU pods fits only where two untainted 8-GPU nodes exist.
    gang = jobset("gang16", replicas=2, gpus=8)
    only = [s.name for s in await member_snapshots(c)
            if engine.decide([s], PlacementRequest(
                demand=Catalog.builtin().resolve(gang).demand)).chosen]
    assert len(only) == 1
    await c.create(gang)
    copies = await eventually(lambda: c.copies("gang16"), what="the gang on a member")
    assert list(copies) == only

    # 3. Member status shows on the hub within 2 s.
    (member, _), = (await c.copies("train")).items()
    status = {"replicatedJobsStatus": [{"name": "worker", "ready": 2, "active": 2,
                                        "succeeded": 0, "failed": 0, "suspended": 0}]}
    await c.members[member].request("PATCH", JOBSETS.item("train", c.namespace, "status"),
                                    body={"status": status}, content_type=JSON_MERGE_PATCH)

    async def mirrored() -> bool:
        hub_obj = await c.hub.request("GET", JOBSETS.item("train", c.namespace))
        return bool(hub_obj.get("status", {}).get("replicatedJobsStatus")
                    == status["replicatedJobsStatus"])

    await eventually(mirrored, what="the member status on the hub", within=2.0)

    # 4. Deleting on the hub removes the copy.
    await c.hub.request("DELETE", JOBSETS.item("gang16", c.namespace))

    async def deleted() -> bool:
        return not await c.copies("gang16")

    await eventually(deleted, what="the copy deleted")

    # 5. Pending with a reason, then dispatched once a node with room is added.
    await c.create(jobset("xl", replicas=1, gpus=32))

    async def pending_reason() -> str:
        record = await c.record("xl")
        conditions = (record or {}).get("status", {}).get("conditions", [])
        return next((x["message"] for x in conditions
                     if x["type"] == "Placed" and x["status"] == "False"), "")

    reason = await eventually(pending_reason, what="Pending with a reason")
    assert all(m in reason for m in MEMBERS)
    assert not await c.copies("xl")
    node = f"xl-{uuid.uuid4().hex[:6]}"
    gpus = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "32"}
    await c.members["member-2"].request("POST", NODES.collection(), body={
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
        "status": {"capacity": gpus, "allocatable": gpus, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e"}]}})
    try:
        copies = await eventually(lambda: c.copies("xl"), what="dispatch after a node")
        assert list(copies) == ["member-2"]
    finally:
        await c.members["member-2"].request("DELETE", NODES.item(node))

    status_code, metrics = await asyncio.to_thread(http_get, f"{base}/metrics")
    assert status_code == 200
    assert "dispatcher_dispatch_latency_seconds_count" in metrics
    assert (await asyncio.to_thread(http_get, f"{base}/healthz"))[0] == 200


async def our_copies(c: Clusters, hub_id: str) -> list[tuple[str, str]]:
    """(member, name) of every copy stamped by ``hub_id`` in the test namespace."""
    found = []
    for member, client in c.members.items():
        listed = await watch.list_objects(client, JOBSETS, namespace=c.namespace,
                                          label_selector=f"{ORIGIN_LABEL}={hub_id}")
        found += [(member, o["metadata"]["name"]) for o in listed.objects]
    return found


async def test_kill9_during_a_burst_of_100_loses_and_duplicates_nothing(
        controller: ControllerProcess, clusters: Clusters) -> None:
    c = clusters
    controller.start()
    names = [f"burst-{i:03d}" for i in range(100)]
    creating = asyncio.gather(*(c.create(jobset(n, replicas=1, gpus=0)) for n in names))

    async def some_copies() -> bool:
        return len(await our_copies(c, controller.hub_id)) >= 10

    await eventually(some_copies, what="the first copies")
    controller.kill9()
    await creating
    partial = len(await our_copies(c, controller.hub_id))
    controller.start()

    async def all_copies() -> list[tuple[str, str]] | None:
        found = await our_copies(c, controller.hub_id)
        return found if len({n for _, n in found}) == len(names) else None

    found = await eventually(all_copies, what="100 copies after the restart", within=90)
    await asyncio.sleep(1.0)  # anything late would show up now
    found = await our_copies(c, controller.hub_id)
    assert sorted(n for _, n in found) == names, f"{partial} before the restart"
    for name in names[:10]:
        record = await c.record(name)
        assert record is not None
        assert record["status"]["decision"]["cluster"] == next(m for m, n in found if n == name)


async def test_member_outage_unknown_failover_and_no_duplicate(
        dev_fleet: FleetState, controller: ControllerProcess, clusters: Clusters) -> None:
    c = clusters
    controller.start()
    await c.create(jobset("survivor", replicas=1, gpus=0))
    copies = await eventually(lambda: c.copies("survivor"), what="the first copy")
    (lost, _), = copies.items()
    other = next(m for m in MEMBERS if m != lost)
    planes = ControlPlanes(root=Path(dev_fleet.root), binaries=ensure_binaries())
    await asyncio.to_thread(planes.stop_cluster, lost)
    try:
        async def unknown() -> dict[str, Any] | None:
            # the record as it was while Unknown: a second read may already see the failover
            record = await c.record("survivor")
            return record if record and record.get("status", {}).get(
                "phase") == "Unknown" else None

        record = await eventually(unknown, what="phase Unknown", within=30)
        assert record is not None and record["status"]["remote"]["lastSeen"]

        async def moved() -> bool:
            record = await c.record("survivor")
            cluster = (record or {}).get("status", {}).get("decision", {}).get("cluster")
            return cluster == other and "survivor" in [
                n for m, n in await our_copies_reachable(c, controller.hub_id, other)]

        await eventually(moved, what=f"failover to {other}", within=30)
    finally:
        await asyncio.to_thread(planes.start_cluster, lost)

    async def single() -> bool:
        found = await our_copies(c, controller.hub_id)
        return [m for m, n in found if n == "survivor"] == [other]

    await eventually(single, what="the stale copy removed", within=60)
    record = await c.record("survivor")
    assert record is not None
    assert lost in record["status"]["excluded"]
    assert json.dumps(record["status"]["attempts"])


async def our_copies_reachable(c: Clusters, hub_id: str, member: str
                               ) -> list[tuple[str, str]]:
    listed = await watch.list_objects(c.members[member], JOBSETS, namespace=c.namespace,
                                      label_selector=f"{ORIGIN_LABEL}={hub_id}")
    return [(member, o["metadata"]["name"]) for o in listed.objects]


async def test_a_hub_definition_applied_with_kubectl_dispatches_a_new_kind(
        dev_fleet: FleetState, controller: ControllerProcess, clusters: Clusters) -> None:
    """``dispatcher run`` running; ``kubectl apply -f`` a Karta for a kind the catalog
    lacks (with its stand-in CRD): an object of that kind dispatches within seconds, no
    restart, ``kubectl get kartas`` shows ACCEPTED; a broken one is Accepted=False."""
    import subprocess

    from dispatcher.devfleet.provision import CRD_PATH
    from dispatcher.devfleet.workload_crds import crd_manifest
    from dispatcher.kube.errors import Conflict

    c = clusters
    group = f"e2e{uuid.uuid4().hex[:6]}.dispatcher.test"
    ref = ResourceRef(group=group, version="v1", kind="E2EJob", plural="e2ejobs",
                      namespaced=True)
    crd = crd_manifest(group=group, version="v1", kind="E2EJob", plural="e2ejobs")
    for client in (c.hub, *c.members.values()):
        with contextlib.suppress(Conflict):
            await client.request("POST", CRD_PATH, body=crd)
    controller.start()

    def kubectl(*args: str, stdin: str | None = None) -> str:
        done = subprocess.run([str(ensure_binaries().kubectl), "--kubeconfig",
                               dev_fleet.cluster("hub").kubeconfig, *args], input=stdin,
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout

    text = (Path(__file__).resolve().parents[2] / "definitions" / "jobset.yaml").read_text()
    good = text.replace("name: jobset\n", "name: e2ejob\n", 1).replace(
        "{group: jobset.x-k8s.io, version: v1alpha2, kind: JobSet}",
        f"{{group: {group}, version: v1, kind: E2EJob}}")
    broken = good.replace("name: e2ejob\n", "name: e2ejob-broken\n", 1).replace(
        "kind: E2EJob}", "kind: E2EBroken}", 1).replace(
        ".status.conditions", ".status.conditions | input", 1)
    try:
        kubectl("apply", "-f", "-", stdin=good)
        body = jobset("late", replicas=1, gpus=1)
        body["apiVersion"], body["kind"] = f"{group}/v1", "E2EJob"
        await eventually(lambda: c.hub.request("POST", ref.collection(c.namespace),
                                               body=body), what="the E2EJob created")

        async def landed() -> list[str]:
            found = []
            for member, client in c.members.items():
                with contextlib.suppress(NotFound):
                    await client.request("GET", ref.item("late", c.namespace))
                    found.append(member)
            return found
        assert len(await eventually(landed, what="the E2EJob on a member")) == 1

        async def table() -> str:
            out = await asyncio.to_thread(kubectl, "get", "kartas")
            rows = [line.split() for line in out.splitlines() if "e2ejob" in line]
            return out if rows and rows[0][1:3] == ["E2EJob", "True"] else ""
        await eventually(table, what="kubectl get kartas: e2ejob ACCEPTED")

        kubectl("apply", "-f", "-", stdin=broken)

        async def rejected() -> str:
            out = await asyncio.to_thread(kubectl, "get", "kartas", "e2ejob-broken", "-o",
                                          "jsonpath={.status.conditions[0].status} "
                                          "{.status.conditions[0].message}")
            return out if out.startswith("False ") else ""
        message = await eventually(rejected, what="the broken definition Accepted=False")
        assert "input" in message
    finally:
        await asyncio.to_thread(subprocess.run, [
            str(ensure_binaries().kubectl), "--kubeconfig",
            dev_fleet.cluster("hub").kubeconfig, "delete", "kartas/e2ejob",
            "kartas/e2ejob-broken", "--ignore-not-found"], capture_output=True, check=False)
