"""``Reconciler.reconcile`` on plain data: real caches, queue, catalog and capacity models,
a stub fleet view and one injected fake per port (``fakes``: hub writes, member writes)
that records each write and keeps the caches as the real ones do (from the answers of the
API); the local effects (reservations, memory) are read where the reconciler keeps them.
No Kubernetes, no clock but a fixed one.

Covered: a new workload's whole first dispatch (the record created with its decision,
reservation and finalizer, wait for the copy watch, submit, adopt with the first decision
settled into status); a member's refusal (released at once, then requeued without that
member and placed on another, or failed when no one else could take it); a workload
nothing fits (record then Pending, once); a deleted workload (copy deleted, then the
record's finalizer released), also once it is gone from the hub (the hub asked first,
unless its record is being deleted) and while a namesake's record still waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from dispatcher.control import reconcile as reconcile_module
from dispatcher.control.caches import CopyCache, HubCache, MemberCopy
from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core import record as records
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.decide import MemberHealth
from dispatcher.control.core.hubhold import HoldScope
from dispatcher.control.core.queue import PendingQueue
from dispatcher.control.observe import Metrics
from dispatcher.control.reconcile import Reconciler
from dispatcher.control.settings import ControlSettings
from dispatcher.control.writer import Created, Sent
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.kube.patches import apply_merge
from dispatcher.kube.resources import GroupVersionKind, ResourceRef
from dispatcher.placement.model import MemberSnapshot
from dispatcher.workloads.catalog import Catalog
from tests.unit.control import placing_builders as pb
from tests.unit.control.fakes import Calls, FakeHub, FakeMembers
from tests.unit.placement.builders import cluster

NOW = pb.NOW
UID = "uid-train"
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)


class StubFleet:
    """The members as placement sees them (``FleetView``'s reads), all reachable."""

    def __init__(self, members: Sequence[MemberSnapshot]) -> None:
        self.members = list(members)
        self._reservations = {m.name: MemberReservations(member=m.name, capacity=m.capacity)
                              for m in self.members}

    def names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.members)

    def snapshots(self) -> Sequence[MemberSnapshot]:
        return self.members

    def snapshot(self, member: str) -> MemberSnapshot | None:
        return next((m for m in self.members if m.name == member), None)

    def reservations(self, member: str) -> MemberReservations | None:
        return self._reservations.get(member)

    def health(self, member: str) -> MemberHealth:
        return MemberHealth(reachable=True)


class World:
    """The two port fakes (``fakes``) answering into the caches, sharing their calls."""

    def __init__(self, hub: HubCache, copies: CopyCache, *,
                 refuse: Rejection | None = None) -> None:
        self.calls = Calls()
        self.hub = FakeHub(self.calls, cache=hub, ref=JOBS)
        self.members = FakeMembers(self.calls, copies=copies,
                                   create=refuse if refuse is not None else Sent.EXISTS)

    def names(self) -> list[str]:
        return self.calls.names()


def world(*, refuse: Rejection | None = None, fleet: Sequence[MemberSnapshot] | None = None,
          gpus: int = 4) -> tuple[Reconciler, World]:
    hub, copies = HubCache(), CopyCache()
    stub = StubFleet(pb.members() if fleet is None else fleet)
    writer = World(hub, copies, refuse=refuse)
    job = pb.job(gpus=gpus)
    job["metadata"]["resourceVersion"] = "1"
    hub.put(JOBS, job)
    reconciler = Reconciler(settings=ControlSettings(), live=LiveCatalog(Catalog.builtin()),
                            hub=None, fleet=stub, hub_cache=hub, copies=copies,
                            queue=PendingQueue(backfill_limit=2), metrics=Metrics.create(),
                            events=None, clock=lambda: NOW, monotonic=lambda: 0.0,
                            hub_writer=writer.hub, member_writer=writer.members)
    return reconciler, writer


def reconcile(reconciler: Reconciler) -> float | None:
    return asyncio.run(reconciler.reconcile(UID))


