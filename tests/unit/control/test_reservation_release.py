"""What a workload *is* and what GPUs are still promised for it are two things (issue 41).

The generic status follows the operator (a JobSet whose Jobs are active reads ``running``
while a pod still waits for a node); the reservation follows the member's pods: each pod
bound or finished takes its GPUs off (``fleet.reservations``), and only a finished workload
drops the rest at once. These tests run the real pieces together: the built-in catalog
reads the operator's status, ``MemberReservations`` is fed pod events as a member's pod
informer does, ``decide`` and ``actions.execute`` run the mirror step, and the outcome's
``release`` is what the reconciler would apply to the book.
"""

from __future__ import annotations

import asyncio
import copy as copying
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.control import actions
from dispatcher.control.core.decide import (
    ActionKind,
    Copy,
    CopyState,
    Rules,
    Snapshot,
    decide,
    got_going,
    not_started,
)
from dispatcher.control.core.names import Phase
from dispatcher.control.core.record import DispatchRecord
from dispatcher.control.observe import Metrics
from dispatcher.control.writer import Outcome, Ports
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.reservations import HUB_UID_LABEL, MemberReservations, Reservation
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.resolve import resolve
from tests.unit.control.fakes import Calls, FakeHub, FakeMembers
from tests.unit.fleet.objects import node, pod

UID = "uid-js"
NOW = 1_800_000_000.0
SAMPLE = Path(__file__).parents[1] / "workloads" / "catalog" / "jobset" / "typical.yaml"
# typical.yaml: replicated job "workers", 2 Jobs x 4 pods x 8 GPUs. Two Jobs active, one
# ready: the JobSet controller's numbers with the other Job's pods still Pending.
UNDER_WAY = {"restarts": 0, "replicatedJobsStatus": [
    {"name": "workers", "ready": 1, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}]}
DONE = {"restarts": 0, "terminalState": "Completed",
        "conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted",
                        "message": "jobset completed successfully",
                        "lastTransitionTime": "2026-11-29T12:00:00Z"}],
        "replicatedJobsStatus": [{"name": "workers", "ready": 0, "succeeded": 2, "failed": 0,
                                  "active": 0, "suspended": 0}]}


def _jobset(status: dict[str, Any] | None) -> dict[str, Any]:
    obj = yaml.safe_load(SAMPLE.read_text(encoding="utf-8"))
    obj["metadata"].update(uid=UID, resourceVersion="7", generation=1)
    if status is not None:
        obj["status"] = copying.deepcopy(status)
    return obj


def _book() -> tuple[ClusterCapacity, MemberReservations]:
    """A member of 8 nodes x 8 GPUs, 64 GPUs reserved for the JobSet's 8 pods."""
    cap = ClusterCapacity()
    for i in range(8):
        cap.upsert_node(node(f"n{i}", 8))
    book = MemberReservations(member="m1", capacity=cap)
    book.add(Reservation(workload_uid=UID, member="m1", expires_at=NOW + 300,
                         nodes=tuple((f"n{i}", 8) for i in range(8))))
    return cap, book


def _pod_event(cap: ClusterCapacity, book: MemberReservations, name: str, *,
               node_name: str | None, phase: str = "Running") -> None:
    """A pod event as the member's informer delivers it: capacity first, then the book."""
    raw = pod(name, 8, node_name=node_name, phase=phase)
    raw["metadata"]["labels"] = {HUB_UID_LABEL: UID}
    cap.upsert_pod(raw)
    book.upsert_pod(raw)


def _copy(obj: dict[str, Any], book: MemberReservations, *,
          gang_mechanism: str = "none", room_gpus: int | None = None) -> Copy:
    """The copy as the reconciler builds it (``Reconciler._copy``): status read through
    the built-in catalog, bound pods and GPUs still held from the member's book."""
    found = resolve(obj, catalog=Catalog.builtin())
    held = book.get(UID)
    return Copy(state=CopyState.OURS, uid="r1", status=obj.get("status"),
                generic=found.status, statuses=tuple(found.statuses), resource_version="42",
                written_generation=1, bound_pods=book.bound(UID),
                held_gpus=held.gpus if held is not None else 0,
                gang_mechanism=gang_mechanism, room_gpus=room_gpus)


