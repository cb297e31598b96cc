"""Reservations: held per node in the capacity, shrunk by pods, released, expired, rebuilt."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.control.core.copies import build_copy
from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.reservations import (
    HUB_UID_LABEL,
    MemberReservations,
    Reservation,
    pod_owner,
    restore,
)
from dispatcher.workloads.catalog import Catalog

from .objects import node, pod


def _cluster() -> tuple[ClusterCapacity, MemberReservations]:
    cap = ClusterCapacity()
    for name in ("n1", "n2"):
        cap.upsert_node(node(name, 8))
    return cap, MemberReservations(member="m1", capacity=cap)


def _res(uid: str, nodes: tuple[tuple[str, int], ...], expires: float = 100.0) -> Reservation:
    return Reservation(workload_uid=uid, member="m1", nodes=nodes, expires_at=expires)


def test_reservation_lowers_free_until_released() -> None:
    cap, book = _cluster()
    book.add(_res("w1", (("n1", 8), ("n2", 4))))
    assert cap.free == 4 and cap.largest_free_block == 4
    assert book.release("w1") is not None
    assert cap.free == 16 and len(book) == 0


def _bind(cap: ClusterCapacity, book: MemberReservations, name: str, uid: str | None, *,
          node_name: str, gpus: int) -> dict[str, Any]:
    """What the connection does for a pod event: capacity first, then reservations."""
    raw = pod(name, gpus, node_name=node_name)
    if uid is not None:
        raw["metadata"]["labels"] = {HUB_UID_LABEL: uid}
    cap.upsert_pod(raw)
    book.upsert_pod(raw)
    return raw


def test_bound_pods_shrink_the_reservation_once_and_end_it() -> None:
    cap, book = _cluster()
    book.add(_res("w1", (("n1", 8), ("n2", 4))))
    assert cap.free == 4
    raw = _bind(cap, book, "p1", "w1", node_name="n2", gpus=4)
    assert book.get("w1") == _res("w1", (("n1", 8),)) and cap.free == 4
    book.upsert_pod(raw)  # the watch repeats itself: taken once only
    assert book.get("w1") == _res("w1", (("n1", 8),))
    cap.delete_pod(raw)
    book.delete_pod(raw)  # a finished pod gives nothing back to the reservation
    assert book.get("w1") == _res("w1", (("n1", 8),)) and cap.free == 8
    _bind(cap, book, "p2", "w1", node_name="n1", gpus=8)
    assert "w1" not in book and cap.free == 8 and cap.reserved == 0


def test_bound_counts_each_workloads_bound_pods_through_every_event() -> None:
    """``bound`` (the GangStalled rows' input) follows binds, finishes, deletes and
    re-lists, and counts a repeated event once."""
    cap, book = _cluster()
    assert book.bound("w1") == 0
    first = _bind(cap, book, "p1", "w1", node_name="n1", gpus=2)
    _bind(cap, book, "p2", "w1", node_name="n2", gpus=2)
    _bind(cap, book, "p3", "w2", node_name="n2", gpus=2)
    book.upsert_pod(first)  # a repeated event
    assert (book.bound("w1"), book.bound("w2")) == (2, 1)
    done = {**first, "status": {"phase": "Succeeded"}}
    book.upsert_pod(done)
    assert book.bound("w1") == 1
    book.delete_pod("team-a/p2")
    assert book.bound("w1") == 0
    book.relist_pods([pod("p9", 2, node_name="n1") | {"metadata": {
        "name": "p9", "namespace": "team-a", "labels": {HUB_UID_LABEL: "w1"}}}])
    assert (book.bound("w1"), book.bound("w2")) == (1, 0)


def test_unlabelled_and_unbound_pods_do_not_shrink() -> None:
    cap, book = _cluster()
    book.add(_res("w1", (("n1", 8),)))
    _bind(cap, book, "foreign", None, node_name="n2", gpus=4)
    pending = pod("p1", 8)
    pending["metadata"]["labels"] = {HUB_UID_LABEL: "w1"}
    book.upsert_pod(pending)
    assert book.get("w1") == _res("w1", (("n1", 8),)) and cap.free == 4


def test_off_plan_pod_swaps_with_the_reservation_it_displaced() -> None:
    cap = ClusterCapacity()
    for name in ("n1", "n2", "n3"):
        cap.upsert_node(node(name, 8))
    book = MemberReservations(member="m1", capacity=cap)
    book.add(_res("w", (("n1", 8), ("n2", 8))))
    book.add(_res("x", (("n3", 8),)))
    assert cap.free == 0
    # The scheduler put w's pod on x's node: x's slot moves to the one w vacated.
    _bind(cap, book, "w-0", "w", node_name="n3", gpus=8)
    assert book.get("w") == _res("w", (("n2", 8),))
    assert book.get("x") == _res("x", (("n1", 8),))
    assert cap.free == 0 and cap.reserved == 16
    assert all(s.used + s.reserved <= s.allocatable for s in cap.nodes())


def test_rebuilt_reservation_accounts_for_pods_already_bound() -> None:
    cap, book = _cluster()
    _bind(cap, book, "p1", "w1", node_name="n1", gpus=4)  # bound before the controller (re)started
    restore([(_res("w1", (("n1", 8), ("n2", 4))), "m1")], lambda _: book, now=0.0)
    assert book.get("w1") == _res("w1", (("n1", 4), ("n2", 4)))
    assert cap.free == 16 - 4 - 8


def test_owner_label_is_the_copies_pod_label() -> None:
    """A pod made from a copy's template is attributed to the hub workload: the label
    ``build_copy`` stamps on pod templates is the one ``pod_owner`` reads."""
    hub = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "j", "namespace": "ns", "uid": "uid-1"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}],
                                          "restartPolicy": "Never"}}}}
    copy = build_copy(hub, hub_id="hub-a", definition=Catalog.builtin().find("batch/v1", "Job"))
    member_pod = pod("p1", 1, node_name="n1")
    member_pod["metadata"]["labels"] = dict(copy["spec"]["template"]["metadata"]["labels"])
    assert pod_owner(member_pod) == "uid-1"
    assert pod_owner(pod("p2", 1, node_name="n1")) is None


def test_expiry_uses_the_given_time_only() -> None:
    cap, book = _cluster()
    book.add(_res("old", (("n1", 2),), expires=10.0))
    book.add(_res("new", (("n1", 2),), expires=20.0))
    assert [r.workload_uid for r in book.expire(10.0)] == ["old"]
    assert cap.free == 14
    assert book.expire(15.0) == ()


def test_replacing_a_workloads_reservation_does_not_double_count() -> None:
    cap, book = _cluster()
    book.add(_res("w1", (("n1", 4),)))
    book.add(_res("w1", (("n2", 2),)))
    assert cap.free == 14


def test_restore_from_records_skips_expired_moved_and_unknown_members() -> None:
    cap, book = _cluster()
    records = [_res("w1", (("n1", 4),), expires=50.0), _res("gone", (("n2", 4),), expires=5.0),
               _res("moved", (("n2", 2),), expires=50.0),
               Reservation(workload_uid="w2", member="m2", nodes=(("n2", 8),), expires_at=50.0)]
    round_tripped = [Reservation.from_dict(r.to_dict()) for r in records]
    clusters = ["m1", "m1", "elsewhere", "m2"]  # the member each record's decision names now
    added = restore(zip(round_tripped, clusters, strict=True),
                    lambda m: book if m == "m1" else None, now=10.0)
    assert added == 1
    assert [r.workload_uid for r in book.records()] == ["w1"]
    assert cap.free == 12


def test_bad_record_names_the_problem() -> None:
    with pytest.raises(ValueError, match="invalid reservation record"):
        Reservation.from_dict({"workloadUID": "w", "member": "m", "nodes": [{"node": "n"}]})


_UIDS = ("w1", "w2", "w3")
_NODES = ("n1", "n2", "n3")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "bind", "delete", "release", "expire"]),
                          st.sampled_from(_UIDS), st.sampled_from(_NODES),
                          st.integers(min_value=0, max_value=8), st.integers(0, 5)),
                max_size=40))
def test_free_is_capacity_minus_bound_minus_outstanding(
        ops: list[tuple[str, str, str, int, int]]) -> None:
    """Any interleaving of reserve / pod bound / pod deleted / release / expire.

    The model: a reservation's outstanding GPUs are its plan less the GPUs of the distinct
    pods of its workload bound since it was added (or already bound then). Reservations
    are only made where placement would (within free GPUs); pods bind only where the
    scheduler would (allocatable - bound, ignoring reservations).
    """
    cap = ClusterCapacity()
    for name in _NODES:
        cap.upsert_node(node(name, 8))
    book = MemberReservations(member="m1", capacity=cap)
    bound: dict[str, tuple[str, str, int]] = {}  # pod -> (uid, node, gpus)
    planned: dict[str, int] = {}
    taken: dict[str, dict[str, int]] = {}  # uid -> pod -> gpus taken into account
    covered = True  # every bound pod fit in what its workload still held
    clock = 0.0
    for op, uid, node_name, gpus, serial in ops:
        clock += 1
        state = cap.node(node_name)
        assert state is not None
        if op == "add":
            amount = min(gpus, state.free)
            book.add(_res(uid, ((node_name, amount),), expires=clock + 3))
            if amount:
                planned[uid] = amount
                taken[uid] = {k: g for k, (u, _, g) in bound.items() if u == uid}
            else:
                planned.pop(uid, None)
        elif op == "bind":
            key = f"team-a/{uid}-{serial}"
            if key in bound or gpus == 0 or state.allocatable - state.used < gpus:
                continue
            left = planned[uid] - sum(taken[uid].values()) if uid in book else 0
            covered = covered and left >= gpus
            _bind(cap, book, key.split("/")[1], uid, node_name=node_name, gpus=gpus)
            bound[key] = (uid, node_name, gpus)
            if uid in taken:
                taken[uid][key] = gpus
        elif op == "delete":
            key = f"team-a/{uid}-{serial}"
            cap.delete_pod(key)
            book.delete_pod(key)
            bound.pop(key, None)
        elif op == "release":
            book.release(uid)
        else:
            book.expire(clock)
        for gone in [u for u in planned if u not in book]:
            del planned[gone], taken[gone]
        outstanding = {u: max(planned[u] - sum(taken[u].values()), 0) for u in planned}
        assert {r.workload_uid: r.gpus for r in book.records()} == {
            u: g for u, g in outstanding.items() if g > 0}
        nodes = list(cap.nodes())
        assert sum(s.used for s in nodes) == sum(g for _, _, g in bound.values())
        assert sum(s.reserved for s in nodes) == sum(outstanding.values()) == cap.reserved
        assert cap.free == sum(max(s.allocatable - s.used - s.reserved, 0) for s in nodes)
        assert cap.free >= 0
        if covered:  # nothing counted twice, nothing lost to a node's clamp
            assert cap.free == 24 - sum(s.used for s in nodes) - cap.reserved


def test_pods_of_a_copy_someone_else_made_are_attributed_by_their_frameworks_label() -> None:
    """A copy MultiKueue made carries no hub-uid label: its Job's pods are known by the
    job-name label in the namespace the attribution names, nowhere else."""
    cap, book = _cluster()
    book.add(_res("w1", (("n1", 8),)))
    book.attribute(namespace="default", label="batch.kubernetes.io/job-name", value="train",
                   workload_uid="w1")
    other = pod("elsewhere", 4, node_name="n1")
    other["metadata"].update(namespace="team-b",
                             labels={"batch.kubernetes.io/job-name": "train"})
    cap.upsert_pod(other)
    book.upsert_pod(other)
    assert book.get("w1") == _res("w1", (("n1", 8),))  # another namespace's Job
    for index in range(2):
        raw = pod(f"train-{index}", 4, node_name="n1")
        raw["metadata"].update(namespace="default",
                               labels={"batch.kubernetes.io/job-name": "train"})
        cap.upsert_pod(raw)
        book.upsert_pod(raw)
    assert "w1" not in book and cap.reserved == 0
    book.release("w1")  # the workload is done with: its attribution goes with it
    late = pod("train-late", 4, node_name="n2")
    late["metadata"].update(namespace="default", labels={"batch.kubernetes.io/job-name": "train"})
    cap.upsert_pod(late)
    book.upsert_pod(late)
    assert book.bound("w1") == 2  # the two seen before, not the late one