def list_copies(reconciler: Reconciler, member: str) -> None:
    """The member's copy watch listed (what lets ``decide`` tell absent from unknown)."""
    reconciler.copies.synced.add((member, GroupVersionKind.of("batch/v1", "Job")))


def test_a_first_dispatch_writes_the_decision_with_the_record_then_submits_and_adopts() -> None:
    reconciler, w = world()
    # The copy watch of the chosen member has not listed yet: wait after the record.
    assert reconcile(reconciler) == 5.0
    assert w.names() == ["create_record"]
    placed = w.calls[0][1]
    assert placed["decision"]["cluster"] == "a" and placed["decision"]["attempt"] == 1
    reservation = reconciler.fleet.reservations("a")
    assert reservation is not None and UID in reservation
    record = records.read(reconciler.cache.record(UID) or {})
    assert (record.cluster, record.phase) == ("a", "")
    w.calls.clear()
    list_copies(reconciler, "a")
    assert reconcile(reconciler) is None
    assert w.names() == ["create_copy", "patch_record", "event"]
    assert UID in reservation  # held through the submit (its pods have not bound)
    submitted = w.calls[1][1]
    assert submitted["phase"] == "Submitted" and submitted["remote"]["cluster"] == "a"
    assert submitted["decision"]["cluster"] == "a"  # settled from spec in the same write
    assert submitted["demand"]["gpus"] == 8
    assert records.read(reconciler.cache.record(UID) or {}).unsettled is None


def test_a_refused_copy_is_requeued_without_that_member_and_placed_again() -> None:
    refusal = Rejection.of("a", status=422, reason="Invalid", message="spec.x: bad")
    spare = MemberSnapshot(name="c", capacity=cluster({"name": "c0", "gpus": 8}))
    reconciler, w = world(refuse=refusal, fleet=[*pb.members(), spare])
    list_copies(reconciler, "a")
    # c's copy watch has not listed: the new decision waits for it.
    assert reconcile(reconciler) == 5.0
    assert w.names() == ["create_record", "create_copy", "patch_record", "event",
                         "patch_record"]
    requeued, placed = w.calls[2][1], w.calls[4][1]
    assert requeued["phase"] == "Pending" and requeued["excluded"] == ["a"]
    assert {c["type"]: c["reason"] for c in requeued["conditions"]}["Submitted"] == "Rejected"
    assert w.calls[3][1] == "Rejected"
    assert placed["phase"] == "Placed" and placed["decision"]["cluster"] == "c"
    assert placed["decision"]["attempt"] == 2
    assert reconciler.memory.refusal(UID) is None
    again = reconciler.fleet.reservations("c")
    assert again is not None and UID in again
    first = reconciler.fleet.reservations("a")
    assert first is not None and UID not in first


def test_a_refused_copy_fails_when_no_other_member_could_take_it() -> None:
    refusal = Rejection.of("a", status=403, reason="Forbidden", message="no")
    reconciler, w = world(refuse=refusal)  # b takes only team-b
    list_copies(reconciler, "a")
    assert reconcile(reconciler) is None
    assert w.names() == ["create_record", "create_copy", "patch_record", "event"]
    failed = w.calls[2][1]
    assert failed["phase"] == "Failed" and "no other member" in failed["failure"]


def test_a_requeued_workload_that_fits_nowhere_never_returns_to_its_first_member() -> None:
    """Pending after a requeue keeps the attempt in status.decision: the first decision in
    spec (member a) must not hold again (it would resubmit to the member that refused)."""
    refusal = Rejection.of("a", status=422, reason="Invalid", message="spec.x: bad")
    full = MemberSnapshot(name="c", capacity=cluster({"name": "c0", "gpus": 8, "used": 8}))
    reconciler, w = world(refuse=refusal, fleet=[*pb.members(), full])
    list_copies(reconciler, "a")
    assert reconcile(reconciler) is None
    assert w.names()[-4:] == ["patch_record", "event", "patch_record", "event"]
    assert w.calls[-4][1]["phase"] == "Pending" and w.calls[-2][1]["phase"] == "Pending"
    record = records.read(reconciler.cache.record(UID) or {})
    assert (record.cluster, record.reservation, record.attempt) == (None, None, 1)
    assert record.excluded == ("a",)
    w.calls.clear()
    reconcile(reconciler)
    assert "create_copy" not in w.names()