def _record(cap: ClusterCapacity, book: MemberReservations, **kw: Any) -> DispatchRecord:
    fields: dict[str, Any] = {"phase": Phase.SUBMITTED, **kw}
    return DispatchRecord(name="llama-pretrain", namespace="team-a", workload_uid=UID,
                          cluster="m1", attempt=1, submitted_at=NOW - 30,
                          synced_generation=1, gpus=64, reservation=book.get(UID), **fields)


def _mirror(snap: Snapshot) -> tuple[Outcome, list[tuple[str, Any]]]:
    calls = Calls()
    ports = Ports(hub=FakeHub(calls), members=FakeMembers(calls), metrics=Metrics.create(),
                  monotonic=lambda: 0.0)
    action = decide(snap)
    assert action.kind is ActionKind.MIRROR, action
    outcome = asyncio.run(actions.execute(ports, uid=UID, snap=snap, action=action))
    return outcome, list(calls)


def _apply(outcome: Outcome, book: MemberReservations) -> None:
    """What the reconciler does with an outcome's ``release`` (``Reconciler._release``)."""
    if outcome.release:
        book.release(UID)


def test_a_running_jobset_keeps_the_gpus_of_its_unbound_pod_reserved() -> None:
    cap, book = _book()
    for i in range(7):  # seven of eight pods bound; the eighth waits for a node
        _pod_event(cap, book, f"workers-{i}", node_name=f"n{i}")
    _pod_event(cap, book, "workers-7", node_name=None, phase="Pending")
    obj = _jobset(UNDER_WAY)
    copy = _copy(obj, book)
    assert copy.generic == "running"  # what the operator says, as upstream reads it
    record = _record(cap, book)
    outcome, calls = _mirror(Snapshot(now=NOW, workload=_jobset(None), record=record,
                                      copy=copy))
    _apply(outcome, book)
    patch = next(body for name, body in calls if name == "patch_record")
    assert patch["genericStatus"] == "running" and "decision" not in patch
    assert not outcome.release
    assert book.get(UID) == Reservation(workload_uid=UID, member="m1", expires_at=NOW + 300,
                                        nodes=(("n7", 8),))
    assert cap.free == 0  # n7's 8 GPUs are still promised to the pending pod
    # The pod binds: the reservation empties itself, no status needed.
    _pod_event(cap, book, "workers-7", node_name="n7")
    assert UID not in book and cap.free == 0 and cap.reserved == 0


def test_a_finished_pod_never_seen_bound_ends_its_share_of_the_reservation() -> None:
    cap, book = _book()
    for i in range(7):
        _pod_event(cap, book, f"workers-{i}", node_name=f"n{i}")
    # The last pod ran and ended between two pod events: first seen Succeeded.
    _pod_event(cap, book, "workers-7", node_name="n7", phase="Succeeded")
    assert UID not in book and cap.reserved == 0 and cap.free == 8


def test_a_reservation_rebuilt_after_a_pod_finished_counts_that_pod() -> None:
    cap = ClusterCapacity()
    cap.upsert_node(node("n0", 8))
    cap.upsert_node(node("n1", 8))
    book = MemberReservations(member="m1", capacity=cap)
    _pod_event(cap, book, "workers-0", node_name="n0", phase="Succeeded")
    book.add(Reservation(workload_uid=UID, member="m1", expires_at=NOW + 300,
                         nodes=(("n0", 8), ("n1", 8))))
    assert book.get(UID) == Reservation(workload_uid=UID, member="m1", expires_at=NOW + 300,
                                        nodes=(("n1", 8),))
    book.delete_pod("team-a/workers-0")  # gone from the member: nothing given back
    assert book.get(UID) is not None and book.get(UID).gpus == 8  # type: ignore[union-attr]


def test_a_finished_jobset_releases_what_is_left() -> None:
    cap, book = _book()
    _pod_event(cap, book, "workers-0", node_name="n0")
    copy = _copy(_jobset(DONE), book)
    assert copy.generic == "completed"
    outcome, calls = _mirror(Snapshot(now=NOW, workload=_jobset(UNDER_WAY),
                                      record=_record(cap, book, generic_status="running"),
                                      copy=copy))
    _apply(outcome, book)
    patch = next(body for name, body in calls if name == "patch_record")
    assert outcome.release and patch["decision"] == {"reservation": None}
    assert UID not in book and cap.reserved == 0


