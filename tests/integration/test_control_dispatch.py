"""The controller in-process against real apiservers: dispatch, mirror, delete, queue, sweep.

Covers, each against the dev fleet's hub and two members: a JobSet lands on the member
placement ranks first (most free GPUs) with the Dispatch written first and the copy
stamped, the Dispatch holding the finalizer and the hub object not written; member status
mirrored to the hub object; hub deletion is at once, then the copy goes and then the
Dispatch (its finalizer released); a workload re-created under a deleted one's name waits
for the old copy and is dispatched; a Dispatch deleted while its workload lives stays in
use; a foreign same-named object is a Conflict and is left alone; a workload that
no member could ever run stays Pending (Unplaceable) with the reason and is dispatched
when a node with room is added; the sweep deletes an orphan copy. Each test uses its own
namespace and the module its own hub id, so other suites sharing the fleet are never
touched. Left out here: member outages and restarts (tests/e2e, with the controller as a
separate process).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dispatcher.control.core.decide import Rules
from dispatcher.control.core.names import (
    FINALIZER,
    HUB_OBJECT_ANNOTATION,
    HUB_UID_ANNOTATION,
    ORIGIN_LABEL,
)
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.settings import FleetSettings, StaticMember
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import KubeError
from dispatcher.kube.resources import DISPATCHES, NAMESPACES, NODES, ResourceRef
from dispatcher.placement import engine
from dispatcher.placement.model import PlacementRequest
from dispatcher.workloads.catalog import Catalog
from tests.builders import jobset
from tests.integration.harness import Harness, eventually, get_or_none, running

pytestmark = pytest.mark.integration

JOBSETS = ResourceRef(group="jobset.x-k8s.io", version="v1alpha2", kind="JobSet",
                      plural="jobsets", namespaced=True)


@pytest.fixture(scope="module")
async def harness(dev_fleet: FleetState) -> AsyncIterator[Harness]:
    """The module's controller (default rules)."""
    async with running(dev_fleet) as h:
        yield h


async def copies_of(h: Harness, name: str) -> dict[str, dict[str, Any]]:
    found = {}
    for member, client in h.members.items():
        obj = await get_or_none(client, JOBSETS.item(name, h.namespace))
        if obj is not None:
            found[member] = obj
    return found


async def test_jobset_lands_on_the_member_placement_ranks_first(harness: Harness) -> None:
    h = harness
    body = jobset("train", namespace=h.namespace, replicas=2, gpus=4)
    resolution = h.controller.reconciler.catalog.resolve(body)
    expected = engine.decide(h.controller.fleet.snapshots(), PlacementRequest(
        demand=resolution.demand, api_version=resolution.api_version, kind="JobSet")).chosen
    assert expected is not None
    created = await h.hub.request("POST", JOBSETS.collection(h.namespace), body=body)
    uid = created["metadata"]["uid"]

    async def landed() -> dict[str, dict[str, Any]]:
        return await copies_of(h, "train")

    copies = await eventually(landed, what="the copy on a member")
    assert list(copies) == [expected]
    copy = copies[expected]
    assert copy["metadata"]["labels"][ORIGIN_LABEL] == h.controller.settings.hub_id
    assert copy["metadata"]["annotations"][HUB_UID_ANNOTATION] == uid
    assert copy["metadata"]["uid"] != uid
    assert "status" not in copy or not copy["status"]
    record = await h.hub.request("GET", DISPATCHES.item("jobset-train", h.namespace))
    assert record["spec"]["workload"]["uid"] == uid
    assert record["metadata"]["ownerReferences"][0]["uid"] == uid
    assert record["status"]["decision"]["cluster"] == expected
    assert record["status"]["demand"]["gpus"] == 8
    assert record["metadata"]["finalizers"] == [FINALIZER]
    hub_obj = await h.hub.request("GET", JOBSETS.item("train", h.namespace))
    assert FINALIZER not in (hub_obj["metadata"].get("finalizers") or ())  # never written
    assert hub_obj["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_member_status_is_mirrored_to_the_hub(harness: Harness) -> None:
    h = harness
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("mirror", namespace=h.namespace, replicas=1, gpus=1))
    copies = await eventually(lambda: copies_of(h, "mirror"), what="the copy")
    (member, _), = copies.items()
    status = {"conditions": [], "replicatedJobsStatus": [
        {"name": "worker", "ready": 1, "active": 1, "succeeded": 0, "failed": 0,
         "suspended": 0}], "terminalState": ""}
    await h.members[member].request(
        "PATCH", JOBSETS.item("mirror", h.namespace, "status"), body={"status": status},
        content_type=JSON_MERGE_PATCH)

    async def mirrored() -> bool:
        hub_obj = await h.hub.request("GET", JOBSETS.item("mirror", h.namespace))
        return bool(hub_obj.get("status", {}).get("replicatedJobsStatus") ==
                    status["replicatedJobsStatus"])

    await eventually(mirrored, what="the hub status")

    async def running() -> Any:
        record = await h.hub.request("GET", DISPATCHES.item("jobset-mirror", h.namespace))
        return record if record["status"].get("genericStatus") == "running" else None

    record = await eventually(running, what="genericStatus running on the Dispatch")
    assert record["status"]["remote"]["cluster"] == member
    assert record["status"]["phase"] == "Running"
    # The status word alone releases nothing: no pod of this copy is bound (no operator
    # runs it here), so its GPU stays reserved, in memory and on the record.
    assert record["status"]["decision"].get("reservation"), record["status"]
    held = h.controller.fleet.reservations(member)
    assert held is not None and record["spec"]["workload"]["uid"] in held


