"""Small asyncio helpers for the fleet shell: named guarded tasks and a change pulse.

Every long-running coroutine of the fleet starts through ``guarded``, which names the task
and logs an unexpected exit or crash (a background task that dies silently is the classic
controller bug; Kopf's ``aiotasks.create_guarded_task`` is the model). ``Pulse`` lets any
number of waiters sleep until something changed, coalescing bursts of watch events.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Sequence
from typing import Any

import structlog

__all__ = ["Pulse", "cancel_all", "guarded"]

log = structlog.get_logger(__name__)


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
        log.warning("task.exited", task=name)

    task = asyncio.create_task(run(), name=name)
    # Cancelled before its first step, the wrapper never awaits ``coro``: close it, so a
    # fast stop does not leave a "never awaited" coroutine behind.
    task.add_done_callback(lambda _: coro.close())
    return task


async def cancel_all(tasks: Sequence[asyncio.Task[Any]]) -> None:
    """Cancel ``tasks`` and wait until they have finished (their errors are logged or
    handled by their owner)."""
    for task in tasks:
        task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)


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

    async def wait(self, seen: int) -> int:
        """Return the version once it is past ``seen`` (wrap in ``asyncio.timeout`` to
        bound the wait)."""
        while self._version <= seen:
            await self._event.wait()
        return self._version

    async def changes(self) -> AsyncIterator[int]:
        """Yield the version after each change (bursts coalesce into one step)."""
        seen = self._version
        while True:
            seen = await self.wait(seen)
            yield seen