def test_running_with_every_pod_pending_is_not_stuck_but_may_be_a_stalled_gang() -> None:
    """A JobSet that reads running with no pod bound is not requeued as stuck (its status
    is its operator's) nor "not started" for failover; its pods say it has not got going,
    so on a member gang with room for it the Dispatch says GangStalled."""
    cap, book = _book()
    for i in range(8):
        _pod_event(cap, book, f"workers-{i}", node_name=None, phase="Pending")
    obj = _jobset(UNDER_WAY)
    copy = _copy(obj, book)
    assert copy.generic == "running" and copy.held_gpus == 64 and copy.bound_pods == 0
    assert not got_going(copy) and not not_started(copy.generic)
    record = _record(cap, book, generic_status="running", phase=Phase.RUNNING)
    rules = Rules(stuck_after=20.0, gang_stall_after=10.0)
    assert decide(Snapshot(now=NOW, workload=obj, record=record, copy=copy,
                           rules=rules)).kind is ActionKind.NOTHING
    gang = _copy(obj, book, gang_mechanism="workload-api", room_gpus=64)
    action = decide(Snapshot(now=NOW, workload=obj, record=record, copy=gang, rules=rules))
    assert action.kind is ActionKind.REPORT_STALL and "no pod of the copy bound" in action.reason


def test_running_with_a_pod_bound_is_not_stuck_and_keeps_the_rest_reserved() -> None:
    cap, book = _book()
    _pod_event(cap, book, "workers-0", node_name="n0")
    for i in range(1, 8):
        _pod_event(cap, book, f"workers-{i}", node_name=None, phase="Pending")
    obj = _jobset(UNDER_WAY)
    copy = _copy(obj, book)
    assert got_going(copy)
    record = _record(cap, book, generic_status="running", phase=Phase.RUNNING)
    action = decide(Snapshot(now=NOW, workload=obj, record=record, copy=copy,
                             rules=Rules(stuck_after=20.0, gang_stall_after=0.0)))
    assert action.kind is ActionKind.NOTHING, action
    assert book.get(UID) is not None and book.get(UID).gpus == 56  # type: ignore[union-attr]
    # once started, a later copy with none bound (pods recreated) is not stuck either
    later = replace(record, started_at=NOW - 10)
    none_bound = replace(copy, bound_pods=0, held_gpus=56)
    assert decide(Snapshot(now=NOW, workload=obj, record=later, copy=none_bound,
                           rules=Rules(stuck_after=20.0, gang_stall_after=0.0))
                  ).kind is ActionKind.NOTHING


def test_a_cronjob_waiting_for_its_first_run_is_not_stuck() -> None:
    """Running with no pod of it at all (a CronJob before its first scheduled time, its
    reservation still held for that run): not requeued as stuck."""
    sample = SAMPLE.parents[1] / "cronjob" / "typical.yaml"
    obj = yaml.safe_load(sample.read_text(encoding="utf-8"))
    obj["metadata"].update(uid=UID, resourceVersion="7", generation=1)
    obj.pop("status", None)
    cap, book = _book()
    copy = _copy(obj, book)
    assert copy.generic == "running"
    record = _record(cap, book, generic_status="running", phase=Phase.RUNNING)
    action = decide(Snapshot(now=NOW, workload=obj, record=record, copy=copy,
                             rules=Rules(stuck_after=20.0, gang_stall_after=10.0)))
    assert action.kind is ActionKind.NOTHING, action
    assert book.get(UID) is not None  # held for the first run until its pods bind or expiry


def test_a_pod_gone_from_its_node_had_its_slot() -> None:
    """The member's informer sees bound, unfinished pods only: a pod that ran and ended
    between two events arrives as a deletion with its last state, and takes its share."""
    _, book = _book()
    raw = pod("workers-0", 8, node_name="n0", phase="Succeeded")
    raw["metadata"]["labels"] = {HUB_UID_LABEL: UID}
    book.delete_pod(raw)
    held = book.get(UID)
    assert held is not None and held.gpus == 56 and dict(held.nodes).get("n0") is None
    book.delete_pod(raw)  # once only
    assert book.get(UID) == held
    pending = pod("workers-1", 8, phase="Pending")
    pending["metadata"]["labels"] = {HUB_UID_LABEL: UID}
    book.delete_pod(pending)  # never on a node: nothing to take
    assert book.get(UID) == held
