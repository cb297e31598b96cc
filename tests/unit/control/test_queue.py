"""PendingQueue: order (priority, then age) and bounded backfill.

Covered: ordering, gate before/after the limit, placement of the head releasing the gate,
a property that nothing passes a workload bypassed ``limit`` times. Left out: the shell.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.control.queue import Entry, PendingQueue, priority_of


def entry(uid: str, *, priority: int = 0, created: float = 0.0) -> Entry:
    return Entry(uid=uid, priority=priority, created=created)


def test_priority_then_age() -> None:
    q = PendingQueue(backfill_limit=3)
    for e in (entry("old", created=1), entry("new", created=2), entry("vip", priority=5,
                                                                        created=3)):
        q.add(e)
    assert [e.uid for e in q.ordered()] == ["vip", "old", "new"]


def test_gate_after_limit_and_release_when_head_placed() -> None:
    q = PendingQueue(backfill_limit=2)
    big = entry("big", created=1)
    q.add(big)
    small = [entry(f"s{i}", created=10 + i) for i in range(3)]
    assert q.gate(small[0]) is None
    q.placed(small[0])
    assert q.gate(small[1]) is None
    q.placed(small[1])
    assert q.bypasses("big") == 2
    assert q.gate(small[2]) == big
    q.placed(big)
    assert q.gate(small[2]) is None


def test_higher_priority_is_never_gated_by_lower() -> None:
    q = PendingQueue(backfill_limit=0)
    q.add(entry("low", created=1))
    assert q.gate(entry("high", priority=1, created=2)) is None


def test_priority_annotation() -> None:
    assert priority_of({"dispatcher.io/priority": "7"}) == 7
    assert priority_of({"dispatcher.io/priority": "x"}) == 0
    assert priority_of(None) == 0


@given(limit=st.integers(0, 5), arrivals=st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_nothing_passes_a_saturated_waiter(limit: int, arrivals: list[int]) -> None:
    q = PendingQueue(backfill_limit=limit)
    q.add(entry("head", priority=1, created=0))
    for i, priority in enumerate(arrivals):
        e = entry(f"w{i}", priority=priority, created=i + 1)
        if q.gate(e) is None:
            q.placed(e)
    assert q.bypasses("head") <= limit


def test_restrict_explains_excluded_and_namespace_bound_members() -> None:
    from dispatcher.control.reconcile import restrict
    from dispatcher.fleet.capacity import ClusterCapacity
    from dispatcher.placement.model import MemberSnapshot

    members = [MemberSnapshot(name=n, capacity=ClusterCapacity()) for n in ("a", "b", "c")]
    allowed = {"a": (), "b": ("prod",), "c": ("team",)}
    out = {m.name: m for m in restrict(members, excluded=("a",), namespace="team",
                                       allowed=lambda n: allowed[n])}
    assert not out["a"].ready and "earlier attempt" in out["a"].not_ready_reason
    assert not out["b"].ready and "namespace team" in out["b"].not_ready_reason
    assert out["c"].ready
