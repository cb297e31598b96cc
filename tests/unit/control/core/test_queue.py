"""PendingQueue: order (priority, then turns across namespaces, then age), bounded backfill
per namespace, parked workloads outside the gate.

Covered: ordering within and across namespaces, gate before/after the limit, placement of
the head releasing the gate, the gate never crossing namespaces (table and property),
parking. Left out: the shell (``tests/integration/test_control_dispatch.py``).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.control.core.queue import Entry, PendingQueue


def entry(uid: str, *, priority: int = 0, created: float = 0.0, ns: str = "a") -> Entry:
    return Entry(uid=uid, priority=priority, created=created, namespace=ns, name=f"{ns}/{uid}")


def test_priority_then_age() -> None:
    q = PendingQueue(backfill_limit=3)
    for e in (entry("old", created=1), entry("new", created=2), entry("vip", priority=5,
                                                                        created=3)):
        q.add(e)
    assert [e.uid for e in q.ordered()] == ["vip", "old", "new"]


def test_namespaces_take_turns_behind_priority() -> None:
    q = PendingQueue(backfill_limit=3)
    for i in range(4):
        q.add(entry(f"a{i}", created=i, ns="a"))  # a burst, all older than b's
    q.add(entry("b0", created=10, ns="b"))
    q.add(entry("b1", created=11, ns="b"))
    q.add(entry("c-vip", priority=1, created=20, ns="c"))
    assert [e.uid for e in q.ordered()] == ["c-vip", "a0", "b0", "a1", "b1", "a2", "a3"]


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


@pytest.mark.parametrize(("blocked", "other", "gated"), [
    (entry("head", ns="a"), entry("w", created=1, ns="a"), True),   # own namespace: held
    (entry("head", ns="a"), entry("w", created=1, ns="b"), False),  # other namespace: free
    (entry("head", ns="a"), entry("w", priority=1, created=1, ns="a"), False),  # outranks
    (entry("head", created=5, ns="a"), entry("w", created=1, ns="a"), False),   # older
])
def test_gate_is_per_namespace(blocked: Entry, other: Entry, gated: bool) -> None:
    q = PendingQueue(backfill_limit=0)  # every waiting workload blocks at once
    q.add(blocked)
    assert (q.gate(other) == blocked) is gated


def test_placing_in_another_namespace_is_not_a_bypass() -> None:
    q = PendingQueue(backfill_limit=1)
    q.add(entry("head", ns="a"))
    for i in range(5):
        q.placed(entry(f"b{i}", created=1 + i, ns="b"))
    assert q.bypasses("head") == 0


def test_parked_workloads_hold_nothing_and_are_listed() -> None:
    q = PendingQueue(backfill_limit=0)
    huge = entry("huge", ns="a")
    q.add(huge)
    assert q.gate(entry("w", created=1, ns="a")) == huge
    q.park(huge, "unplaceable: too big")
    assert q.gate(entry("w", created=1, ns="a")) is None
    assert "huge" in q and len(q) == 1 and q.waiting == 0
    assert q.ordered() == []
    assert q.parked() == [(huge, "unplaceable: too big")]
    q.add(huge)  # the fleet changed: it waits again, with a fresh bypass count
    assert q.parked() == [] and q.bypasses("huge") == 0
    q.remove("huge")
    assert len(q) == 0


def test_re_adding_keeps_the_bypass_count() -> None:
    q = PendingQueue(backfill_limit=5)
    head = entry("head")
    q.add(head)
    q.placed(entry("w", created=1))
    q.add(head)
    assert q.bypasses("head") == 1


@given(limit=st.integers(0, 5), arrivals=st.lists(st.integers(0, 2), min_size=1, max_size=30))
def test_nothing_passes_a_saturated_waiter(limit: int, arrivals: list[int]) -> None:
    q = PendingQueue(backfill_limit=limit)
    q.add(entry("head", priority=1, created=0))
    for i, priority in enumerate(arrivals):
        e = entry(f"w{i}", priority=priority, created=i + 1)
        if q.gate(e) is None:
            q.placed(e)
    assert q.bypasses("head") <= limit


namespaces = st.sampled_from(["a", "b", "c"])
ops = st.lists(st.tuples(st.sampled_from(["add", "placed", "park", "remove"]),
                         st.integers(0, 15), namespaces, st.integers(0, 2)), max_size=60)


@given(limit=st.integers(0, 3), steps=ops)
def test_no_namespace_ever_gates_another(limit: int, steps: list[tuple[str, int, str, int]]
                                         ) -> None:
    q = PendingQueue(backfill_limit=limit)
    for i, (op, n, ns, priority) in enumerate(steps):
        e = entry(f"{ns}{n}", priority=priority, created=float(i), ns=ns)
        if op == "add":
            q.add(e)
        elif op == "placed":
            if q.gate(e) is None:
                q.placed(e)
        elif op == "park":
            q.park(e, "unplaceable: test")
        else:
            q.remove(e.uid)
        for probe_ns in ("a", "b", "c"):
            probe = entry(f"probe-{probe_ns}", created=1e9, ns=probe_ns)
            blocker = q.gate(probe)
            assert blocker is None or blocker.namespace == probe_ns
            assert blocker is None or blocker.uid not in {p.uid for p, _ in q.parked()}
        order = q.ordered()
        assert len(order) == q.waiting == len({e.uid for e in order})


def test_a_claim_is_one_per_member_kept_by_its_claimant_and_goes_with_it() -> None:
    """A member claimed by a waiting workload is barred to everyone behind it, of any
    namespace, and to no one ahead of it; it is released when its claimant leaves."""
    q = PendingQueue(backfill_limit=3)
    gang, small, vip = (entry("gang", created=1, ns="b"), entry("small", created=5, ns="a"),
                        entry("vip", priority=9, created=9, ns="c"))
    for e in (gang, small, vip):
        q.add(e)
    assert q.claim(gang, "m1") and q.claimed_by("gang") == "m1"
    assert q.claims_against(small) == {"m1": gang}  # behind it, another namespace
    assert q.claims_against(vip) == {} and q.claims_against(gang) == {}
    assert not q.claim(small, "m1")  # one claim per member, kept by its claimant
    assert q.claim(gang, "m2") and q.claims() == {"m2": gang}  # it moves, never doubles
    q.add(gang)  # waiting again: the claim is kept
    assert q.claimed_by("gang") == "m2"
    q.placed(gang)
    assert q.claims() == {} and q.claims_against(small) == {}
    assert q.claim(small, "m1")
    q.park(small, "unplaceable")
    assert q.claims() == {}
    assert not q.claim(entry("gone"), "m1")  # not waiting: no claim


def test_a_claim_on_a_member_that_left_the_fleet_is_dropped() -> None:
    q = PendingQueue(backfill_limit=3)
    gang = entry("gang")
    q.add(gang)
    assert q.claim(gang, "gone")
    q.keep_claims(["m1", "m2"])
    assert q.claims() == {} and q.claimed_by("gang") is None


def test_a_saturated_claimant_gates_nothing_and_holds_its_member_for_its_namespace_only(
        ) -> None:
    """Bypassed to its limit, a workload gates its namespace until it claims a member;
    a claim within its namespace bars only that namespace from only that member; waiting
    claimAfter widens it to every namespace (and it stays wide)."""
    q = PendingQueue(backfill_limit=1)
    big = entry("big", created=1, ns="a")
    q.add(big)
    q.placed(entry("s0", created=2, ns="a"))
    mine, theirs = entry("s1", created=3, ns="a"), entry("t1", created=3, ns="b")
    assert q.saturated("big") and q.gate(mine) == big
    assert q.claim(big, "m1", wide=False) and not q.claims_widely("big")
    assert q.gate(mine) is None  # its claim protects it: no gate
    assert q.claims_against(mine) == {"m1": big} and q.claims_against(theirs) == {}
    assert q.claim(big, "m1") and q.claims_widely("big")
    assert q.claims_against(theirs) == {"m1": big}
    assert q.claim(big, "m1", wide=False) and q.claims_widely("big")  # never narrows
    q.keep_claims(["m2"])
    assert q.claimed_by("big") is None and not q.claims_widely("big")
    assert q.gate(mine) == big  # no claim any more: the gate holds again


def test_a_wide_claim_takes_a_member_from_a_narrow_one_never_the_reverse() -> None:
    """Tenant a's saturated workload holds m1 against its own namespace; tenant b's gang,
    waiting claimAfter, takes m1 (else a's saturated workloads, one per member, would
    leave b's gang none): a's then gates its namespace again until it claims anew."""
    q = PendingQueue(backfill_limit=0)
    mine, gang = entry("mine", created=1, ns="a"), entry("gang", created=0, ns="b")
    young = entry("young", created=5, ns="b")
    for e in (mine, gang, young):
        q.add(e)
    assert q.claim(mine, "m1", wide=False)
    assert not q.claim(young, "m1")  # behind the narrow claimant: it does not give way
    assert not q.claim(entry("other", created=3, ns="a"), "m1", wide=False)  # not waiting
    q.add(entry("other", created=3, ns="a"))
    assert not q.claim(entry("other", created=3, ns="a"), "m1", wide=False)  # narrow: no
    assert q.claim(gang, "m1") and q.claims() == {"m1": gang}
    assert q.claimed_by("mine") is None and q.gate(entry("late", created=9, ns="a")) == mine
    assert not q.claim(mine, "m1", wide=False) and not q.claim(mine, "m1")  # wide is kept


def test_placed_returns_the_workloads_that_reached_the_limit_with_it() -> None:
    q = PendingQueue(backfill_limit=2)
    big, other = entry("big", created=1), entry("other", created=1, ns="b")
    q.add(big)
    q.add(other)
    assert q.placed(entry("s0", created=2)) == []
    assert q.placed(entry("s1", created=3)) == [big]  # the second bypass: the limit
    assert q.placed(entry("s2", created=4)) == []  # reached once, reported once
