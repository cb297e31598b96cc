"""actions.execute(): the action -> writes -> outcome table, with a recording fake writer.

No apiserver: the ``Writer`` records each call; the real writer (``control.writes``) is
covered by the integration tests on real apiservers. Each row says which writes an action
makes, in which order, and what the loop is told next (decide again / later / done).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest

from dispatcher.control import actions
from dispatcher.control.core import copyplan
from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.decide import (
    Action,
    ActionKind,
    Copy,
    CopyState,
    MemberHealth,
    Rules,
    Snapshot,
    decide,
    placing_needed,
)
from dispatcher.control.core.names import Phase
from dispatcher.control.core.record import DispatchRecord, format_time
from dispatcher.control.observe import Metrics
from dispatcher.control.writer import AGAIN, DONE, CopyUpdate, Created, Outcome, Ports, Sent, later
from dispatcher.workloads.catalog import Catalog
from tests.unit.control import placing_builders as pb
from tests.unit.control.fakes import Calls, FakeHub, FakeMembers

NOW = pb.NOW


class W:
    """The two port fakes of one test (``fakes``), sharing their calls."""

    def __init__(self, *, create: Sent | Rejection = Sent.EXISTS, mirror_ok: bool = True,
                 update: CopyUpdate | None = None, finalizer_conflict: bool = False,
                 record_created: Created = Created.CREATED) -> None:
        self.calls = Calls()
        self.hub = FakeHub(self.calls, created=record_created, mirror_ok=mirror_ok,
                           finalizer_conflict=finalizer_conflict)
        self.members = FakeMembers(self.calls, create=create, update=update)
        self.ports = Ports(hub=self.hub, members=self.members, metrics=Metrics.create(),
                           monotonic=lambda: 0.01)

    def names(self) -> list[str]:
        return self.calls.names()


def workload(*, deleting: bool = False, status: dict[str, Any] | None = None,
             generation: int = 1) -> dict[str, Any]:
    obj = pb.job(gpus=8, parallelism=2)
    obj["metadata"].update(resourceVersion="7", generation=generation)
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-11-30T11:00:00Z"
    if status is not None:
        obj["status"] = status
    return obj


def record(**kw: Any) -> DispatchRecord:
    return DispatchRecord(name="train", namespace="team-a", workload_uid="uid-train", **kw)


PLACED = record(phase=Phase.PLACED, cluster="m1", attempt=1, summary="m1: 16 GPUs free")
RUNNING = record(phase=Phase.RUNNING, cluster="m1", attempt=1, submitted_at=NOW - 5,
                 generic_status="running", synced_generation=1)
OURS = Copy(state=CopyState.OURS, uid="r1", generic="running", statuses=("running",),
            status={"active": 2}, resource_version="42", written_generation=1,
            seen_at=0.0)


def planned(snap: Snapshot, action: Action) -> Action:
    """A SUBMIT or UPDATE_COPY with its copy planned, as the reconciler plans it."""
    if action.kind not in (ActionKind.SUBMIT, ActionKind.UPDATE_COPY):
        return action
    assert snap.workload is not None and action.member is not None
    catalog = Catalog.builtin()
    return replace(action, plan=copyplan.plan(copyplan.PlanInput(
        uid="uid-train", member=action.member, workload=snap.workload,
        definition=catalog.find("batch/v1", "Job"), resolution=catalog.resolve(snap.workload),
        hub_id="hub")))


def run(writer: W, snap: Snapshot, *, plan: Rejection | None = None
        ) -> tuple[Action, Outcome]:
    action = decide(snap)
    action = planned(snap, action) if plan is None else replace(action, plan=plan)
    return action, asyncio.run(actions.execute(writer.ports, uid="uid-train", snap=snap,
                                               action=action))


def test_placement_is_recorded_with_the_demand_then_decided_again() -> None:
    w = W()
    snap = Snapshot(now=NOW, workload=workload(), record=record(),
                    placing=pb.given(workload(), fleet=pb.members()))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.RECORD_PLACEMENT and outcome == AGAIN
    (name, status), = w.calls
    assert name == "patch_record" and status["phase"] == "Placed"
    assert status["decision"]["cluster"] == "a" and status["demand"]["gpus"] == 16
    assert status["decision"]["reservation"]["member"] == "a"


def test_a_new_workload_that_fits_gets_its_record_with_the_decision_in_one_write() -> None:
    """The create is the crash-safety write: the decision and reservation are in the
    record's spec, no status patch before the member is touched."""
    w = W()
    snap = Snapshot(now=NOW, workload=workload(), record=None,
                    placing=pb.given(workload(), fleet=pb.members()))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.CREATE_RECORD and outcome == AGAIN
    (name, placed), = w.calls
    assert name == "create_record"
    assert placed["decision"]["cluster"] == "a" and placed["decision"]["attempt"] == 1
    assert placed["decision"]["reservation"]["member"] == "a"
    assert placed["demand"]["gpus"] == 16


