"""Workers: one serial worker per uid, kicks coalesce, failures retry, rechecks fire.

Covered: a uid is never reconciled twice at once; kicks during a run cause exactly one more
run; different uids run concurrently up to the limit; a failing handler is retried; a
scheduled recheck fires; stop drains. Left out: real reconciles (integration tests).
"""

from __future__ import annotations

import asyncio

from dispatcher.control.workers import Workers


async def test_serial_per_uid_and_kicks_coalesce() -> None:
    running: set[str] = set()
    calls: list[str] = []
    gate = asyncio.Event()

    async def handler(uid: str) -> None:
        assert uid not in running
        running.add(uid)
        calls.append(uid)
        await gate.wait()
        running.discard(uid)

    workers = Workers(handler=handler, concurrency=4)
    workers.kick("a")
    await asyncio.sleep(0)
    for _ in range(5):
        workers.kick("a")  # while "a" runs: one more run, not five
    workers.kick("b")
    await asyncio.sleep(0)
    assert sorted(running) == ["a", "b"]
    gate.set()
    await workers.idle()
    assert calls.count("a") == 2 and calls.count("b") == 1


async def test_failure_is_retried_and_recheck_fires() -> None:
    attempts: list[str] = []
    done = asyncio.Event()

    async def handler(uid: str) -> None:
        attempts.append(uid)
        if uid == "flaky" and attempts.count("flaky") == 1:
            raise RuntimeError("transient")
        if attempts.count("flaky") >= 2 and "timed" in attempts:
            done.set()

    workers = Workers(handler=handler, concurrency=2)
    workers.kick("flaky")
    workers.later("timed", 0.01)
    await asyncio.wait_for(done.wait(), 10)
    await workers.stop()
    assert attempts.count("flaky") == 2


async def test_concurrency_is_bounded() -> None:
    active = 0
    peak = 0

    async def handler(uid: str) -> None:
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.001)
        active -= 1

    workers = Workers(handler=handler, concurrency=3)
    for i in range(20):
        workers.kick(f"u{i}")
    await workers.idle()
    assert peak == 3


async def test_slots_go_round_the_tenants() -> None:
    """One slot, tenant A's burst of 50 queued first: tenant B's workload runs second, not
    after the burst (a first-in first-out semaphore ran it 51st)."""
    order: list[str] = []
    gate = asyncio.Event()

    async def handler(uid: str) -> None:
        order.append(uid)
        await gate.wait()

    workers = Workers(handler=handler, concurrency=1, key=lambda uid: uid.split("/")[0])
    for i in range(50):
        workers.kick(f"a/{i}")
    await asyncio.sleep(0)
    workers.kick("b/0")
    workers.kick("b/1")
    await asyncio.sleep(0)
    gate.set()
    await workers.idle()
    assert order[:5] == ["a/0", "a/1", "b/0", "a/2", "b/1"]
    assert len(order) == 52 and len(set(order)) == 52


async def test_a_cancelled_waiter_never_holds_a_slot() -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    async def handler(uid: str) -> None:
        ran.append(uid)
        await gate.wait()

    workers = Workers(handler=handler, concurrency=1, key=lambda uid: uid)
    workers.kick("x")
    workers.kick("y")
    workers.kick("z")
    await asyncio.sleep(0)
    workers._running["y"].cancel()  # waiting for the slot, then gone
    await asyncio.sleep(0)
    gate.set()
    await workers.idle()
    assert ran == ["x", "z"]
