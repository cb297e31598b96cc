"""Asyncio helpers of the control loop: named guarded tasks and a change pulse.

Every long-running coroutine starts through ``guarded``, which names the task and logs an
unexpected exit or crash (a background task that dies silently is the classic controller
bug). ``Pulse`` lets any number of waiters sleep until something changed, with an optional
timeout, coalescing bursts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from typing import Any

import structlog

__all__ = ["Pulse", "cancel_all", "guarded"]

log = structlog.get_logger("dispatcher.tasks")


def guarded(coro: Coroutine[Any, Any, None], *, name: str) -> asyncio.Task[None]:
    """Start ``coro`` as a task called ``name``; log if it ever ends by itself."""

    async def run() -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("task.crashed", task=name, error=type(exc).__name__,
                      message=str(exc).splitlines()[0][:300] if str(exc) else "")
            raise
        log.debug("task.exited", task=name)

    return asyncio.create_task(run(), name=name)


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    """Cancel ``tasks`` and wait for them to finish (their errors are already logged)."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()


class Pulse:
    """A monotonically increasing change counter that tasks can wait on."""

    def __init__(self) -> None:
        self._version = 0
        self._event = asyncio.Event()

    @property
    def version(self) -> int:
        return self._version

    def bump(self) -> None:
        """Something changed: wake every waiter."""
        self._version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seen: int, *, timeout: float | None = None) -> int:  # noqa: ASYNC109
        """The version once it is past ``seen``, or the current one after ``timeout``."""
        if self._version > seen:
            return self._version
        event = self._event
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        return self._version