async def test_hub_spec_change_is_written_to_the_copy(harness: Harness) -> None:
    h = harness
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("edited", namespace=h.namespace, replicas=1, gpus=1))
    (member, before), = (await eventually(lambda: copies_of(h, "edited"),
                                          what="the copy")).items()
    await h.hub.request("PATCH", JOBSETS.item("edited", h.namespace),
                        body={"spec": {"suspend": True}}, content_type=JSON_MERGE_PATCH)

    async def updated() -> Any:
        copy = (await copies_of(h, "edited")).get(member)
        return copy if copy and copy["spec"].get("suspend") is True else None

    after = await eventually(updated, what="the spec change on the copy")
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["spec"]["replicatedJobs"] == before["spec"]["replicatedJobs"]


async def test_deleting_on_the_hub_deletes_the_copy_then_the_record(
        harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    h = harness
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("gone", namespace=h.namespace, replicas=1, gpus=1))
    (member, _), = (await eventually(lambda: copies_of(h, "gone"), what="the copy")).items()
    path = JOBSETS.item("gone", h.namespace)
    record_path = DISPATCHES.item("jobset-gone", h.namespace)
    # Every client's writes of these objects, in the order they happened: a DELETE once
    # answered, a PATCH of the Dispatch that drops our finalizer once sent.
    writes: list[str] = []
    send = KubeClient.request

    async def recording(client: KubeClient, method: str, target: str, **kwargs: Any) -> Any:
        body = kwargs.get("body")
        finalizers = (body.get("metadata") or {}).get("finalizers") \
            if isinstance(body, dict) else None
        if (client.name, method, target) == ("hub", "PATCH", record_path) \
                and finalizers is not None and FINALIZER not in finalizers:
            writes.append("hub: record finalizer removal")
        answer = await send(client, method, target, **kwargs)
        if method == "DELETE" and target in (path, record_path):
            writes.append(f"{client.name}: deleted {target.rsplit('/', 2)[-2]}")
        return answer

    monkeypatch.setattr(KubeClient, "request", recording)
    await h.hub.request("DELETE", path)
    assert await get_or_none(h.hub, path) is None  # nothing holds the hub object

    async def all_gone() -> bool:
        return await get_or_none(h.hub, record_path) is None \
            and not await copies_of(h, "gone")

    await eventually(all_gone, what="copy and Dispatch deleted")
    assert writes[:2] == ["hub: deleted jobsets", f"{member}: deleted jobsets"], writes
    # The Dispatch is deleted by the hub's garbage collector or by us, then released.
    assert writes[-1] == "hub: record finalizer removal", writes
    assert set(writes[2:-1]) <= {"hub: deleted dispatches"}, writes


