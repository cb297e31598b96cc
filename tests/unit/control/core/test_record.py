"""Dispatch record: statuses read back as the record they describe; copies and leases.

Covered: placed/submitted/requeued/failed status patches read back through ``read``;
condition merging keeps transition times; copy building strips server fields and stamps
ownership; ``owner_state`` and ``stamped``; the Lease rule ``is_free``. Left out: I/O.
"""

from __future__ import annotations

from typing import Any

from dispatcher.control.core import record
from dispatcher.control.core.copies import build_copy, owner_state, stamped
from dispatcher.control.core.decide import CopyState
from dispatcher.control.core.names import (
    HUB_OBJECT_ANNOTATION,
    HUB_UID_ANNOTATION,
    ORIGIN_LABEL,
    PendingReason,
    Phase,
)
from dispatcher.control.leader import is_free
from dispatcher.fleet.reservations import Reservation
from dispatcher.kube.patches import apply_merge
from dispatcher.placement.model import Decision, NodeGrant, Verdict

NOW = 1_800_000_000.0


def base() -> dict[str, Any]:
    workload = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "t", "namespace": "ns", "uid": "u1"}}
    return record.dispatch_body(workload=workload, name=record.dispatch_name(workload))


def with_status(obj: dict[str, Any], status: dict[str, Any]) -> dict[str, Any]:
    return apply_merge(obj, {"status": status})  # type: ignore[no-any-return]


def decision() -> Decision:
    return Decision(policy="most-free", pods=2, gpus=8, gangs=1,
                    verdicts=(Verdict(member="m1", feasible=True, reason="fits", free=16,
                                      score=8.0),),
                    chosen="m1", assignment=(NodeGrant(node="n1", gpus=8, pods=2),),
                    summary="placed on m1")


def test_body_is_owned_by_the_workload() -> None:
    obj = base()
    assert obj["metadata"]["name"] == "jobset-t"
    assert obj["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert record.read(obj).workload_uid == "u1"


def test_placed_then_submitted_then_requeued_then_failed_read_back() -> None:
    res = Reservation(workload_uid="u1", member="m1", nodes=(("n1", 8),), expires_at=NOW + 60)
    obj = with_status(base(), record.placed_status(decision=decision(), reservation=res,
                                                   attempt=1, now=NOW))
    placed = record.read(obj)
    assert (placed.phase, placed.cluster, placed.attempt, placed.reservation) == (
        Phase.PLACED, "m1", 1, res)
    assert placed.decided_at == NOW
    obj = with_status(obj, record.submitted_status(cluster="m1", remote_uid="r",
                                                   now=NOW + 1, adopted=False))
    assert record.read(obj).submitted_at == NOW + 1
    obj = with_status(obj, record.requeued_status(record=record.read(obj), reason="lost",
                                                  outcome="requeued", now=NOW + 2))
    requeued = record.read(obj)
    assert (requeued.phase, requeued.cluster, requeued.excluded) == (Phase.PENDING, None,
                                                                    ("m1",))
    assert requeued.attempt == 1 and len(requeued.history) == 1
    obj = with_status(obj, record.failed_status(record=requeued, reason="no", now=NOW + 3))
    assert record.read(obj).failure == "no"


def created_with_the_decision(res: Reservation) -> dict[str, Any]:
    workload = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                "metadata": {"name": "t", "namespace": "ns", "uid": "u1"}}
    demand = {"demand": {"pods": 2, "gpus": 8, "gangs": []}, "definition": "jobset"}
    placed = record.first_placement(decision=decision(), reservation=res, now=NOW,
                                    demand=demand)
    return record.dispatch_body(workload=workload, name=record.dispatch_name(workload),
                                placed=placed)


def test_a_record_created_with_its_decision_reads_as_placed_before_any_status() -> None:
    """The create alone is what a restarted controller needs: member, attempt and
    reservation (restored), and the status fields the Submitted write will copy."""
    res = Reservation(workload_uid="u1", member="m1", nodes=(("n1", 8),), expires_at=NOW + 60)
    obj = created_with_the_decision(res)
    assert "status" not in obj
    first = record.read(obj)
    assert (first.phase, first.cluster, first.attempt, first.reservation) == ("", "m1", 1, res)
    assert first.decided_at == NOW and first.summary == "placed on m1"
    assert first.unsettled is not None
    settled = record.settled_status(first, NOW + 1)
    assert settled["decision"]["cluster"] == "m1"
    assert settled["demand"]["gpus"] == 8 and settled["definition"] == "jobset"
    assert {c["type"] for c in settled["conditions"]} == {"Placed", "Resolved"}
    obj = with_status(obj, {**settled, **record.submitted_status(
        cluster="m1", remote_uid="r", now=NOW + 1, adopted=False)})
    after = record.read(obj)
    assert after.unsettled is None and record.settled_status(after, NOW + 2) == {}
    assert (after.cluster, after.attempt, after.reservation) == ("m1", 1, res)


