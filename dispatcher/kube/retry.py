"""Run a long-lived body (a list-then-watch, a member session) again after every end, with
growing delays: the one reconnect loop of the hub watches, the catalog watches, the member
copy watches and the member sessions.

The delays come from a tenacity wait strategy (exponential with jitter for members lost
together, plain exponential for watches); ``sleep`` and ``clock`` are injected, so the
loop is tested without waiting, and a member session can wake its backoff early (new
credentials). A body that ran ``fresh_after`` seconds before it ended starts the delays
over, as does an error ``restart_on`` names (then without waiting at all). Cancellation
always ends the loop, also when library code turned it into an ordinary error while
``stopping()`` says the owner is going away.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

import tenacity

__all__ = ["WATCH_WAIT", "forever"]

WATCH_WAIT = tenacity.wait_exponential(multiplier=0.5, max=30.0)
"""A watch's delays: 0.5 s doubling to 30 s (from 0.5 again after it ran 30 s)."""

Failure = Callable[[BaseException | None, float], None]
"""Told of each end before its delay: the error (None: the body returned) and the delay."""


def _never(_exc: BaseException) -> bool:
    return False


async def forever(body: Callable[[], Awaitable[object]], *,
                  wait: tenacity.wait.wait_base,
                  retry_on: Callable[[BaseException], bool],
                  on_failure: Failure | None = None,
                  restart_on: Callable[[BaseException], bool] = _never,
                  fresh_after: float | None = None,
                  stopping: Callable[[], bool] = lambda: False,
                  sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
                  clock: Callable[[], float] = time.monotonic) -> NoReturn:
    """Await ``body`` again and again; an error ``retry_on`` refuses is raised."""
    attempt = 0
    while True:
        started = clock()
        error: BaseException | None = None
        try:
            await body()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if stopping():  # a cancellation a library turned into an error
                raise asyncio.CancelledError from None
            if restart_on(exc):
                attempt = 0
                continue
            if not retry_on(exc):
                raise
            error = exc
        if stopping():
            raise asyncio.CancelledError
        if fresh_after is not None and clock() - started >= fresh_after:
            attempt = 0
        attempt += 1
        delay = _delay(wait, attempt, clock() - started)
        if on_failure is not None:
            on_failure(error, delay)
        await sleep(delay)


def _delay(wait: tenacity.wait.wait_base, attempt: int, ran: float) -> float:
    """The strategy's delay before attempt ``attempt + 1`` (tenacity reads these fields)."""
    state = tenacity.RetryCallState(retry_object=tenacity.AsyncRetrying(), fn=None,
                                    args=(), kwargs={})
    state.attempt_number = attempt
    state.outcome_timestamp = state.start_time + ran
    return float(wait(state))