async def test_a_namesake_created_right_after_a_delete_waits_for_the_old_copy(
        harness: Harness) -> None:
    h = harness
    path = JOBSETS.item("again", h.namespace)
    first = await h.hub.request("POST", JOBSETS.collection(h.namespace),
                                body=jobset("again", namespace=h.namespace, replicas=1, gpus=1))
    await eventually(lambda: copies_of(h, "again"), what="the first copy")
    await h.hub.request("DELETE", path)
    second = await h.hub.request("POST", JOBSETS.collection(h.namespace),
                                 body=jobset("again", namespace=h.namespace, replicas=1, gpus=1))
    uid = second["metadata"]["uid"]
    assert uid != first["metadata"]["uid"]

    async def landed() -> Any:
        copies = await copies_of(h, "again")
        found = [c for c in copies.values()
                 if c["metadata"]["annotations"].get(HUB_UID_ANNOTATION) == uid]
        return found[0] if len(copies) == 1 and found else None

    await eventually(landed, what="the second workload's copy, and only it")

    async def submitted() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item("jobset-again", h.namespace))
        ok = record is not None and record["spec"]["workload"]["uid"] == uid \
            and (record.get("status") or {}).get("phase") not in (None, "", "Placed")
        return record if ok else None

    record = await eventually(submitted, what="the second workload's Dispatch, submitted")
    assert record["status"]["phase"] != "Conflict"


async def test_a_dispatch_deleted_while_its_workload_lives_stays_in_use(
        harness: Harness) -> None:
    h = harness
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("kept", namespace=h.namespace, replicas=1, gpus=1))
    copies = await eventually(lambda: copies_of(h, "kept"), what="the copy")
    record_path = DISPATCHES.item("jobset-kept", h.namespace)
    await h.hub.request("DELETE", record_path)

    async def terminating() -> Any:
        record = await get_or_none(h.hub, record_path)
        return record if record and record["metadata"].get("deletionTimestamp") else None

    record = await eventually(terminating, what="the Dispatch marked for deletion")
    assert record["metadata"]["finalizers"] == [FINALIZER]
    assert list(await copies_of(h, "kept")) == list(copies)  # the copy is left running
    await h.hub.request("DELETE", JOBSETS.item("kept", h.namespace))

    async def all_gone() -> bool:
        return await get_or_none(h.hub, record_path) is None \
            and not await copies_of(h, "kept")

    await eventually(all_gone, what="the copy and the Dispatch gone with the workload")


