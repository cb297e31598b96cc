"""One worker per hub workload, Kopf-reactor style: events are demultiplexed by uid.

Watches on the hub and on every member map their events to hub workload uids and call
``kick(uid)``. A uid has at most one running worker, which reconciles until no new kick
arrived while it worked, so a workload's steps never interleave and bursts of events
coalesce. ``later(uid, delay)`` schedules a recheck (the earliest one wins). Concurrency
across workloads is bounded; a failing reconcile is retried with a growing delay.

Slots are handed out fairly by ``key`` (the workload's namespace: its tenant): waiting
workers queue per key and the keys take turns, so one tenant's burst of thousands waits
behind itself while another tenant's workload gets the next free slot (a FIFO semaphore
made it wait for the whole burst).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Mapping

import structlog

__all__ = ["Workers"]

log = structlog.get_logger("dispatcher.workers")

_MAX_BACKOFF_S = 30.0


class Workers:
    """Per-uid serial workers with bounded overall concurrency."""

    def __init__(self, *, handler: Callable[[str], Awaitable[float | None]], concurrency: int,
                 describe: Callable[[str], Mapping[str, str]] | None = None,
                 key: Callable[[str], str] | None = None) -> None:
        """``handler(uid)`` answers when to look again (seconds) or None;
        ``describe(uid)`` gives the fields that name the workload in a retry log line;
        ``key(uid)`` the tenant whose turn a slot is (one queue for all when None)."""
        self._handler = handler
        self._describe = describe
        self._key = key
        self._free = concurrency
        self._waiting: dict[str, deque[asyncio.Future[None]]] = {}
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

    async def _acquire(self, uid: str) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(self._key(uid) if self._key else "", deque()).append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release()  # handed a slot while being cancelled: pass it on
            raise

    def _release(self) -> None:
        """Hand the slot to the first waiter of the next key in turn (round robin)."""
        while self._waiting:
            key = next(iter(self._waiting))
            queue = self._waiting.pop(key)
            while queue:
                waiter = queue.popleft()
                if not waiter.done():
                    if queue:
                        self._waiting[key] = queue  # back of the line of keys
                    waiter.set_result(None)
                    return
        self._free += 1

    async def _work(self, uid: str) -> None:
        try:
            await self._acquire(uid)
            try:
                while True:
                    self._dirty.discard(uid)
                    try:
                        recheck = await self._handler(uid)
                        self._failures.pop(uid, None)
                        if recheck is not None:
                            self.later(uid, recheck)
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
                self._release()
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
