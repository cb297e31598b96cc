"""Reservations: held per node in the capacity, shrunk by pods, released, expired, rebuilt."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.reservations import MemberReservations, Reservation

from .objects import node


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


def test_pods_appearing_shrink_the_reservation_even_off_plan() -> None:
    cap, book = _cluster()
    book.add(_res("w1", (("n1", 8), ("n2", 4))))
    book.observe_pod(workload_uid="w1", node="n2", gpus=4)
    assert book.get("w1") == _res("w1", (("n1", 8),))
    # The member's scheduler chose another node: release from the largest entry.
    book.observe_pod(workload_uid="w1", node="elsewhere", gpus=8)
    assert "w1" not in book and cap.free == 16


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


def test_rebuild_from_records_skips_expired_and_other_members() -> None:
    cap, book = _cluster()
    book.add(_res("stale", (("n1", 8),)))
    records = [_res("w1", (("n1", 4),), expires=50.0), _res("gone", (("n2", 4),), expires=5.0),
               Reservation(workload_uid="w2", member="m2", nodes=(("n2", 8),), expires_at=50.0)]
    round_tripped = [Reservation.from_dict(r.to_dict()) for r in records]
    book.rebuild(round_tripped, now=10.0)
    assert [r.workload_uid for r in book.records()] == ["w1"]
    assert cap.free == 12


def test_bad_record_names_the_problem() -> None:
    with pytest.raises(ValueError, match="invalid reservation record"):
        Reservation.from_dict({"workloadUID": "w", "member": "m", "nodes": [{"node": "n"}]})


@given(st.lists(st.tuples(st.sampled_from(["add", "release", "pod", "expire"]),
                          st.sampled_from(["w1", "w2", "w3"]),
                          st.sampled_from(["n1", "n2", "n3"]),
                          st.integers(min_value=0, max_value=8)), max_size=30))
def test_capacity_reserved_always_equals_live_records(ops: list[tuple[str, str, str, int]]
                                                      ) -> None:
    cap, book = _cluster()
    clock = 0.0
    for op, uid, node_name, gpus in ops:
        clock += 1
        if op == "add":
            book.add(_res(uid, ((node_name, gpus), ("n1", 1)), expires=clock + gpus))
        elif op == "release":
            book.release(uid)
        elif op == "pod":
            book.observe_pod(workload_uid=uid, node=node_name, gpus=gpus)
        else:
            book.expire(clock)
        held: dict[str, int] = {}
        for record in book.records():
            assert all(g > 0 for _, g in record.nodes)
            for name, g in record.nodes:
                held[name] = held.get(name, 0) + g
        for name in ("n1", "n2"):
            state = cap.node(name)
            assert state is not None and state.reserved == held.get(name, 0)