def test_a_requeue_after_a_decision_made_at_create_leaves_no_member_chosen() -> None:
    res = Reservation(workload_uid="u1", member="m1", nodes=(("n1", 8),), expires_at=NOW + 60)
    obj = created_with_the_decision(res)
    obj = with_status(obj, record.requeued_status(record=record.read(obj), reason="refused",
                                                  outcome="rejected", now=NOW + 1))
    requeued = record.read(obj)
    assert (requeued.cluster, requeued.reservation, requeued.excluded) == (None, None, ("m1",))
    assert requeued.attempt == 1 and requeued.unsettled is None
    again = with_status(obj, record.placed_status(decision=decision(), reservation=None,
                                                  attempt=2, now=NOW + 2))
    assert (record.read(again).cluster, record.read(again).attempt) == ("m1", 2)


def test_pending_after_a_requeue_never_brings_the_first_decision_back() -> None:
    res = Reservation(workload_uid="u1", member="m1", nodes=(("n1", 8),), expires_at=NOW + 60)
    obj = created_with_the_decision(res)
    obj = with_status(obj, record.requeued_status(record=record.read(obj), reason="refused",
                                                  outcome="rejected", now=NOW + 1))
    requeued = record.read(obj)
    obj = with_status(obj, record.pending_status(message="full", now=NOW + 2,
                                                 reason=PendingReason.NO_FEASIBLE_MEMBER,
                                                 attempt=requeued.attempt))
    pending = record.read(obj)
    assert (pending.phase, pending.cluster, pending.reservation) == ("Pending", None, None)
    assert pending.attempt == 1


def test_pending_keeps_what_its_message_means_and_when_it_was_written() -> None:
    obj = with_status(base(), record.pending_status(message="full", now=NOW + 2, key="k1",
                                            reason=PendingReason.NO_FEASIBLE_MEMBER))
    pending = record.read(obj)
    assert (pending.pending_key, pending.pending_written_at) == ("k1", NOW + 2)
    assert (pending.pending_message, pending.pending_reason) == ("full", "NoFeasibleMember")
    older = record.read(base())
    assert (older.pending_key, older.pending_written_at) == ("", None)
    placed = record.read(with_status(obj, record.placed_status(
        decision=decision(), reservation=None, attempt=1, now=NOW + 3)))
    assert (placed.pending_key, placed.pending_written_at) == ("", None)


def test_a_status_leftover_without_an_attempt_never_hides_the_first_decision() -> None:
    res = Reservation(workload_uid="u1", member="m1", nodes=(("n1", 8),), expires_at=NOW + 60)
    obj = with_status(created_with_the_decision(res), {"decision": {"reservation": None}})
    assert record.decision_of(obj)["cluster"] == "m1"
    assert record.read(obj).cluster == "m1"


def test_conditions_keep_transition_time_when_status_unchanged() -> None:
    old = [record.condition(type_="Placed", status=False, reason="A", message="x", now=NOW)]
    new = [record.condition(type_="Placed", status=False, reason="B", message="y",
                            now=NOW + 5)]
    (merged,) = record.merge_conditions(old, new)
    assert merged["lastTransitionTime"] == old[0]["lastTransitionTime"]
    assert merged["message"] == "y"


def test_time_round_trip() -> None:
    assert record.parse_time(record.format_time(NOW + 0.25)) == NOW + 0.25
    assert record.parse_time("nonsense") is None


def test_copy_is_stripped_and_stamped() -> None:
    hub = {"apiVersion": "v1x", "kind": "K", "status": {"a": 1},
           "metadata": {"name": "t", "namespace": "ns", "uid": "u1", "resourceVersion": "9",
                        "finalizers": ["f"], "ownerReferences": [{}], "managedFields": [{}],
                        "creationTimestamp": "x", "labels": {"k": "v"},
                        "annotations": {"kubectl.kubernetes.io/last-applied-configuration":
                                        "{}"}},
           "spec": {"x": 1}}
    copy = build_copy(hub, hub_id="h", definition=None)
    meta = copy["metadata"]
    assert "status" not in copy and copy["spec"] == {"x": 1}
    assert not {"uid", "resourceVersion", "finalizers", "ownerReferences", "managedFields",
                "creationTimestamp"} & set(meta)
    assert meta["labels"][ORIGIN_LABEL] == "h" and meta["labels"]["k"] == "v"
    assert meta["annotations"] == {HUB_UID_ANNOTATION: "u1", HUB_OBJECT_ANNOTATION: "K/t"}
    assert hub["metadata"]["uid"] == "u1"  # input untouched
    assert stamped(copy, hub_id="h") == "u1"
    assert stamped(copy, hub_id="other") is None
    assert owner_state(copy, hub_id="h", hub_uid="u1") is CopyState.OURS
    assert owner_state(copy, hub_id="h", hub_uid="u2") is CopyState.FOREIGN
    assert owner_state(None, hub_id="h", hub_uid="u1") is CopyState.ABSENT


