"""Guarded tasks log crashes and unexpected exits; the pulse wakes and coalesces waiters."""

from __future__ import annotations

import asyncio
import contextlib
import functools

import pytest
from structlog.testing import capture_logs

from dispatcher.aiotasks import Pulse, SingleFlight, cancel_all, guarded, on_crash


async def test_guarded_logs_crash_and_exit() -> None:
    async def boom() -> None:
        raise RuntimeError("broken")

    async def done() -> None:
        return None

    with capture_logs() as logs:
        crashed = guarded(boom(), name="t/boom")
        ended = guarded(done(), name="t/done")
        with pytest.raises(RuntimeError):
            await crashed
        await ended
    assert crashed.get_name() == "t/boom"
    events = {(e["event"], e["task"]) for e in logs}
    assert ("task.crashed", "t/boom") in events
    assert ("task.exited", "t/done") in events


async def test_a_finite_task_ends_without_a_warning_and_still_reports_a_crash() -> None:
    """A one-shot job (catalog-follow) is meant to return: ``task.done`` at debug, no
    ``task.exited`` warning; its crash is an error like any other."""
    async def done() -> None:
        return None

    async def boom() -> None:
        raise RuntimeError("broken")

    with capture_logs() as logs:
        await guarded(done(), name="t/once", finite=True)
        with pytest.raises(RuntimeError):
            await guarded(boom(), name="t/once-boom", finite=True)
    seen = {(e["event"], e["task"], e["log_level"]) for e in logs}
    assert ("task.done", "t/once", "debug") in seen
    assert ("task.crashed", "t/once-boom", "error") in seen
    assert not [e for e in logs if e["log_level"] == "warning"]


async def test_crash_hooks_hear_crashes_only() -> None:
    """A registered hook is told about a crash (name and error), not about cancellations or
    normal exits, and no longer once removed."""
    heard: list[tuple[str, str]] = []
    remove = on_crash(lambda name, exc: heard.append((name, str(exc))))

    async def boom() -> None:
        raise RuntimeError("broken")

    async def done() -> None:
        return None

    try:
        with capture_logs():
            crashed = guarded(boom(), name="t/boom")
            sleeper = guarded(asyncio.sleep(60), name="t/sleep")
            await asyncio.sleep(0)
            await cancel_all([sleeper])
            await guarded(done(), name="t/done")
            with pytest.raises(RuntimeError):
                await crashed
    finally:
        remove()
    assert heard == [("t/boom", "broken")]
    with capture_logs():
        late = guarded(boom(), name="t/late")
        with pytest.raises(RuntimeError):
            await late
    assert heard == [("t/boom", "broken")]


async def test_cancelled_tasks_are_quiet() -> None:
    with capture_logs() as logs:
        task = guarded(asyncio.sleep(60), name="t/sleep")
        await asyncio.sleep(0)
        await cancel_all([task])
    assert task.cancelled()
    assert logs == []


async def test_task_cancelled_before_its_first_step_closes_its_coroutine() -> None:
    """A stop right after a start must not leave a never-awaited coroutine behind."""

    async def forever() -> None:
        await asyncio.sleep(60)

    coro = forever()
    task = guarded(coro, name="t/early")
    await cancel_all([task])
    assert task.cancelled()
    assert coro.cr_frame is None  # closed, not pending


async def test_pulse_wakes_waiters_and_coalesces() -> None:
    pulse = Pulse()
    waiter = asyncio.create_task(pulse.wait(0))
    await asyncio.sleep(0)
    assert not waiter.done()
    pulse.bump()
    pulse.bump()
    assert await waiter == 2
    assert await pulse.wait(1) == 2  # already past: returns at once
    stream = pulse.changes()

    async def first() -> int:
        return await anext(stream)

    nxt = asyncio.create_task(first())
    await asyncio.sleep(0)
    pulse.bump()
    assert await nxt == 3
    await stream.aclose()  # type: ignore[attr-defined]


async def test_cancel_all_waits_for_its_tasks_even_when_cancelled_again() -> None:
    """An owner stopped while stopping its own tasks (its parent cancels it again) still
    waits until they have ended: no task outlives its owner."""
    children: list[asyncio.Task[None]] = []

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            # A cleanup that takes a few steps and swallows cancels, as a library may.
            for _ in range(3):
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.sleep(0.05)

    stopping = asyncio.Event()

    async def owner() -> None:
        children.append(asyncio.create_task(slow_to_stop()))
        await asyncio.sleep(0)
        stopping.set()  # wakes the test only once this step has entered cancel_all
        await cancel_all(list(children), again_after=0.01)

    task = asyncio.create_task(owner())
    await stopping.wait()  # the owner is inside cancel_all: cancel it there
    with capture_logs():
        await cancel_all([task], again_after=0.01)
    assert task.cancelled()
    assert children and all(c.done() for c in children)


async def test_single_flight_runs_one_call_per_key_and_answers_everyone() -> None:
    flights: SingleFlight[int] = SingleFlight()
    calls: list[str] = []
    release = asyncio.Event()

    async def call(key: str) -> int:
        calls.append(key)
        await release.wait()
        return len(calls)

    waiting = [asyncio.ensure_future(flights.do(k, functools.partial(call, k)))
               for k in ("ns-a", "ns-a", "ns-a", "ns-b")]
    for _ in range(3):  # the callers ask, then the calls start
        await asyncio.sleep(0)
    assert calls == ["ns-a", "ns-b"] and len(flights) == 2
    release.set()
    assert await asyncio.gather(*waiting) == [2, 2, 2, 2]
    assert len(flights) == 0
    assert await flights.do("ns-a", lambda: call("ns-a")) == 3  # nothing cached once done


async def test_single_flight_gives_its_error_to_every_caller() -> None:
    flights: SingleFlight[None] = SingleFlight()
    started = asyncio.Event()

    async def failing() -> None:
        started.set()
        await asyncio.sleep(0)
        raise ValueError("refused")

    first = asyncio.ensure_future(flights.do("k", failing))
    await started.wait()
    second = asyncio.ensure_future(flights.do("k", failing))
    results = await asyncio.gather(first, second, return_exceptions=True)
    assert [type(r) for r in results] == [ValueError, ValueError]


async def test_a_cancelled_caller_leaves_the_call_running_for_the_others() -> None:
    flights: SingleFlight[str] = SingleFlight()
    release = asyncio.Event()

    async def call() -> str:
        await release.wait()
        return "done"

    leader = asyncio.ensure_future(flights.do("k", call))
    follower = asyncio.ensure_future(flights.do("k", call))
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(flights) == 1
    leader.cancel()
    await asyncio.gather(leader, return_exceptions=True)
    release.set()
    assert await follower == "done"
