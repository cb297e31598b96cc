"""``kube.retry.forever``: the one reconnect loop, with an injected clock and sleep.

Covered: delays grow by the strategy and start over after a long run; ``restart_on``
restarts at once with fresh delays; an error ``retry_on`` refuses is raised; an error while
``stopping`` ends the loop as a cancellation; a body that returns is run again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import tenacity

from dispatcher.kube import retry

WAIT = tenacity.wait_exponential(multiplier=1, max=8)


class Stop(Exception):
    """Ends a test's loop (not retried)."""


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def script(clock: Clock, steps: list[tuple[float, BaseException | None]]
           ) -> Callable[[], Awaitable[None]]:
    """A body that runs ``steps`` in turn: (seconds it runs, error it ends with)."""
    todo = list(steps)

    async def body() -> None:
        if not todo:
            raise Stop
        ran, error = todo.pop(0)
        clock.now += ran
        if error is not None:
            raise error

    return body


def run(clock: Clock, body: Callable[[], Awaitable[None]], *,
        retry_on: Callable[[BaseException], bool] = lambda exc: not isinstance(exc, Stop),
        **kw: Any) -> BaseException:
    with pytest.raises(BaseException) as ended:
        asyncio.run(retry.forever(body, wait=WAIT, sleep=clock.sleep, clock=clock,
                                  retry_on=retry_on, **kw))
    return ended.value


def test_delays_grow_and_start_over_after_a_long_run() -> None:
    clock = Clock()
    failures: list[tuple[str, float]] = []
    body = script(clock, [(1, OSError("a")), (1, OSError("b")), (1, None), (60, OSError("c")),
                          (1, OSError("d"))])
    ended = run(clock, body, fresh_after=30.0,
                on_failure=lambda exc, delay: failures.append((str(exc), delay)))
    assert isinstance(ended, Stop)
    assert clock.slept == [1.0, 2.0, 4.0, 1.0, 2.0]
    assert failures == [("a", 1.0), ("b", 2.0), ("None", 4.0), ("c", 1.0), ("d", 2.0)]


def test_restart_on_starts_again_at_once_with_fresh_delays() -> None:
    class Ended(Exception):
        pass

    clock = Clock()
    body = script(clock, [(1, OSError()), (1, OSError()), (1, Ended()), (1, OSError())])
    run(clock, body, restart_on=lambda exc: isinstance(exc, Ended))
    assert clock.slept == [1.0, 2.0, 1.0]


def test_an_error_it_does_not_retry_is_raised() -> None:
    clock = Clock()
    body = script(clock, [(1, OSError()), (1, ValueError("bad"))])
    ended = run(clock, body, retry_on=lambda exc: isinstance(exc, OSError))
    assert isinstance(ended, ValueError) and clock.slept == [1.0]


def test_an_error_while_stopping_ends_as_a_cancellation() -> None:
    clock = Clock()
    body = script(clock, [(1, TimeoutError())])  # what aiohttp makes of a cancel
    ended = run(clock, body, stopping=lambda: True)
    assert isinstance(ended, asyncio.CancelledError) and clock.slept == []
