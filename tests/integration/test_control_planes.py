"""The local control planes are real Kubernetes: nodes, CRDs, watches, status, errors.

Covers: GPU Nodes listed with allocatable GPUs; a CRD established and a custom object
round-tripping through create, watch event and a status-subresource patch; discovery of
served and unserved kinds; the error mapping for 404, 401, TLS and a closed port; 410 Gone
on a compacted resourceVersion; an apiserver stopped and started again with its data.
Not covered here: capacity, placement, the controller (their own suites).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.binaries import ensure_binaries
from dispatcher.devfleet.controlplane import ControlPlanes, FleetState, compact_etcd
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.kube import errors, resources, watch
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient

Connect = Callable[[str], Coroutine[Any, Any, KubeClient]]

pytestmark = pytest.mark.integration


async def test_member_lists_gpu_nodes_with_allocatable_gpus(
        connect: Connect, fleet_spec: FleetSpec) -> None:
    """Nodes created from the fleet file come back with their GPU capacity and product."""
    member = await connect("member-2")
    listed = await watch.list_objects(member, resources.NODES)
    gpus = {n["metadata"]["name"]: int(n["status"]["allocatable"]["nvidia.com/gpu"])
            for n in listed.objects}
    expected = {f"member-2-{pool.name}-{i}": pool.gpus
                for pool in fleet_spec.member("member-2").node_pools for i in range(pool.count)}
    assert gpus == expected
    tainted = next(n for n in listed.objects if n["metadata"]["name"] == "member-2-tainted-0")
    assert tainted["spec"]["taints"] == [
        {"key": "dedicated", "value": "research", "effect": "NoSchedule"}]
    ready = {c["type"]: c["status"] for c in tainted["status"]["conditions"]}
    assert ready["Ready"] == "True"


async def test_custom_object_round_trips_create_watch_and_status(connect: Connect) -> None:
    """A Dispatch is created, seen by a watch, and its status subresource patched."""
    hub = await connect("hub")
    ref = await hub.discovery.resource("dispatcher.io/v1alpha1", "Dispatch")
    assert ref == resources.DISPATCHES
    namespace = f"t-{uuid.uuid4().hex[:8]}"
    await hub.request("POST", resources.NAMESPACES.collection(),
                      body={"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": namespace}})
    start = await watch.list_objects(hub, ref, namespace=namespace)
    assert start.objects == []
    events: list[watch.Changed] = []

    async def observe() -> None:
        async for item in watch.watch_from(hub, ref, resource_version=start.resource_version,
                                           namespace=namespace, timeout_seconds=30):
            if isinstance(item, watch.Changed):
                events.append(item)
                if len(events) == 2:
                    return

    watcher = asyncio.create_task(observe())
    body = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "Dispatch",
            "metadata": {"name": "train"},
            "spec": {"workload": {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                                  "name": "train", "uid": "u-1"}}}
    created = await hub.request("POST", ref.collection(namespace), body=body)
    assert created["spec"]["workload"]["kind"] == "JobSet"
    patched = await hub.request(
        "PATCH", ref.item("train", namespace, "status"), content_type=JSON_MERGE_PATCH,
        body={"status": {"phase": "Placed", "decision": {"cluster": "member-1", "attempt": 1}}})
    assert patched["status"]["decision"]["cluster"] == "member-1"
    await asyncio.wait_for(watcher, timeout=20)
    assert [e.type for e in events] == ["ADDED", "MODIFIED"]
    assert events[1].object["status"]["phase"] == "Placed"
    # The main resource ignores status: a spec-level patch cannot change it.
    await hub.request("PATCH", ref.item("train", namespace), content_type=JSON_MERGE_PATCH,
                      body={"status": {"phase": "Bogus"}})
    fetched = await hub.request("GET", ref.item("train", namespace))
    assert fetched["status"]["phase"] == "Placed"


async def test_the_first_decision_made_at_create_cannot_be_rewritten(connect: Connect) -> None:
    """``spec.decision`` is the record a restarted controller trusts: the CRD keeps it as
    created (a CEL transition rule), whoever writes."""
    hub = await connect("hub")
    namespace = f"dec-{uuid.uuid4().hex[:8]}"
    await hub.request("POST", resources.NAMESPACES.collection(),
                      body={"apiVersion": "v1", "kind": "Namespace",
                            "metadata": {"name": namespace}})
    ref = resources.DISPATCHES
    body = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "Dispatch",
            "metadata": {"name": "train"},
            "spec": {"workload": {"apiVersion": "batch/v1", "kind": "Job", "name": "train",
                                  "uid": "u-1"},
                     "decision": {"cluster": "member-1", "attempt": 1, "summary": "fits",
                                  "reservation": {"workloadUID": "u-1", "member": "member-1",
                                                  "expiresAt": 1.0,
                                                  "nodes": [{"node": "n1", "gpus": 8}]}},
                     "demand": {"pods": 1, "gpus": 8, "gangs": []}, "definition": "batch-job"}}
    created = await hub.request("POST", ref.collection(namespace), body=body)
    assert created["spec"]["decision"]["reservation"]["nodes"] == [{"node": "n1", "gpus": 8}]
    with pytest.raises(errors.KubeError) as refused:
        await hub.request("PATCH", ref.item("train", namespace), content_type=JSON_MERGE_PATCH,
                          body={"spec": {"decision": {"cluster": "member-2"}}})
    assert refused.value.status == 422 and "immutable" in str(refused.value)
    fetched = await hub.request("GET", ref.item("train", namespace))
    assert fetched["spec"]["decision"]["cluster"] == "member-1"


async def test_crds_are_established_and_kinds_discovered(connect: Connect) -> None:
    """Workload CRDs are served on members; an unknown kind is None, not a guess."""
    member = await connect("member-1")
    jobset = await member.discovery.resource("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert jobset is not None
    assert (jobset.plural, jobset.namespaced) == ("jobsets", True)
    assert await member.discovery.resource("example.invalid/v1", "Nothing") is None
    crd = await member.request("GET", resources.CRDS.item("jobsets.jobset.x-k8s.io"))
    conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
    assert conditions["Established"] == "True"


async def test_http_errors_map_to_the_error_hierarchy(
        connect: Connect, dev_fleet: FleetState) -> None:
    """404 -> NotFound, 409 -> Conflict, bad token -> Unauthorized, wrong CA and closed port."""
    hub = await connect("hub")
    with pytest.raises(errors.NotFound):
        await hub.request("GET", resources.NODES.item("no-such-node"))
    with pytest.raises(errors.Conflict):
        await hub.request("POST", resources.NAMESPACES.collection(),
                          body={"apiVersion": "v1", "kind": "Namespace",
                                "metadata": {"name": "default"}})
    info = dev_fleet.cluster("hub")
    config: dict[str, Any] = _kubeconfig(server=info.server, token="not-the-token",
                                         ca=Path(info.ca_file).read_text())
    async with await KubeClient.from_kubeconfig(config, name="bad-token") as client:
        with pytest.raises(errors.Unauthorized) as caught:
            await client.request("GET", "/api/v1/nodes")
        assert "not-the-token" not in str(caught.value)
    other_ca = _self_signed_pem()
    async with await KubeClient.from_kubeconfig(
            _kubeconfig(server=info.server, token=info.token, ca=other_ca), name="bad-ca") as c:
        with pytest.raises(errors.Unreachable, match="TLS"):
            await c.request("GET", "/api/v1/nodes")
    from dispatcher.devfleet.controlplane import free_port

    async with await KubeClient.from_kubeconfig(
            _kubeconfig(server=f"https://127.0.0.1:{free_port()}", token="t", ca=other_ca),
            name="closed") as c:
        with pytest.raises(errors.Unreachable, match="cannot connect"):
            await c.request("GET", "/api/v1/nodes")


async def test_broken_kubeconfig_is_a_clear_error_without_secrets() -> None:
    """A kubeconfig without the named context fails with KubeconfigError, no token echoed."""
    from dispatcher.kube.client import KubeconfigError

    config = _kubeconfig(server="https://127.0.0.1:1", token="sekret-token-123", ca="x")
    with pytest.raises(KubeconfigError) as caught:
        await KubeClient.from_kubeconfig(config, name="m", context="missing")
    assert "sekret-token-123" not in str(caught.value)


async def test_informer_lists_then_streams_changes(connect: Connect) -> None:
    """The informer yields the full list first, then live changes."""
    member = await connect("member-1")
    stream = watch.informer(member, resources.NAMESPACES, timeout_seconds=30)
    first = await anext(stream)
    assert isinstance(first, watch.Listed)
    assert "default" in {o["metadata"]["name"] for o in first.objects}
    name = f"inf-{uuid.uuid4().hex[:8]}"
    await member.request("POST", resources.NAMESPACES.collection(),
                         body={"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": name}})

    async def next_added() -> dict[str, Any]:
        async for item in stream:
            if isinstance(item, watch.Changed) and item.object["metadata"]["name"] == name:
                return item.object
        raise AssertionError("stream ended")

    added = await asyncio.wait_for(next_added(), timeout=20)
    assert added["kind"] == "Namespace"
    await stream.aclose()


async def test_restart_and_compaction_make_old_versions_gone(tmp_path: Path) -> None:
    """A member apiserver stopped and started again keeps its data and address; after etcd
    compaction a watch from a version before the restart is 410 Gone (the watch cache no
    longer holds it), which is what informers must re-list on."""
    planes = ControlPlanes(root=tmp_path / "cp", binaries=ensure_binaries())
    state = await asyncio.to_thread(planes.up, names=["solo"])
    try:
        rest = state.cluster("solo").rest()
        kubeconfig = yaml.safe_load(Path(state.cluster("solo").kubeconfig).read_text())
        async with await KubeClient.from_kubeconfig(kubeconfig, name="solo") as client:
            old = (await watch.list_objects(client, resources.NAMESPACES)).resource_version
            await client.request("POST", resources.NAMESPACES.collection(),
                                 body={"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": "keep-me"}})
            await asyncio.to_thread(planes.stop_cluster, "solo")
            with pytest.raises(errors.Unreachable):
                await client.request("GET", "/readyz")
            compact_etcd(state)
            again = await asyncio.to_thread(planes.start_cluster, "solo")
            assert again.server == state.cluster("solo").server
            assert rest.get("/api/v1/namespaces/keep-me")["metadata"]["name"] == "keep-me"
            with pytest.raises(errors.Gone):
                async for _ in watch.watch_from(client, resources.NAMESPACES,
                                                resource_version=old, timeout_seconds=5):
                    pass
    finally:
        await asyncio.to_thread(planes.down)
    assert not (tmp_path / "cp").exists()


def _kubeconfig(*, server: str, token: str, ca: str) -> dict[str, Any]:
    import base64

    return {"apiVersion": "v1", "kind": "Config", "current-context": "c",
            "clusters": [{"name": "c", "cluster": {
                "server": server,
                "certificate-authority-data": base64.b64encode(ca.encode()).decode()}}],
            "users": [{"name": "u", "user": {"token": token}}],
            "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}


def _self_signed_pem() -> str:
    from dispatcher.kube import pki

    return pki.new_ca("someone-else").cert_pem.decode()
