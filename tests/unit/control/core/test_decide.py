"""decide(): "before -> wanted action" tables, one row per branch of the module's table.

Covered: every branch, deletion with reachable/unreachable members, each failover policy,
attempt bounds, stuck detection and mirroring. Left out: the shell (integration tests).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.control.core.decide import (
    Action,
    ActionKind,
    Copy,
    CopyState,
    MemberHealth,
    PlacingMissing,
    Rules,
    Snapshot,
    admission_said,
    decide,
    placing_needed,
)
from dispatcher.control.core.names import FINALIZER, PendingReason, Phase
from dispatcher.control.core.pending import meaning_key
from dispatcher.control.core.placing import PlacementInput, place
from dispatcher.control.core.record import DispatchRecord
from dispatcher.fleet.admission import ADMITTED, EVICTED, PENDING, Admission
from tests.unit.control import placing_builders as pb

NOW = 1_000_000.0


def workload(*, finalizer: bool = False, deleting: bool = False,
             status: dict[str, Any] | None = None, owned: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "train", "namespace": "team-a", "uid": "u1"}
    if owned:  # a controller's child (an Argo Workflow's JobSet, a DaemonSet's pod)
        meta["ownerReferences"] = [{"apiVersion": "argoproj.io/v1alpha1", "kind": "Workflow",
                                    "name": "wf", "uid": "w1", "controller": True}]
    if finalizer:  # held by a controller before 2026-12 (today the record holds it)
        meta["finalizers"] = [FINALIZER]
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T20:00:00Z"
    obj: dict[str, Any] = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                           "metadata": meta}
    if status is not None:
        obj["status"] = status
    return obj


def record(**kw: Any) -> DispatchRecord:
    return DispatchRecord(name="train", namespace="team-a", workload_uid="u1", **kw)


def placement(fits: bool) -> PlacementInput:
    """A 2 x 8-GPU Job over a fleet where it fits now, or only once GPUs free up."""
    return pb.given(pb.job(gpus=8, parallelism=2), fleet=pb.members(used_a=0 if fits else 4))


FULL_SUMMARY = place(placement(False)).decision.summary
FULL_KEY = meaning_key(place(placement(False)))
# the same reason with other free-GPU numbers (2 of a0's GPUs taken, not 4)
OLD_NUMBERS = place(pb.given(pb.job(gpus=8, parallelism=2),
                             fleet=pb.members(used_a=2))).decision.summary
assert OLD_NUMBERS != FULL_SUMMARY


def pending_written(*, message: str, key: str, ago: float) -> DispatchRecord:
    """Pending for no feasible member, ``message`` written ``ago`` seconds before NOW."""
    return record(phase=Phase.PENDING, pending_message=message, pending_key=key,
                  pending_reason=PendingReason.NO_FEASIBLE_MEMBER,
                  pending_written_at=NOW - ago)


PLACED = record(phase=Phase.PLACED, cluster="m1", attempt=1)
SUBMITTED = record(phase=Phase.SUBMITTED, cluster="m1", attempt=1, submitted_at=NOW - 10)
RUNNING = replace(SUBMITTED, phase=Phase.RUNNING, generic_status="running")
COMPLETED = replace(SUBMITTED, phase=Phase.COMPLETED, generic_status="completed")
FAILED = replace(SUBMITTED, phase=Phase.FAILED, generic_status="failed")
OURS = Copy(state=CopyState.OURS, uid="r1")
LOST_LONG = MemberHealth(reachable=False, lost_since=NOW - 1000)
LOST_NOW = MemberHealth(reachable=False, lost_since=NOW - 1)

NEEDS_PLACING = "needs the placement input"
"""A row ``decide`` answers only with the placement input (``placing_needed``)."""
ROWS: list[tuple[str, Snapshot, ActionKind | str]] = [
    ("gone", Snapshot(now=NOW, workload=None, record=PLACED), ActionKind.NOTHING),
    ("deleting, copy ours", Snapshot(now=NOW, workload=workload(deleting=True), record=PLACED,
                                     copy=OURS), ActionKind.DELETE_COPY),
    ("deleting, member just lost", Snapshot(now=NOW, workload=workload(deleting=True),
                                            record=PLACED, health=LOST_NOW), ActionKind.WAIT),
    ("deleting, member lost long", Snapshot(now=NOW, workload=workload(deleting=True),
                                            record=PLACED, health=LOST_LONG,
                                            rules=Rules(member_lost_after=60)),
     ActionKind.RELEASE_FINALIZER),
    ("deleting, copy absent", Snapshot(now=NOW, workload=workload(deleting=True),
                                       record=PLACED, copy=Copy(state=CopyState.ABSENT)),
     ActionKind.RELEASE_FINALIZER),
    ("deleting, copy not listed", Snapshot(now=NOW, workload=workload(deleting=True),
                                           record=PLACED), ActionKind.WAIT),
    ("deleting, never placed", Snapshot(now=NOW, workload=workload(deleting=True),
                                        record=record()), ActionKind.RELEASE_FINALIZER),
    ("deleting, legacy finalizer, no record", Snapshot(
        now=NOW, workload=workload(deleting=True, finalizer=True), record=None),
     ActionKind.RELEASE_FINALIZER),
    ("deleting, nothing held", Snapshot(now=NOW, workload=workload(deleting=True),
                                        record=None), ActionKind.NOTHING),
    ("gone, the hub says so, copy ours", Snapshot(now=NOW, workload=None, record=PLACED,
                                                  copy=OURS, workload_gone=True),
     ActionKind.DELETE_COPY),
    ("gone, the hub says so, member just lost", Snapshot(
        now=NOW, workload=None, record=PLACED, health=LOST_NOW, workload_gone=True),
     ActionKind.WAIT),
    ("gone, the hub says so, copy absent", Snapshot(
        now=NOW, workload=None, record=PLACED, copy=Copy(state=CopyState.ABSENT),
        workload_gone=True), ActionKind.RELEASE_FINALIZER),
    ("gone, the hub says so, copy not listed", Snapshot(
        now=NOW, workload=None, record=PLACED, workload_gone=True), ActionKind.WAIT),
    ("gone, the hub says so, never placed", Snapshot(
        now=NOW, workload=None, record=record(phase=Phase.PENDING), workload_gone=True),
     ActionKind.RELEASE_FINALIZER),
    ("gone, no record", Snapshot(now=NOW, workload=None, record=None, workload_gone=True),
     ActionKind.NOTHING),
    ("new", Snapshot(now=NOW, workload=workload(), record=None), NEEDS_PLACING),
    ("new, a controller owns it", Snapshot(now=NOW, workload=workload(owned=True),
                                           record=None), ActionKind.NOTHING),
    # issue 35: the finalizer is tenant-writable; only a Dispatch says it was taken
    ("owned, with our finalizer, no record: never taken", Snapshot(
        now=NOW, workload=workload(owned=True, finalizer=True), record=None),
     ActionKind.NOTHING),
    ("owned, its record exists: it was taken before it got an owner", Snapshot(
        now=NOW, workload=workload(owned=True), record=SUBMITTED,
        copy=replace(OURS, status={"a": 1}, generic="running")), ActionKind.MIRROR),
    ("record being deleted, workload alive: still in use", Snapshot(
        now=NOW, workload=workload(), record=replace(PLACED, deleting=True), copy=OURS),
     ActionKind.ADOPT),
    ("no record, no decision", Snapshot(now=NOW, workload=workload(), record=None),
     NEEDS_PLACING),
    ("no record, fits", Snapshot(now=NOW, workload=workload(), record=None,
                                 placing=placement(True)), ActionKind.CREATE_RECORD),
    ("no record, nothing fits", Snapshot(now=NOW, workload=workload(), record=None,
                                         placing=placement(False)),
     ActionKind.CREATE_RECORD),
    ("gave up", Snapshot(now=NOW, workload=workload(), record=record(failure="x")),
     ActionKind.NOTHING),
    ("unplaced, no decision", Snapshot(now=NOW, workload=workload(), record=record()),
     NEEDS_PLACING),
    ("unplaced, fits", Snapshot(now=NOW, workload=workload(), record=record(),
                                placing=placement(True)), ActionKind.RECORD_PLACEMENT),
    ("unplaced, nothing fits", Snapshot(now=NOW, workload=workload(), record=record(),
                                        placing=placement(False)),
     ActionKind.RECORD_PENDING),
    ("pending, same reason", Snapshot(
        now=NOW, workload=workload(), placing=placement(False),
        record=record(phase=Phase.PENDING, pending_message=FULL_SUMMARY,
                      pending_reason=PendingReason.NO_FEASIBLE_MEMBER)), ActionKind.NOTHING),
    ("pending, same message, other reason", Snapshot(
        now=NOW, workload=workload(), placing=placement(False),
        record=record(phase=Phase.PENDING, pending_message=FULL_SUMMARY,
                      pending_reason=PendingReason.QUEUED)), ActionKind.RECORD_PENDING),
    ("pending, only numbers changed, written 5 s ago", Snapshot(
        now=NOW, workload=workload(), placing=placement(False),
        record=pending_written(message=OLD_NUMBERS, key=FULL_KEY, ago=5)), ActionKind.NOTHING),
    ("pending, only numbers changed, written 30 s ago", Snapshot(
        now=NOW, workload=workload(), placing=placement(False),
        record=pending_written(message=OLD_NUMBERS, key=FULL_KEY, ago=30)),
     ActionKind.RECORD_PENDING),
    ("pending, only numbers changed, refresh off (0 s)", Snapshot(
        now=NOW, workload=workload(), placing=placement(False), rules=Rules(pending_refresh_s=0),
        record=pending_written(message=OLD_NUMBERS, key=FULL_KEY, ago=0)),
     ActionKind.RECORD_PENDING),
    ("pending, a member's why-class changed", Snapshot(
        now=NOW, workload=workload(), placing=placement(False),
        record=pending_written(message=OLD_NUMBERS, key="another", ago=5)),
     ActionKind.RECORD_PENDING),
    ("lost, not long", Snapshot(now=NOW, workload=workload(), record=SUBMITTED,
                                health=LOST_NOW), ActionKind.MARK_UNKNOWN),
    ("lost, already unknown", Snapshot(now=NOW, workload=workload(),
                                       record=replace(SUBMITTED, phase=Phase.UNKNOWN),
                                       health=LOST_NOW), ActionKind.WAIT),
    ("lost long, not started", Snapshot(now=NOW, workload=workload(), record=SUBMITTED,
                                        health=LOST_LONG), ActionKind.REQUEUE),
    ("lost long, running, if-not-started", Snapshot(now=NOW, workload=workload(),
                                                    record=RUNNING, health=LOST_LONG),
     ActionKind.MARK_UNKNOWN),
    ("lost long, running, always", Snapshot(now=NOW, workload=workload(), record=RUNNING,
                                            health=LOST_LONG, rules=Rules(policy="always")),
     ActionKind.REQUEUE),
    ("lost long, completed, always: never run again",
     Snapshot(now=NOW, workload=workload(), record=COMPLETED, health=LOST_LONG,
              rules=Rules(policy="always")), ActionKind.NOTHING),
    ("lost long, failed, always: never run again",
     Snapshot(now=NOW, workload=workload(), record=FAILED, health=LOST_LONG,
              rules=Rules(policy="always")), ActionKind.NOTHING),
    ("completed, copy removed since (member TTL)",
     Snapshot(now=NOW, workload=workload(), record=COMPLETED,
              copy=Copy(state=CopyState.ABSENT)), ActionKind.NOTHING),
    ("once up, back to initializing past stuckAfter: not stuck",
     Snapshot(now=NOW, workload=workload(), record=replace(RUNNING, started_at=NOW - 5),
              copy=replace(OURS, generic="initializing"), rules=Rules(stuck_after=5)),
     ActionKind.MIRROR),
    ("running, copy gone: submitted again",
     Snapshot(now=NOW, workload=workload(), record=RUNNING,
              copy=Copy(state=CopyState.ABSENT)), ActionKind.SUBMIT),
    ("lost long, never", Snapshot(now=NOW, workload=workload(), record=SUBMITTED,
                                  health=LOST_LONG, rules=Rules(policy="never")),
     ActionKind.MARK_UNKNOWN),
    ("lost long, attempts used up", Snapshot(now=NOW, workload=workload(),
                                             record=replace(SUBMITTED, attempt=3),
                                             health=LOST_LONG), ActionKind.FAIL),
    ("copy not listed", Snapshot(now=NOW, workload=workload(), record=PLACED),
     ActionKind.WAIT),
    ("foreign", Snapshot(now=NOW, workload=workload(), record=PLACED,
                         copy=Copy(state=CopyState.FOREIGN)), ActionKind.REPORT_CONFLICT),
    ("foreign, reported", Snapshot(now=NOW, workload=workload(),
                                   record=replace(PLACED, phase=Phase.CONFLICT),
                                   copy=Copy(state=CopyState.FOREIGN)), ActionKind.NOTHING),
    ("placed, absent", Snapshot(now=NOW, workload=workload(), record=PLACED,
                                copy=Copy(state=CopyState.ABSENT)), ActionKind.SUBMIT),
    ("placed, ours (crash after create)", Snapshot(now=NOW, workload=workload(),
                                                   record=PLACED, copy=OURS),
     ActionKind.ADOPT),
    ("unknown, back", Snapshot(now=NOW, workload=workload(),
                               record=replace(SUBMITTED, phase=Phase.UNKNOWN), copy=OURS),
     ActionKind.ADOPT),
    ("stuck", Snapshot(now=NOW, workload=workload(), record=SUBMITTED, copy=OURS,
                       rules=Rules(stuck_after=5)), ActionKind.REQUEUE),
    ("stuck initializing (gang partly up)", Snapshot(
        now=NOW, workload=workload(), record=replace(SUBMITTED, phase=Phase.INITIALIZING,
                                                     generic_status="initializing"),
        copy=replace(OURS, generic="initializing"), rules=Rules(stuck_after=5)),
     ActionKind.REQUEUE),
    ("running is never stuck", Snapshot(now=NOW, workload=workload(status={"a": 1}),
                                        record=RUNNING, rules=Rules(stuck_after=5),
                                        copy=replace(OURS, status={"a": 1},
                                                     generic="running")),
     ActionKind.NOTHING),
    ("not stuck yet", Snapshot(now=NOW, workload=workload(), record=SUBMITTED, copy=OURS,
                               rules=Rules(stuck_after=60)), ActionKind.WAIT),
    ("status changed", Snapshot(now=NOW, workload=workload(), record=SUBMITTED,
                                copy=replace(OURS, status={"a": 1}, generic="running")),
     ActionKind.MIRROR),
    ("hub spec changed", Snapshot(
        now=NOW, workload={**workload(status={"a": 1}),
                           "metadata": {**workload()["metadata"], "generation": 3}},
        record=replace(RUNNING, synced_generation=2),
        copy=replace(OURS, status={"a": 1}, generic="running")), ActionKind.UPDATE_COPY),
    ("in sync", Snapshot(now=NOW, workload=workload(status={"a": 1}), record=RUNNING,
                         copy=replace(OURS, status={"a": 1}, generic="running")),
     ActionKind.NOTHING),
]


@pytest.mark.parametrize(("snap", "wanted"), [(s, w) for _, s, w in ROWS],
                         ids=[name for name, _, _ in ROWS])
def test_branch_table(snap: Snapshot, wanted: ActionKind | str) -> None:
    if wanted == NEEDS_PLACING:  # the shell reads the placement input before deciding
        assert placing_needed(snap)
        with pytest.raises(PlacingMissing):
            decide(snap)
        return
    assert decide(snap).kind is wanted


@pytest.mark.parametrize("snap", [s for _, s, _ in ROWS if s.placing is not None],
                         ids=[name for name, s, _ in ROWS if s.placing is not None])
def test_every_row_that_reads_the_placement_input_is_told_to_the_shell(snap: Snapshot
                                                                       ) -> None:
    assert placing_needed(snap)


def test_pending_numbers_not_written_are_looked_at_again_when_the_refresh_is_due() -> None:
    action = decide(Snapshot(now=NOW, workload=workload(), placing=placement(False),
                             record=pending_written(message=OLD_NUMBERS, key=FULL_KEY, ago=5)))
    assert action.kind is ActionKind.NOTHING
    assert action.recheck_after == pytest.approx(25)
    assert action.reason == FULL_SUMMARY


def test_requeue_names_member_and_recheck() -> None:
    action = decide(Snapshot(now=NOW, workload=workload(), record=SUBMITTED, health=LOST_NOW,
                             rules=Rules(member_lost_after=60)))
    assert action.member == "m1"
    assert action.recheck_after == pytest.approx(59)


_KINDS = st.sampled_from(list(CopyState))
_PHASES = st.sampled_from(["", *Phase])


@given(copy=_KINDS, phase=_PHASES, reachable=st.booleans(), deleting=st.booleans(),
       lost=st.floats(min_value=0, max_value=1e4), attempt=st.integers(0, 5))
def test_never_submits_to_unreachable_or_foreign(*, copy: CopyState, phase: str, reachable: bool,
                                                 deleting: bool, lost: float,
                                                 attempt: int) -> None:
    """Whatever the state, a copy is only created on a reachable member with no object."""
    snap = Snapshot(now=NOW, workload=workload(deleting=deleting),
                    record=record(phase=phase, cluster="m1", attempt=attempt),
                    copy=Copy(state=copy),
                    health=MemberHealth(reachable=reachable, lost_since=NOW - lost))
    action: Action = decide(snap)
    if action.kind is ActionKind.SUBMIT:
        assert reachable and copy is CopyState.ABSENT and not deleting
    if action.kind is ActionKind.DELETE_COPY:
        assert reachable and copy is CopyState.OURS and deleting


# -- GangStalled (rows 19a, 19b) ----------------------------------------------------------

GANGED = replace(OURS, generic="initializing", gang_mechanism="workload-api", bound_pods=0,
                 room_gpus=8)
WAITING = replace(SUBMITTED, phase=Phase.INITIALIZING, generic_status="initializing",
                  gpus=4, submitted_at=NOW - 200)


def _ganged(record_: DispatchRecord = WAITING, **copy: Any) -> Snapshot:
    return Snapshot(now=NOW, workload=workload(), record=record_,
                    copy=replace(GANGED, **copy), rules=Rules(gang_stall_after=120))


@pytest.mark.parametrize(("name", "snap", "wanted"), [
    ("no pod bound past the bound, room there", _ganged(), ActionKind.REPORT_STALL),
    ("not yet past the bound", _ganged(replace(WAITING, submitted_at=NOW - 60)),
     ActionKind.WAIT),
    ("a pod bound", _ganged(bound_pods=1), ActionKind.NOTHING),
    ("no room: waiting for capacity, not stalled", _ganged(room_gpus=2), ActionKind.NOTHING),
    ("room not known", _ganged(room_gpus=None), ActionKind.NOTHING),
    ("no gang mechanism", _ganged(gang_mechanism="none"), ActionKind.NOTHING),
    ("CPU only: its pods are not seen", _ganged(replace(WAITING, gpus=0)), ActionKind.NOTHING),
    ("once started, never stalled", _ganged(replace(WAITING, started_at=NOW - 100)),
     ActionKind.NOTHING),
    ("already said", _ganged(replace(WAITING, gang_stalled=True)), ActionKind.NOTHING),
    ("said, pods bound since", _ganged(replace(WAITING, gang_stalled=True), bound_pods=3),
     ActionKind.CLEAR_STALL),
    ("said, running since", _ganged(
        replace(WAITING, gang_stalled=True, generic_status="running", phase=Phase.RUNNING),
        generic="running"), ActionKind.CLEAR_STALL),
    ("off", replace(_ganged(), rules=Rules(gang_stall_after=0)), ActionKind.NOTHING),
])
def test_gang_stall(name: str, snap: Snapshot, wanted: ActionKind) -> None:
    assert decide(snap).kind is wanted, name


def test_a_stall_names_the_numbers_and_the_wait_is_until_its_deadline() -> None:
    action = decide(_ganged())
    assert "no pod of the copy bound on m1 200s after submission" in action.reason
    assert "8 GPUs there for its 4" in action.reason and "workload-api" in action.reason
    waiting = decide(_ganged(replace(WAITING, submitted_at=NOW - 60)))
    assert waiting.recheck_after == pytest.approx(60)
    both = decide(replace(_ganged(replace(WAITING, submitted_at=NOW - 60)),
                          rules=Rules(gang_stall_after=120, stuck_after=100)))
    assert both.recheck_after == pytest.approx(40)  # the earlier deadline


# -- a placed workload that stops being held on a shared hub (row 10a) ---------------------

UNHELD = "created without the hub hold (.spec.paused: True)"


@pytest.mark.parametrize(("name", "snap", "wanted"), [
    ("not started, if-not-started: the copy goes, terminal", Snapshot(
        now=NOW, workload=workload(), record=SUBMITTED, copy=OURS, unheld=UNHELD),
     ActionKind.FAIL),
    ("running, if-not-started: said, the copy stays", Snapshot(
        now=NOW, workload=workload(), record=RUNNING, unheld=UNHELD,
        copy=replace(OURS, generic="running")), ActionKind.REPORT_NOT_HELD),
    ("running, said already: mirrored on", Snapshot(
        now=NOW, workload=workload(), record=replace(RUNNING, not_held=True), unheld=UNHELD,
        copy=replace(OURS, status={"a": 1}, generic="running")), ActionKind.MIRROR),
    ("running, always: the copy goes", Snapshot(
        now=NOW, workload=workload(), record=RUNNING, unheld=UNHELD,
        copy=replace(OURS, generic="running"), rules=Rules(policy="always")),
     ActionKind.FAIL),
    ("not started, never: said only", Snapshot(
        now=NOW, workload=workload(), record=SUBMITTED, copy=OURS, unheld=UNHELD,
        rules=Rules(policy="never")), ActionKind.REPORT_NOT_HELD),
    ("copy gone before it started: never submitted again", Snapshot(
        now=NOW, workload=workload(), record=SUBMITTED, copy=Copy(state=CopyState.ABSENT),
        unheld=UNHELD), ActionKind.FAIL),
    ("finished: its result stands", Snapshot(
        now=NOW, workload=workload(status={"a": 1}), record=COMPLETED, unheld=UNHELD,
        copy=replace(OURS, status={"a": 1}, generic="completed")), ActionKind.NOTHING),
    # row 1a: uncached, the hub has it out of the watched scope (``unheld`` says so)
    ("out of scope, not started: the copy goes, terminal", Snapshot(
        now=NOW, workload=None, record=SUBMITTED, copy=OURS, unheld=UNHELD),
     ActionKind.FAIL),
    ("out of scope, running, never: said", Snapshot(
        now=NOW, workload=None, record=RUNNING, copy=replace(OURS, generic="running"),
        unheld=UNHELD, rules=Rules(policy="never")), ActionKind.REPORT_NOT_HELD),
    ("out of scope, said already: nothing more", Snapshot(
        now=NOW, workload=None, record=replace(RUNNING, not_held=True), unheld=UNHELD,
        copy=replace(OURS, generic="running"), rules=Rules(policy="never")),
     ActionKind.NOTHING),
    ("out of scope, copy not seen yet: nothing", Snapshot(
        now=NOW, workload=None, record=SUBMITTED, copy=Copy(state=CopyState.UNKNOWN),
        unheld=UNHELD), ActionKind.NOTHING),
    ("uncached, in scope (not listed yet): nothing", Snapshot(
        now=NOW, workload=None, record=SUBMITTED, copy=OURS), ActionKind.NOTHING),
])
def test_not_held(name: str, snap: Snapshot, wanted: ActionKind) -> None:
    action = decide(snap)
    assert action.kind is wanted, (name, action)
    if wanted in (ActionKind.FAIL, ActionKind.REPORT_NOT_HELD):
        assert UNHELD in action.reason


# -- a copy on a Kueue member: its admission (rows 16a/16b and the MemberAdmitted mirror) ---

QUEUED = replace(SUBMITTED, phase=Phase.SUBMITTED, generic_status="pending",
                 submitted_at=NOW - 100)
WAITS = Admission(PENDING, "Pending", "couldn't assign flavors to pod set worker")
EVICTS = Admission(EVICTED, "Preempted: InClusterQueue", "Preempted to accommodate a workload",
                   "team-a")
ADMITS = Admission(ADMITTED, "Admitted", "", "team-a")


def _queued(record_: DispatchRecord = QUEUED, admission: Admission | None = WAITS,
            generic: str = "pending", **rules: Any) -> Snapshot:
    said = admission_said(replace(OURS, admission=admission), "m1")
    return Snapshot(now=NOW, workload=workload(status={}),
                    record=replace(record_, admission=said),
                    copy=replace(OURS, generic=generic, status={}, admission=admission),
                    rules=Rules(**{"unadmitted_after": 300, **rules}))


@pytest.mark.parametrize(("name", "snap", "wanted"), [
    ("waiting for quota, within the bound", _queued(), ActionKind.WAIT),
    ("waiting for quota past the bound", _queued(replace(QUEUED, submitted_at=NOW - 400)),
     ActionKind.REQUEUE),
    ("past the bound, attempts used up", _queued(replace(QUEUED, submitted_at=NOW - 400,
                                                         attempt=3)), ActionKind.FAIL),
    ("the bound off", _queued(replace(QUEUED, submitted_at=NOW - 400), unadmitted_after=0),
     ActionKind.NOTHING),
    ("evicted: moves at once", _queued(admission=EVICTS), ActionKind.REQUEUE),
    ("evicted after it ran: moves too (its pods are gone)",
     _queued(replace(QUEUED, started_at=NOW - 50), admission=EVICTS), ActionKind.REQUEUE),
    ("evicted, policy never: stays", _queued(admission=EVICTS, policy="never"),
     ActionKind.NOTHING),
    ("evicted once finished: never run again",
     _queued(replace(COMPLETED, admission=None), admission=EVICTS, generic="completed"),
     ActionKind.NOTHING),
    ("admitted: in sync", _queued(RUNNING, admission=ADMITS, generic="running"),
     ActionKind.NOTHING),
    ("no Kueue: as before", _queued(admission=None), ActionKind.NOTHING),
])
def test_a_copy_on_a_kueue_member(name: str, snap: Snapshot, wanted: ActionKind) -> None:
    assert decide(snap).kind is wanted, name


def test_an_admission_change_is_mirrored_and_an_eviction_says_why_it_moves() -> None:
    changed = replace(_queued(), copy=replace(_queued().copy, admission=ADMITS))
    assert decide(changed).kind is ActionKind.MIRROR
    moved = decide(_queued(admission=EVICTS))
    assert moved.reason == ("evicted by m1's Kueue (Preempted: InClusterQueue): Preempted to "
                            "accommodate a workload; moving it (failover.policy "
                            "if-not-started)")
    assert decide(_queued()).recheck_after == pytest.approx(200)