async def test_foreign_object_is_a_conflict_and_left_alone(harness: Harness) -> None:
    h = harness
    client = h.members["member-1"]
    await client.request("POST", NAMESPACES.collection(), body={
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": h.namespace}}) \
        if await get_or_none(client, NAMESPACES.item(h.namespace)) is None else None
    foreign = jobset("taken", namespace=h.namespace, replicas=1, gpus=1)
    foreign["metadata"]["labels"] = {"team": "someone-else"}
    before = await client.request("POST", JOBSETS.collection(h.namespace), body=foreign)
    await h.hub.request("POST", JOBSETS.collection(h.namespace), body=jobset(
        "taken", namespace=h.namespace, replicas=1, gpus=1,
        annotations={"dispatcher.io/cluster": "member-1"}))

    async def conflict() -> bool:
        record = await get_or_none(h.hub, DISPATCHES.item("jobset-taken", h.namespace))
        return bool(record and record.get("status", {}).get("phase") == "Conflict")

    await eventually(conflict, what="phase Conflict")
    after = await client.request("GET", JOBSETS.item("taken", h.namespace))
    assert after["metadata"]["uid"] == before["metadata"]["uid"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


async def test_unschedulable_waits_pending_then_dispatches_when_a_node_fits(
        harness: Harness) -> None:
    h = harness
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("huge", namespace=h.namespace, replicas=1, gpus=16))

    async def pending() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item("jobset-huge", h.namespace))
        conditions = (record or {}).get("status", {}).get("conditions", [])
        # no node has 16 GPUs: never placeable as the fleet is, re-checked when it changes
        # (waited for by name: a first pass may say something else, e.g. Queued)
        return next((c for c in conditions if c["type"] == "Placed"
                     and c["status"] == "False" and c["reason"] == "Unplaceable"), None)

    condition = await eventually(pending, what="Pending, Unplaceable")
    assert condition["reason"] == "Unplaceable"
    assert "member-1" in condition["message"] and "member-2" in condition["message"]
    assert not await copies_of(h, "huge")
    node_name = f"big-{uuid.uuid4().hex[:6]}"
    gpus = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "16"}
    await h.members["member-1"].request("POST", NODES.collection(), body={
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": node_name, "labels": {"kubernetes.io/hostname": node_name}},
        "status": {"capacity": gpus, "allocatable": gpus, "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}]}})
    try:
        copies = await eventually(lambda: copies_of(h, "huge"), what="dispatch after node")
        assert list(copies) == ["member-1"]
    finally:
        await h.members["member-1"].request("DELETE", NODES.item(node_name))


async def test_sweep_deletes_an_orphan_copy_only(harness: Harness) -> None:
    h = harness
    client = h.members["member-2"]
    if await get_or_none(client, NAMESPACES.item(h.namespace)) is None:
        await client.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": h.namespace}})
    orphan = jobset("orphan", namespace=h.namespace, replicas=1, gpus=1)
    orphan["metadata"]["labels"] = {ORIGIN_LABEL: h.controller.settings.hub_id}
    orphan["metadata"]["annotations"] = {HUB_UID_ANNOTATION: str(uuid.uuid4()),
                                         HUB_OBJECT_ANNOTATION: "JobSet.jobset.x-k8s.io/orphan"}
    await client.request("POST", JOBSETS.collection(h.namespace), body=orphan)
    other = jobset("not-ours", namespace=h.namespace, replicas=1, gpus=1)
    other["metadata"]["labels"] = {ORIGIN_LABEL: "another-hub"}
    other["metadata"]["annotations"] = {HUB_UID_ANNOTATION: str(uuid.uuid4())}
    await client.request("POST", JOBSETS.collection(h.namespace), body=other)

    async def seen() -> bool:
        return any(obj.obj["metadata"]["name"] == "orphan"
                   for _, obj in h.controller.copies.items("member-2"))

    await eventually(seen, what="the orphan in the copy cache")
    assert await h.controller.sweep() >= 1
    assert await get_or_none(client, JOBSETS.item("orphan", h.namespace)) is None
    assert await get_or_none(client, JOBSETS.item("not-ours", h.namespace)) is not None


async def test_live_view_counts_in_flight_reservations(harness: Harness,
                                                      dev_fleet: FleetState) -> None:
    """``dispatcher explain`` live: the controller's members, reservations from Dispatches."""
    from dispatcher.config import Config
    from dispatcher.shell import live

    h = harness
    statics = tuple(StaticMember(name=n, kubeconfig=dev_fleet.cluster(n).kubeconfig)
                    for n in h.members)
    config = Config(source="test", hub_kubeconfig=dev_fleet.cluster("hub").kubeconfig,
                    fleet=FleetSettings(static_members=statics, watch_member_clusters=False))
    catalog = h.controller.reconciler.catalog
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("explained", namespace=h.namespace, replicas=1, gpus=2))

    async def placed() -> Any:
        record = await get_or_none(h.hub, DISPATCHES.item("jobset-explained", h.namespace))
        return ((record or {}).get("status") or {}).get("decision", {}).get("reservation")

    reservation = await eventually(placed, what="the reservation on the Dispatch")
    obj = await live.hub_workload(h.hub, catalog, namespace=h.namespace, ref="JobSet/explained")
    member = reservation["member"]
    held = sum(n["gpus"] for n in reservation["nodes"])

    async def counted() -> bool:
        # other tests' reservations may expire between the two reads: read again then
        with_it = {m.name: m.capacity.free for m in await live.live_snapshots(
            config, hub=h.hub, catalog=catalog)}
        without = {m.name: m.capacity.free for m in await live.live_snapshots(
            config, hub=h.hub, catalog=catalog, exclude_uid=obj["metadata"]["uid"])}
        return without[member] - with_it[member] == held

    await eventually(counted, what=f"the {held} reserved GPUs counted on {member}")

    # the controller's own snapshot builder: an allow-list in the config reaches explain
    fenced = replace(config, fleet=replace(config.fleet, static_members=tuple(
        replace(m, allowed_namespaces=("elsewhere",)) if m.name == member else m
        for m in statics)))
    snapshots = {m.name: m for m in await live.live_snapshots(fenced, hub=h.hub,
                                                               catalog=catalog)}
    assert snapshots[member].allowed_namespaces == ("elsewhere",)
    from dispatcher.commands.explain import explain_demand
    decision = explain_demand(catalog.resolve(obj).demand, members=list(snapshots.values()),
                              api_version=obj["apiVersion"], kind=obj["kind"],
                              namespace=h.namespace)
    assert f"namespace {h.namespace} not allowed" in decision.verdict(member).reason


async def test_stuck_copy_moves_then_fails_after_bounded_attempts(dev_fleet: FleetState) -> None:
    """Never started: re-dispatched elsewhere (old copy deleted), then Failed with reason."""
    async with running(dev_fleet, rules=Rules(stuck_after=1.0, max_attempts=2)) as h:
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("stuck", namespace=h.namespace, replicas=1, gpus=1))

        async def failed() -> Any:
            record = await get_or_none(h.hub, DISPATCHES.item("jobset-stuck", h.namespace))
            status = (record or {}).get("status") or {}
            return status if status.get("phase") == "Failed" else None

        status = await eventually(failed, what="Failed after 2 attempts")
        assert "gave up after 2 attempt(s)" in status["failure"]
        assert [a["outcome"] for a in status["attempts"]] == ["requeued", "gave-up"]
        assert len({a["cluster"] for a in status["attempts"]}) == 2
        assert sorted(status["excluded"]) == sorted(h.members)
        assert not await copies_of(h, "stuck")


async def test_a_kind_whose_crd_appears_later_is_dispatched_without_restart(
        dev_fleet: FleetState) -> None:
    """A definition for a kind no cluster serves yet; its CRD is installed while running."""
    from dispatcher.devfleet.provision import CRD_PATH
    from dispatcher.devfleet.workload_crds import crd_manifest
    from dispatcher.workloads.definitions import load_text

    group = f"late{uuid.uuid4().hex[:6]}.dispatcher.test"
    text = (Path(__file__).resolve().parents[2] / "definitions" / "jobset.yaml").read_text()
    text = text.replace("name: jobset\n", "name: latejob\n", 1).replace(
        "{group: jobset.x-k8s.io, version: v1alpha2, kind: JobSet}",
        f"{{group: {group}, version: v1, kind: LateJob}}")
    catalog = Catalog.merged(Catalog.builtin(), Catalog(load_text(text, source="late.yaml")))
    late = ResourceRef(group=group, version="v1", kind="LateJob", plural="latejobs",
                       namespaced=True)
    crd = crd_manifest(group=group, version="v1", kind="LateJob", plural="latejobs")
    async with running(dev_fleet, catalog=catalog) as h:
        for client in (h.hub, *h.members.values()):
            await client.request("POST", CRD_PATH, body=crd)

        await eventually(lambda: _get_quietly(h.hub, late.collection(h.namespace)),
                         what="the new CRD served on the hub")
        body = jobset("late", namespace=h.namespace, replicas=1, gpus=1)
        body["apiVersion"] = f"{group}/v1"
        body["kind"] = "LateJob"
        created = await eventually(
            lambda: _create_quietly(h.hub, late.collection(h.namespace), body),
            what="the LateJob created")

        async def landed() -> list[str]:
            found = []
            for member, client in h.members.items():
                if await _get_quietly(client, late.item("late", h.namespace)) is not None:
                    found.append(member)
            return found

        assert len(await eventually(landed, what="the LateJob copied to a member")) == 1
        assert created["metadata"]["uid"]
        for client in (h.hub, *h.members.values()):
            await client.request("DELETE", f"{CRD_PATH}/latejobs.{group}")


async def _create_quietly(client: KubeClient, path: str, body: dict[str, Any]) -> Any:
    try:
        return await client.request("POST", path, body=body)
    except KubeError:
        return None


async def _get_quietly(client: KubeClient, path: str) -> Any:
    try:
        return await client.request("GET", path)
    except KubeError:
        return None


async def test_a_same_named_kind_of_another_group_never_takes_the_record(
        harness: Harness) -> None:
    """``jobset-<name>`` held by the record of a JobSet of another API group (a live
    workload the controller must not touch): the new workload's record is the qualified
    ``jobset.jobset.x-k8s.io-<name>``, the other record stays as it was."""
    h = harness
    other = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "Dispatch",
             "metadata": {"name": "jobset-twin", "namespace": h.namespace},
             "spec": {"workload": {"apiVersion": "example.io/v1", "kind": "JobSet",
                                   "name": "twin", "uid": "other-uid"}}}
    held = await h.hub.request("POST", DISPATCHES.collection(h.namespace), body=other)
    await h.hub.request("POST", JOBSETS.collection(h.namespace),
                        body=jobset("twin", namespace=h.namespace, replicas=1, gpus=1))

    async def landed() -> dict[str, dict[str, Any]] | None:
        return await copies_of(h, "twin") or None

    await eventually(landed, what="the JobSet's copy on a member")
    qualified = await h.hub.request(
        "GET", DISPATCHES.item("jobset.jobset.x-k8s.io-twin", h.namespace))
    assert qualified["spec"]["workload"]["kind"] == "JobSet"
    kept = await h.hub.request("GET", DISPATCHES.item("jobset-twin", h.namespace))
    assert kept["metadata"]["uid"] == held["metadata"]["uid"]
    assert kept["spec"]["workload"]["uid"] == "other-uid"