def test_a_new_workload_whose_record_was_there_lets_its_reservation_go() -> None:
    w = W(record_created=Created.EXISTS)
    snap = Snapshot(now=NOW, workload=workload(), record=None,
                    placing=pb.given(workload(), fleet=pb.members()))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.CREATE_RECORD and outcome == replace(AGAIN, release=True)
    assert w.names() == ["create_record"]


def test_a_new_workload_waits_while_a_deleted_namesakes_record_holds_its_name() -> None:
    w = W(record_created=Created.BLOCKED)
    snap = Snapshot(now=NOW, workload=workload(), record=None,
                    placing=pb.given(workload(), fleet=pb.members()))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.CREATE_RECORD
    assert outcome == replace(later(1.0), release=True)
    assert w.names() == ["create_record"]


def test_a_new_workload_that_fits_nowhere_gets_its_record_then_pending() -> None:
    w = W()
    snap = Snapshot(now=NOW, workload=workload(), record=None,
                    placing=pb.given(workload(), fleet=pb.members(used_a=4)))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.CREATE_RECORD and outcome == DONE
    assert w.names() == ["create_record", "patch_record", "event"]
    assert w.calls[0][1] is None
    assert w.calls[1][1]["phase"] == "Pending"


def test_pending_is_written_once_with_its_reason_and_a_warning_event() -> None:
    w = W()
    snap = Snapshot(now=NOW, workload=workload(), record=record(),
                    placing=pb.given(workload(), fleet=pb.members(used_a=4)))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.RECORD_PENDING and outcome == DONE
    assert w.names() == ["patch_record", "event"]
    placed = {c["type"]: c for c in w.calls[0][1]["conditions"]}["Placed"]
    assert placed["reason"] == "NoFeasibleMember" and placed["status"] == "False"


def test_a_pending_refresh_rewrites_the_numbers_without_an_event() -> None:
    """Only the free-GPU numbers changed and the last write is a refresh interval old:
    the status is written again (key and time), no warning Event; another why-class on a
    member writes with its Event."""
    first = Snapshot(now=NOW, workload=workload(), record=None,
                     placing=pb.given(workload(), fleet=pb.members(used_a=4)))
    w = W()
    run(w, first)
    status = w.calls[1][1]
    assert status["pending"]["writtenAt"] == format_time(NOW)
    placed = {c["type"]: c for c in status["conditions"]}["Placed"]
    written = record(phase=Phase.PENDING, pending_reason=placed["reason"],
                     pending_message=placed["message"], pending_key=status["pending"]["key"],
                     pending_written_at=NOW)
    later_on = Snapshot(now=NOW + 30, workload=workload(), record=written,
                        placing=pb.given(workload(), fleet=pb.members(used_a=2)))
    w = W()
    action, outcome = run(w, later_on)
    assert action.kind is ActionKind.RECORD_PENDING and outcome == DONE
    assert w.names() == ["patch_record"]
    assert w.calls[0][1]["pending"] == {"key": status["pending"]["key"],
                                        "writtenAt": format_time(NOW + 30)}
    w = W()
    action, _ = run(w, replace(later_on, record=replace(written, pending_key="another")))
    assert action.kind is ActionKind.RECORD_PENDING and w.names() == ["patch_record", "event"]


def test_submit_then_adopt_writes_submitted_with_the_copy_status() -> None:
    w = W()
    absent = Snapshot(now=NOW, workload=workload(), record=PLACED,
                      copy=Copy(state=CopyState.ABSENT))
    action, outcome = run(w, absent)
    assert action.kind is ActionKind.SUBMIT and outcome == AGAIN
    assert w.calls == [("create_copy", "m1")]
    w.calls.clear()
    action, outcome = run(w, replace(absent, copy=OURS))
    assert action.kind is ActionKind.ADOPT and outcome == AGAIN
    assert w.names() == ["patch_record", "event"]
    status = w.calls[0][1]
    assert status["phase"] == "Running" and status["genericStatus"] == "running"
    assert status["remote"]["hubGeneration"] == 1


