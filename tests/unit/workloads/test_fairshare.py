"""Whose evaluation runs next (``workloads.fairshare.FairQueue``): plain data, no clock."""

from __future__ import annotations

from dispatcher.workloads.fairshare import FairQueue


def _serve(queue: FairQueue[str], costs: dict[str, float], *, slots: int = 1) -> list[str]:
    """Serve everything queued with ``slots`` in parallel, each request costing what
    ``costs`` says for its tenant (the earliest-started finishes first); the order served."""
    order: list[str] = []
    running: list[tuple[str, str]] = []
    while True:
        while len(running) < slots:
            nxt = queue.pop()
            if nxt is None:
                break
            order.append(nxt[1])
            running.append(nxt)
        if not running:
            return order
        tenant, _ = running.pop(0)
        queue.done(tenant, costs[tenant])


def test_a_second_tenant_is_served_second_not_after_the_backlog() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(10):
        queue.push("a", f"a{i}")
    queue.push("b", "b0")
    assert _serve(queue, {"a": 1.0, "b": 0.001})[:3] == ["a0", "b0", "a1"]


def test_with_two_slots_the_other_tenant_takes_the_second() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(10):
        queue.push("a", f"a{i}")
    queue.push("b", "b0")
    assert _serve(queue, {"a": 1.0, "b": 0.001}, slots=2)[:2] == ["a0", "b0"]


def test_time_is_shared_not_turns() -> None:
    """Both keep the pool busy: b's cheap requests are not made to wait one for one behind
    a's expensive ones; within the first second of a's time, all of b's ten run."""
    queue: FairQueue[str] = FairQueue()
    for i in range(10):
        queue.push("a", f"a{i}")
        queue.push("b", f"b{i}")
    order = _serve(queue, {"a": 1.0, "b": 0.01})
    assert order[:11] == ["a0", *(f"b{i}" for i in range(10))]


def test_one_tenant_alone_is_served_in_order() -> None:
    queue: FairQueue[str] = FairQueue()
    for i in range(5):
        queue.push("a", f"a{i}")
    assert _serve(queue, {"a": 1.0}) == [f"a{i}" for i in range(5)]


def test_a_newcomer_gets_no_banked_credit() -> None:
    """c arrives after a and b used 5 s each: c is lifted to their level, so it takes turns
    with them instead of holding the pool for 5 s."""
    queue: FairQueue[str] = FairQueue()
    for i in range(5):
        queue.push("a", f"a{i}")
        queue.push("b", f"b{i}")
    queue.push("a", "a-more")
    queue.push("b", "b-more")
    for _ in range(10):
        nxt = queue.pop()
        assert nxt is not None
        queue.done(nxt[0], 1.0)
    assert queue.used("a") == queue.used("b") == 5.0
    for i in range(3):
        queue.push("c", f"c{i}")
    assert queue.used("c") == 5.0
    assert _serve(queue, {"a": 1.0, "b": 1.0, "c": 1.0}) == \
        ["a-more", "b-more", "c0", "c1", "c2"]


def test_a_heavy_tenant_keeps_its_debt_when_it_pauses() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    queue.push("b", "b0")
    queue.push("b", "b1")
    assert queue.pop() == ("a", "a0")
    queue.done("a", 10.0)  # a idle now, but used far more than b
    queue.push("a", "a1")
    assert queue.used("a") == 10.0
    assert _serve(queue, {"a": 1.0, "b": 1.0}) == ["b0", "b1", "a1"]


def test_an_idle_pool_forgets_everyone() -> None:
    queue: FairQueue[str] = FairQueue()
    queue.push("a", "a0")
    assert queue.pop() == ("a", "a0")
    queue.done("a", 100.0)
    assert queue.used("a") == 0.0 and len(queue) == 0
    queue.push("b", "b0")
    queue.push("a", "a1")
    assert _serve(queue, {"a": 1.0, "b": 1.0}) == ["b0", "a1"]  # no debt: arrival order