def test_a_workload_that_fits_nowhere_gets_its_record_and_pending_once() -> None:
    reconciler, w = world(gpus=64)
    reconcile(reconciler)
    assert w.names() == ["create_record", "patch_record", "event"]
    assert w.calls[0][1] is None  # no decision to carry
    w.calls.clear()
    reconcile(reconciler)
    assert w.names() == []  # the same reason: nothing written again


def test_a_deleted_workload_loses_its_copy_then_its_records_finalizer() -> None:
    reconciler, w = world()
    list_copies(reconciler, "a")
    reconcile(reconciler)
    item = reconciler.cache.workload(UID)
    assert item is not None
    reconciler.cache.put(JOBS, apply_merge(item.obj, {"metadata": {
        "deletionTimestamp": "2026-11-30T11:00:00Z", "resourceVersion": "99"}}))
    w.calls.clear()
    assert reconcile(reconciler) == 0.5
    assert w.names() == ["delete_copy"]
    w.calls.clear()
    assert reconcile(reconciler) is None
    assert w.names() == ["remove_finalizer"]
    assert reconciler.cache.record(UID) is None
    book = reconciler.fleet.reservations("a")
    assert book is not None and UID not in book  # forgotten


def dispatched_then_gone(*, record_deleting: bool = False) -> tuple[Reconciler, World]:
    """A workload dispatched to ``a`` whose hub object then left the cache (its watch said
    DELETED, or a label selector stopped matching it)."""
    reconciler, w = world()
    list_copies(reconciler, "a")
    reconcile(reconciler)
    assert reconciler.copies.get("a", UID) is not None
    reconciler.cache.drop(UID)
    if record_deleting:
        raw = reconciler.cache.record(UID)
        assert raw is not None
        reconciler.cache.put_record(apply_merge(raw, {"metadata": {
            "deletionTimestamp": "2026-11-30T11:00:00Z", "resourceVersion": "98"}}))
    w.calls.clear()
    return reconciler, w


def test_a_workload_gone_from_the_hub_loses_its_copy_then_its_record() -> None:
    reconciler, w = dispatched_then_gone()
    assert reconcile(reconciler) == 0.5
    assert w.names() == ["read_workload", "delete_copy"]
    w.calls.clear()
    assert reconcile(reconciler) is None
    assert w.names() == ["remove_finalizer"]
    assert reconciler.cache.record(UID) is None
    book = reconciler.fleet.reservations("a")
    assert book is not None and UID not in book  # forgotten


def test_on_a_shared_hub_a_workload_that_left_the_selector_loses_its_copy() -> None:
    """Issue 35: a label removed while the webhook was bypassed hides the object from the
    selector-filtered watch; read live and out of the scope, it is not held as far as the
    controller knows, so its copy goes (failover.policy if-not-started, not started), the
    Dispatch fails with the reason and an Event is written about the hub object."""
    reconciler, w = world()
    list_copies(reconciler, "a")
    reconcile(reconciler)  # dispatched (from here on, the hub is shared)
    assert reconciler.copies.get("a", UID) is not None
    reconciler.settings = replace(reconciler.settings, hub_mode="shared",
                                  label_selector="dispatch=yes")
    reconciler.scope = HoldScope.watching(namespaces=(), own="dispatcher-system",
                                          selector="dispatch=yes")
    hub_job = reconciler.cache.workload(UID)
    assert hub_job is not None
    reconciler.cache.drop(UID)
    w.calls.clear()
    w.hub.gone, w.hub.found = False, {**hub_job.obj, "metadata": {
        **hub_job.obj["metadata"], "labels": {"dispatch": "no"}}}
    reconcile(reconciler)
    assert w.names()[:3] == ["read_workload", "delete_copy", "patch_record"], w.names()
    record = records.read(reconciler.cache.record(UID) or {})
    assert record.failure and "left the watched scope" in record.failure
    events = [c for c in w.calls if c[0] == "event"]
    assert events == [("event", "Failed")], events