def test_lease_rule() -> None:
    lease = {"spec": {"holderIdentity": "a", "leaseDurationSeconds": 10,
                      "renewTime": record.format_time(NOW)}}
    assert is_free(None, identity="b", now=NOW)
    assert is_free(lease, identity="a", now=NOW + 1)
    assert not is_free(lease, identity="b", now=NOW + 9)
    assert is_free(lease, identity="b", now=NOW + 10)


def test_pending_for_a_workload_that_cannot_resolve_says_resolved_false() -> None:
    for reason in (PendingReason.RESOLVE_FAILED, PendingReason.INVALID_TEMPLATE):
        status = record.pending_status(message="invalid pod template: spec.a: bad",
                                       reason=reason, now=0.0)
        by_type = {c["type"]: c for c in status["conditions"]}
        assert by_type["Placed"]["status"] == by_type["Resolved"]["status"] == "False"
        assert by_type["Resolved"]["reason"] == reason
        assert by_type["Resolved"]["message"] == "invalid pod template: spec.a: bad"
    queued = record.pending_status(message="waiting behind x", reason=PendingReason.QUEUED,
                                   now=0.0)
    assert {c["type"]: c["status"] for c in queued["conditions"]} == {
        "Placed": "False", "Resolved": "True"}


def test_a_placement_says_resolved_true_over_an_earlier_resolved_false() -> None:
    """A Dispatch parked Resolved=False (its definition quarantined) and then placed
    through the fallback definition: the merged conditions say Resolved=True."""
    parked = record.pending_status(message="cannot resolve: definition x quarantined",
                                   reason=PendingReason.RESOLVE_FAILED, now=0.0)
    placed = record.placed_status(decision=decision(), reservation=None, attempt=1, now=5.0)
    merged = record.merge_conditions(parked["conditions"], placed["conditions"])
    by_type = {c["type"]: c for c in merged}
    assert by_type["Placed"]["status"] == by_type["Resolved"]["status"] == "True"
    assert by_type["Resolved"]["reason"] == "Resolved" and by_type["Resolved"]["message"] == ""


def test_a_stalled_gang_and_the_demands_gpus_read_back() -> None:
    obj = with_status(base(), {"demand": {"pods": 5, "gpus": 4}, "conditions": [
        record.condition(type_="GangStalled", status=True, reason="NoPodBound",
                         message="m", now=NOW)]})
    read = record.read(obj)
    assert read.gang_stalled and read.gpus == 4
    cleared = record.read(with_status(obj, {"conditions": [record.condition(
        type_="GangStalled", status=False, reason="PodsBound", message="m", now=NOW)]}))
    assert not cleared.gang_stalled
    at_create = apply_merge(base(), {"spec": {"demand": {"gpus": 8}}})
    assert record.read(at_create).gpus == 8 and record.read(base()).gpus is None


def test_a_move_ends_what_was_said_of_the_member_it_left() -> None:
    """Issue 35: after failover, a Dispatch running on member-1 still said
    ``MemberReachable=False ... member member-2 unreachable``."""
    old = [record.condition(type_="MemberReachable", status=False, reason="MemberLost",
                            message="member member-2 unreachable", now=NOW),
           record.condition(type_="Resolved", status=True, reason="Resolved", message="",
                            now=NOW)]
    base_record = record.read(with_status(base(), {"decision": {"cluster": "member-2",
                                                                "attempt": 1}}))
    moved = record.requeued_status(record=base_record, reason="lost", outcome="requeued",
                                   now=NOW)
    assert record.leaves_member(moved)
    merged = record.merge_conditions(old, moved["conditions"], drop=record.MEMBER_CONDITIONS)
    assert {c["type"] for c in merged} == {"Resolved", "Placed"}
    assert not record.leaves_member({"decision": {"attempt": 2}})  # pending: no member said
    assert not record.leaves_member({"decision": {"cluster": "member-1"}})