def test_the_submitted_write_copies_a_decision_made_at_create_into_status() -> None:
    unsettled = replace(PLACED, phase="", unsettled={
        "decision": {"cluster": "m1", "attempt": 1}, "demand": {"gpus": 16},
        "definition": "batch-job"})
    w = W()
    action, outcome = run(w, Snapshot(now=NOW, workload=workload(), record=unsettled,
                                      copy=OURS))
    assert action.kind is ActionKind.ADOPT and outcome == AGAIN
    status = w.calls[0][1]
    assert status["decision"] == {"cluster": "m1", "attempt": 1}
    assert status["demand"] == {"gpus": 16} and status["definition"] == "batch-job"
    assert [c["type"] for c in status["conditions"]] == ["Placed", "Resolved", "Submitted"]
    assert status["conditions"][2]["reason"] == "Created"


def test_a_member_not_connected_is_looked_at_again_later() -> None:
    w = W(create=Sent.NOT_CONNECTED)
    _, outcome = run(w, Snapshot(now=NOW, workload=workload(), record=PLACED,
                                 copy=Copy(state=CopyState.ABSENT)))
    assert outcome == later(2.0)


@pytest.mark.parametrize(("fleet", "outcome", "phase"), [
    (pb.members(), AGAIN, "Pending"),   # requeued without m1 (a can take it)
    ([], DONE, "Failed"),               # nobody else could take it
])
def test_a_rejected_copy_releases_at_once_then_decide_requeues_or_fails(
        fleet: list[Any], outcome: Outcome, phase: str) -> None:
    """The refusal is noted (no placement in the write path): the outcome releases and
    remembers it; the next ``decide`` reads it from the snapshot, with the placement input,
    and answers from the alternatives."""
    refused = Rejection.of("m1", status=422, reason="Invalid", message="bad")
    w = W(create=refused)
    absent = Snapshot(now=NOW, workload=workload(), record=PLACED,
                      copy=Copy(state=CopyState.ABSENT))
    action, answer = run(w, absent)
    assert action.kind is ActionKind.SUBMIT
    assert answer == replace(AGAIN, release=True, refused=refused)
    assert w.names() == ["create_copy"]
    refusal = answer.refused
    assert refusal is not None and refusal.member == "m1"
    assert placing_needed(replace(absent, refusal=refusal))
    w.calls.clear()
    action, answer = run(w, replace(absent, refusal=refusal,
                                    placing=pb.given(workload(), fleet=fleet)))
    assert action.kind is (ActionKind.REQUEUE if phase == "Pending" else ActionKind.FAIL)
    assert answer == replace(outcome, answered=True)  # the refusal is moot now
    assert w.names() == ["patch_record", "event"]
    status = w.calls[0][1]
    assert status["phase"] == phase and "m1" in status["excluded"]
    reasons = {c["type"]: c["reason"] for c in status["conditions"]}
    assert reasons["Submitted"] == "Rejected"


def test_a_refusal_by_another_member_is_not_this_copys() -> None:
    refusal = Rejection.of("m9", status=422, reason="Invalid", message="bad")
    snap = Snapshot(now=NOW, workload=workload(), record=PLACED,
                    copy=Copy(state=CopyState.ABSENT), refusal=refusal)
    assert decide(snap).kind is ActionKind.SUBMIT


def test_mirror_writes_the_status_diff_then_the_phase() -> None:
    w = W()
    snap = Snapshot(now=NOW, workload=workload(status={}),
                    record=replace(RUNNING, phase=Phase.SUBMITTED, generic_status=None),
                    copy=OURS)
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.MIRROR and outcome == replace(DONE, mirrored="42")
    assert w.names() == ["mirror_status", "patch_record", "event"]
    assert w.calls[0][1] == {"active": 2}
    assert w.calls[1][1]["phase"] == "Running"


def test_mirror_of_a_workload_gone_meanwhile_stops() -> None:
    w = W(mirror_ok=False)
    _, outcome = run(w, Snapshot(now=NOW, workload=workload(status={}), record=RUNNING,
                                 copy=OURS))
    assert outcome == DONE and w.names() == ["mirror_status"]


