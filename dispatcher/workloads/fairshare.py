"""Whose evaluation runs next in the bounded worker pool: the workers' time, shared fairly.

Untrusted definitions run in a few worker processes (``workloads.bounded``), and whoever
writes an object pays for its evaluation with the pool's time. Without a scheduler the
pool served callers first come, first served, so one namespace's ten objects of about a
second each made another namespace's object wait ten seconds. Here every caller names its
tenant (the object's namespace) and the pool's slots go to the waiting tenant that has
used the least of the workers' time so far:

* **least attained service**: each tenant's ``used`` is the wall time its evaluations held
  a worker; the next slot goes to the waiting tenant with the least, ties to the one with
  fewer evaluations running, then to the oldest request. A tenant with a single cheap
  object waiting is served next after the evaluations already running, whatever another
  tenant has queued: ``A x 10`` then ``B x 1`` is served A, B, A, A, ... And among tenants
  that all keep the pool busy, each gets about the same share of its *time*, not of its
  turns: cheap evaluations are not made to wait behind expensive ones one for one.
* **no banked credit**: a tenant that starts waiting again (nothing queued or running) is
  lifted to the least ``used`` among the tenants active now, so a namespace that was idle
  for an hour cannot then hold the pool for an hour; a tenant that used more than that
  keeps its debt (going idle for a moment does not wipe it). When nobody waits or runs,
  everything is forgotten: nobody is owed anything by an idle pool.

``FairQueue`` is the decision, pure (plain data in and out, no clock, no I/O). ``FairTurns``
is the asyncio shell the controller uses: it holds the waiting callers' futures in a
``FairQueue``, runs each admitted call on its own thread pool (one thread per worker
process, never the event loop's default executor, which aiohttp needs for every request)
and charges the time it held the slot.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Generic, TypeVar

__all__ = ["FairQueue", "FairTurns"]

T = TypeVar("T")
R = TypeVar("R")


class FairQueue(Generic[T]):
    """Requests per tenant; ``pop`` answers the next to serve (see the module docstring)."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[tuple[int, T]]] = {}
        self._running: dict[str, int] = {}
        self._used: dict[str, float] = {}
        self._seq = 0

    def __len__(self) -> int:
        """How many requests wait (not counting those running)."""
        return sum(len(q) for q in self._queues.values())

    def push(self, tenant: str, item: T) -> None:
        """``tenant`` asks for a turn; ``item`` is what ``pop`` hands back."""
        if not self._active(tenant):
            self._used[tenant] = max(self._used.get(tenant, 0.0), self._floor())
        self._queues.setdefault(tenant, deque()).append((self._seq, item))
        self._seq += 1

    def pop(self) -> tuple[str, T] | None:
        """The next request to serve (now counted as running), or None when none waits."""
        if not self._queues:
            return None
        tenant = min(self._queues, key=lambda t: (self._used.get(t, 0.0),
                                                  self._running.get(t, 0),
                                                  self._queues[t][0][0]))
        waiting = self._queues[tenant]
        _, item = waiting.popleft()
        if not waiting:
            del self._queues[tenant]
        self._running[tenant] = self._running.get(tenant, 0) + 1
        return tenant, item

    def done(self, tenant: str, cost: float) -> None:
        """A request ``pop`` handed out has finished after ``cost`` (seconds held)."""
        left = self._running.get(tenant, 0) - 1
        if left > 0:
            self._running[tenant] = left
        else:
            self._running.pop(tenant, None)
        self._used[tenant] = self._used.get(tenant, 0.0) + max(cost, 0.0)
        self._forget_idle()

    def used(self, tenant: str) -> float:
        """The time ``tenant`` is charged with (0 when forgotten)."""
        return self._used.get(tenant, 0.0)

    def _active(self, tenant: str) -> bool:
        return tenant in self._queues or tenant in self._running

    def _floor(self) -> float:
        active = [self._used.get(t, 0.0) for t in (*self._queues, *self._running)]
        return min(active) if active else 0.0

    def _forget_idle(self) -> None:
        """Drop idle tenants that owe nothing beyond the floor (they would be lifted to it
        anyway); with nobody active, drop everyone."""
        if not self._queues and not self._running:
            self._used.clear()
            return
        floor = self._floor()
        for tenant in [t for t, used in self._used.items()
                       if used <= floor and not self._active(t)]:
            del self._used[tenant]


class FairTurns:
    """``await turns.run(tenant, call)``: ``call()`` on one of ``slots`` threads, when it is
    ``tenant``'s turn (``FairQueue``). A caller cancelled while waiting gives up its place;
    one cancelled while its call runs stops waiting, but the slot stays taken until the
    call ends (a thread cannot be stopped), so no more than ``slots`` calls ever run."""

    def __init__(self, slots: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._free = slots
        self._queue: FairQueue[asyncio.Future[None]] = FairQueue()
        self._clock = clock
        self._executor = ThreadPoolExecutor(max_workers=slots,
                                            thread_name_prefix="bounded-eval")

    @property
    def waiting(self) -> int:
        """Callers waiting for a turn."""
        return len(self._queue)

    async def run(self, tenant: str, call: Callable[[], R]) -> R:
        await self._turn(tenant)
        started = self._clock()
        loop = asyncio.get_running_loop()
        try:
            future = loop.run_in_executor(self._executor, call)
        except RuntimeError:  # the executor was shut down meanwhile
            self._finished(tenant, 0.0)
            raise
        future.add_done_callback(lambda _: self._finished(tenant, self._clock() - started))
        return await asyncio.shield(future)

    async def _turn(self, tenant: str) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.push(tenant, waiter)
        self._hand_out()
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._finished(tenant, 0.0)  # handed a slot while being cancelled
            raise

    def _hand_out(self) -> None:
        while self._free > 0:
            nxt = self._queue.pop()
            if nxt is None:
                return
            tenant, waiter = nxt
            if waiter.done():  # cancelled while waiting: not served
                self._queue.done(tenant, 0.0)
                continue
            self._free -= 1
            waiter.set_result(None)

    def _finished(self, tenant: str, cost: float) -> None:
        self._queue.done(tenant, cost)
        self._free += 1
        self._hand_out()

    def close(self) -> None:
        """Stop taking calls (running ones finish on their threads)."""
        self._executor.shutdown(wait=False, cancel_futures=True)