def test_an_uncached_workload_the_hub_still_has_keeps_its_copy() -> None:
    """A watch's label selector no longer matching is not a deletion: nothing is written."""
    reconciler, w = dispatched_then_gone()
    w.hub.gone = False
    assert reconcile(reconciler) is None
    assert w.names() == ["read_workload"]  # forgotten here, not deleted there
    book = reconciler.fleet.reservations("a")
    assert book is not None and UID not in book
    assert reconciler.copies.get("a", UID) is not None
    assert reconciler.cache.record(UID) is not None


def test_a_record_being_deleted_says_its_workload_is_gone_without_a_read() -> None:
    reconciler, w = dispatched_then_gone(record_deleting=True)
    w.hub.gone = False  # would keep the copy, if it were asked
    assert reconcile(reconciler) == 0.5
    assert w.names() == ["delete_copy"]


def test_a_new_workload_waits_while_a_deleted_namesakes_record_holds_the_name() -> None:
    reconciler, w = world()
    w.hub.created = Created.BLOCKED
    list_copies(reconciler, "a")
    assert reconcile(reconciler) == 1.0
    assert w.names() == ["create_record"]
    held = reconciler.fleet.reservations("a")
    assert held is not None and UID not in held
    w.hub.created = Created.CREATED
    w.calls.clear()
    reconcile(reconciler)
    assert w.names()[:2] == ["create_record", "create_copy"]


def test_a_settled_workload_is_not_decided_again_until_an_input_changes(
        monkeypatch: Any) -> None:
    """In sync (NOTHING, no recheck): a wake-up with the same cache objects answers at once;
    a new copy object (its status moved) is decided on."""
    reconciler, w = world()
    list_copies(reconciler, "a")
    reconcile(reconciler)
    assert "create_copy" in w.names()
    decided: list[str] = []
    real = reconcile_module.decide

    def counting(snap: Any) -> Any:
        action = real(snap)
        decided.append(action.kind.value)
        return action

    monkeypatch.setattr(reconcile_module, "decide", counting)
    w.calls.clear()  # the dispatch ended in sync: NOTHING, no recheck
    assert reconcile(reconciler) is None
    assert decided == [] and w.calls == []
    found = reconciler.copies.get("a", UID)
    assert found is not None
    moved = {**found.obj, "status": {"active": 1}, "metadata": {
        **found.obj["metadata"], "resourceVersion": "6"}}
    reconciler.copies.put("a", UID, MemberCopy(obj=moved, generic="running", statuses=(),
                                               seen_at=0.0))
    reconcile(reconciler)
    assert decided[0] == "mirror"


def test_a_waiting_workload_logs_its_decision_again_only_when_a_verdict_turns() -> None:
    """Under saturation a waiting workload is placed again on every change of its inputs:
    one ``placement.decided`` line per change of what members could take it, not per try."""
    from structlog.testing import capture_logs

    reconciler, _ = world(gpus=64)  # fits nowhere
    hub = reconciler.cache
    with capture_logs() as logs:
        reconcile(reconciler)
        for version in ("2", "3"):  # the hub object changed: placed again, same verdicts
            job = pb.job(gpus=64)
            job["metadata"].update(resourceVersion=version, generation=int(version))
            job["metadata"]["labels"] = {"try": version}
            hub.put(JOBS, job)
            reconcile(reconciler)
        job = pb.job(gpus=2)  # now it fits: the verdicts turned
        job["metadata"].update(resourceVersion="4", generation=4)
        hub.put(JOBS, job)
        reconcile(reconciler)
    decided = [e for e in logs if e["event"] == "placement.decided"]
    placings = [e for e in logs if e["event"] == "workload.resolved"]
    assert len(placings) >= 3, [e["event"] for e in logs]  # it was really placed again
    assert [e["chosen"] for e in decided] == [None, "a"]