def test_a_spec_change_is_written_to_the_copy() -> None:
    w = W(update=CopyUpdate(generation=2, changed=("parallelism",)))
    snap = Snapshot(now=NOW, workload=workload(generation=2, status={"active": 2}),
                    record=RUNNING, copy=OURS)
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.UPDATE_COPY and outcome == AGAIN
    assert w.names() == ["update_copy", "patch_record", "event"]
    patch = w.calls[1][1]
    assert patch["remote"] == {"hubGeneration": 2}
    (updated,) = patch["conditions"]
    assert (updated["type"], updated["status"], updated["reason"]) == \
        ("Updated", "True", "Written")


def test_a_refused_spec_change_is_not_written_and_the_dispatch_says_why() -> None:
    """A spec change whose pod template sets a refused scheduling field: the copy keeps
    its spec, the generation counts as handled (mirroring goes on), Updated=False says
    why, with a warning Event."""
    why = "pod template refused: spec.template.spec.nodeName: ..."
    w = W()
    snap = Snapshot(now=NOW, workload=workload(generation=3, status={"active": 2}),
                    record=RUNNING, copy=OURS)
    action, outcome = run(w, snap, plan=Rejection.of(
        "m1", status=0, reason="PodTemplateRefused", message=why))
    assert action.kind is ActionKind.UPDATE_COPY and outcome == AGAIN
    assert w.names() == ["patch_record", "event"]  # nothing sent to the member
    patch = w.calls[0][1]
    assert patch["remote"] == {"hubGeneration": 3}
    (updated,) = patch["conditions"]
    assert (updated["type"], updated["status"], updated["reason"], updated["message"]) == \
        ("Updated", "False", "PodTemplateRefused", why)
    assert w.calls[1][1] == "UpdateRefused"


def test_member_lost_marks_unknown_and_rechecks_when_it_may_count_as_lost() -> None:
    w = W()
    snap = Snapshot(now=NOW, workload=workload(), record=replace(RUNNING,
                                                                 generic_status="pending"),
                    health=MemberHealth(reachable=False, lost_since=NOW - 10),
                    rules=Rules(member_lost_after=60))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.MARK_UNKNOWN and outcome == later(50.0)
    assert w.calls[0][1]["phase"] == "Unknown"


def test_requeue_deletes_the_copy_on_a_reachable_member() -> None:
    w = W()
    snap = Snapshot(now=NOW, workload=workload(), copy=replace(OURS, generic="pending"),
                    record=replace(RUNNING, generic_status="pending", submitted_at=NOW - 100),
                    rules=Rules(stuck_after=30))
    action, outcome = run(w, snap)
    assert action.kind is ActionKind.REQUEUE
    assert outcome == replace(AGAIN, release=True, answered=True)
    assert w.names()[:1] == ["delete_copy"]


def test_deletion_deletes_the_copy_then_releases_the_finalizer() -> None:
    w = W()
    deleting = Snapshot(now=NOW, workload=workload(deleting=True), record=RUNNING, copy=OURS)
    action, outcome = run(w, deleting)
    assert action.kind is ActionKind.DELETE_COPY and outcome == later(0.5)
    w.calls.clear()
    action, outcome = run(w, replace(deleting, copy=Copy(state=CopyState.ABSENT)))
    assert action.kind is ActionKind.RELEASE_FINALIZER and outcome == replace(DONE, forget=True)
    assert w.names() == ["remove_finalizer"]
    _, outcome = run(W(finalizer_conflict=True),
                     replace(deleting, copy=Copy(state=CopyState.ABSENT)))
    assert outcome == replace(AGAIN, forget=True)  # it changed meanwhile: decide again


def test_a_workload_gone_from_the_hub_loses_its_copy_then_its_record() -> None:
    w = W()
    gone = Snapshot(now=NOW, workload=None, record=RUNNING, copy=OURS, workload_gone=True)
    action, outcome = run(w, gone)
    assert action.kind is ActionKind.DELETE_COPY and outcome == later(0.5)
    assert w.names() == ["delete_copy"]
    w.calls.clear()
    action, outcome = run(w, replace(gone, copy=Copy(state=CopyState.ABSENT)))
    assert action.kind is ActionKind.RELEASE_FINALIZER and outcome == replace(DONE, forget=True)
    assert w.names() == ["remove_finalizer"]
