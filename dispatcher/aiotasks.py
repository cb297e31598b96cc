"""Asyncio helpers shared by the fleet and control shells: guarded tasks, a change pulse
and single-flight calls.

Every long-running coroutine starts through ``guarded``, which names the task and logs an
unexpected exit or crash (a background task that dies silently is the classic controller
bug; Kopf's ``aiotasks.create_guarded_task`` is the model). ``Pulse`` lets any number of
waiters sleep until something changed, coalescing bursts of watch events. ``SingleFlight``
runs one call per key at a time and gives its answer to everyone who asked meanwhile (Go's
``singleflight.Group``): a burst of copies into a new member namespace creates it once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Hashable, Iterable
from typing import Any, Generic, TypeVar

import structlog

__all__ = ["Pulse", "SingleFlight", "cancel_all", "guarded", "on_crash", "wait_any"]

_T = TypeVar("_T")

log = structlog.get_logger("dispatcher.tasks")

CrashHook = Callable[[str, BaseException], None]
_crash_hooks: list[CrashHook] = []


def on_crash(hook: CrashHook) -> Callable[[], None]:
    """Call ``hook(task_name, error)`` whenever a guarded task crashes; returns a function
    that removes it. The controller uses it to stop (and be restarted) rather than run on
    with a dead watcher: a crashed task is never restarted in place."""
    _crash_hooks.append(hook)
    return lambda: _crash_hooks.remove(hook)


def guarded(coro: Coroutine[Any, Any, None], *, name: str, finite: bool = False
            ) -> asyncio.Task[None]:
    """Start ``coro`` as a task called ``name``; log if it crashes or ends by itself.

    A long-running task that returns has stopped doing its job: ``task.exited`` is a
    warning. ``finite``: a one-shot job (following a catalog change) is meant to return,
    so its end is ``task.done`` at debug level; a crash is an error either way.
    """

    async def run() -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("task.crashed", task=name, error=type(exc).__name__,
                      message=str(exc).splitlines()[0][:300] if str(exc) else "")
            for hook in list(_crash_hooks):
                hook(name, exc)
            raise
        if finite:
            log.debug("task.done", task=name)
        else:
            log.warning("task.exited", task=name)

    task = asyncio.create_task(run(), name=name)
    # Cancelled before its first step, the wrapper never awaits ``coro``: close it, so a
    # fast stop does not leave a "never awaited" coroutine behind.
    task.add_done_callback(lambda _: coro.close())
    return task


async def cancel_all(tasks: list[asyncio.Task[Any]], *, again_after: float = 0.2) -> None:
    """Cancel ``tasks``, wait until they have finished and empty the list (their errors are
    logged by ``guarded`` or handled by their owner).

    A task still running ``again_after`` seconds after its cancellation is cancelled again,
    until it ends: library code may turn a cancellation into an ordinary error (aiohttp's
    request timeout reports a cancel that lands as its timer fires as TimeoutError), which
    a retry loop then treats as one more failed attempt. Only the given handles are
    cancelled, never tasks found by name.
    """
    for task in tasks:
        task.cancel()
    pending = {t for t in tasks if not t.done()}
    interrupted = False
    while pending:
        try:
            _, pending = await asyncio.wait(pending, timeout=again_after)
        except asyncio.CancelledError:
            # Our own owner is stopping us (maybe cancelling again): finish stopping ours
            # first, so that no task outlives its owner, then end as cancelled.
            interrupted = True
            pending = {t for t in pending if not t.done()}
        for task in pending:
            task.cancel()
    if tasks:
        await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
    if interrupted:
        raise asyncio.CancelledError


class Pulse:
    """A monotonically increasing change counter that tasks can wait on."""

    def __init__(self) -> None:
        self._version = 0
        self._event = asyncio.Event()

    @property
    def version(self) -> int:
        """The number of changes so far."""
        return self._version

    def bump(self) -> None:
        """Something changed: wake every waiter."""
        self._version += 1
        self._event.set()
        self._event = asyncio.Event()

    async def wait(self, seen: int, *, timeout: float | None = None) -> int:  # noqa: ASYNC109
        """The version once it is past ``seen``; after ``timeout`` seconds (if given) the
        current version, changed or not (for loops that also act periodically)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while self._version <= seen:
                    await self._event.wait()
        return self._version

    async def changes(self) -> AsyncIterator[int]:
        """Yield the version after each change (bursts coalesce into one step)."""
        seen = self._version
        while True:
            seen = await self.wait(seen)
            yield seen


async def wait_any(waits: Iterable[tuple[Pulse, int]], *, timeout: float) -> None:  # noqa: ASYNC109
    """Return once any pulse is past its seen version, or after ``timeout`` seconds."""
    pairs = list(waits)
    if any(pulse.version > seen for pulse, seen in pairs):
        return
    tasks = [asyncio.ensure_future(pulse.wait(seen)) for pulse, seen in pairs]
    try:
        await asyncio.wait(tasks, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class SingleFlight(Generic[_T]):
    """One call per key in flight; callers that ask while it runs await the same answer
    (or its exception). A caller cancelled while waiting leaves the call running for the
    others; nothing is cached once it is done."""

    def __init__(self) -> None:
        self._flights: dict[Hashable, asyncio.Future[_T]] = {}

    async def do(self, key: Hashable, call: Callable[[], Awaitable[_T]]) -> _T:
        flight = self._flights.get(key)
        if flight is None:
            flight = asyncio.ensure_future(call())
            self._flights[key] = flight
            flight.add_done_callback(lambda _: self._flights.pop(key, None))
        return await asyncio.shield(flight)

    def __len__(self) -> int:
        return len(self._flights)
