"""One worker per hub workload, Kopf-reactor style: events are demultiplexed by uid.

Watches on the hub and on every member map their events to hub workload uids and call
``kick(uid)``. A uid has at most one running worker, which reconciles until no new kick
arrived while it worked, so a workload's steps never interleave and bursts of events
coalesce. ``later(uid, delay)`` schedules a recheck (the earliest one wins). Concurrency
across workloads is bounded; a failing reconcile is retried with a growing delay.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

import structlog

__all__ = ["Workers"]

log = structlog.get_logger("dispatcher.workers")

_MAX_BACKOFF_S = 30.0


class Workers:
    """Per-uid serial workers with bounded overall concurrency."""

    def __init__(self, *, handler: Callable[[str], Awaitable[None]], concurrency: int,
                 describe: Callable[[str], Mapping[str, str]] | None = None) -> None:
        """``describe(uid)`` gives the fields that name the workload in a retry log line."""
        self._handler = handler
        self._describe = describe
        self._limit = asyncio.Semaphore(concurrency)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._dirty: set[str] = set()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._failures: dict[str, int] = {}
        self._stopping = False

    def __len__(self) -> int:
        return len(self._running)

    def kick(self, uid: str) -> None:
        """Reconcile ``uid`` soon (again, if a worker is busy with it)."""
        if self._stopping or not uid:
            return
        if uid in self._running:
            self._dirty.add(uid)
            return
        self._running[uid] = asyncio.create_task(self._work(uid), name=f"workload:{uid}")

    def later(self, uid: str, delay: float) -> None:
        """Reconcile ``uid`` after ``delay`` seconds (keeps an earlier pending recheck)."""
        loop = asyncio.get_running_loop()
        when = loop.time() + max(delay, 0.0)
        timer = self._timers.get(uid)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[uid] = loop.call_at(when, self._fire, uid)

    def _fire(self, uid: str) -> None:
        self._timers.pop(uid, None)
        self.kick(uid)

    async def _work(self, uid: str) -> None:
        try:
            async with self._limit:
                while True:
                    self._dirty.discard(uid)
                    try:
                        await self._handler(uid)
                        self._failures.pop(uid, None)
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        count = self._failures.get(uid, 0) + 1
                        self._failures[uid] = count
                        delay = min(0.5 * 2 ** (count - 1), _MAX_BACKOFF_S)
                        fields = dict(self._describe(uid)) if self._describe else {}
                        log.warning("workload.retry", **{**fields, "uid": uid},
                                    error=type(exc).__name__,
                                    message=str(exc).splitlines()[0][:300] if str(exc)
                                    else "", retries=count, retry_in=delay)
                        self.later(uid, delay)
                    if uid not in self._dirty or self._stopping:
                        return
        finally:
            self._running.pop(uid, None)

    async def idle(self) -> None:
        """Wait until no worker runs (tests, benchmarks, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def stop(self) -> None:
        """Stop accepting work, let running workers finish their current step, cancel timers."""
        self._stopping = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        try:
            await asyncio.wait_for(self.idle(), timeout=10)
        except TimeoutError:
            for task in list(self._running.values()):
                task.cancel()
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)
