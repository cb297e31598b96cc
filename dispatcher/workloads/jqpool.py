"""The worker processes that run untrusted jq: rlimits, a lower CPU priority, a deadline.

What the kernel enforces for ``workloads.bounded`` (the trust model is in its docstring):

* each worker has ``RLIMIT_AS`` = ``memory_mb`` (libjq's failed allocation aborts the worker,
  not the caller) and, per task, an ``RLIMIT_CPU`` soft limit of ``cpu_seconds`` beyond the
  CPU it has used so far (SIGXCPU ends it);
* each worker runs ``nice`` steps below the process that started it (``os.nice`` first
  thing in the child, so every thread it makes inherits it): under contention the
  controller's event loop (and, on a shared host, the apiservers) get the CPU first, and a
  tenant's expensive object slows jq, not dispatching. On an idle core a niced worker runs
  at full speed: nice only decides who waits when both want the CPU;
* the caller waits ``deadline_seconds`` of wall time. Because the worker is niced, wall time
  alone would blame an object for the host being busy, so the deadline counts against the
  object only once the worker has spent at least half of it on the CPU for this task
  (read from ``/proc/<pid>/stat``); a worker that got less is waited for up to
  ``starved_seconds`` more and then given up as ``Unavailable`` (transient: nobody is blamed,
  the caller retries later);
* results larger than ``max_result_bytes`` as JSON are refused in the worker, so a
  definition cannot make the caller keep or unpickle much.

A worker that breaks a bound is killed and replaced; ``BoundHit`` says which bound.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import resource
import signal
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from dispatcher.workloads.jqrun import Batch, JqFailure

__all__ = ["BoundHit", "Pool", "Results", "Unavailable", "cpu_seconds_of", "nice_of"]

Results = list[list[Any] | JqFailure]

# How long a new worker may take to start (spawn, imports) before its first task: on a
# loaded host this took seconds, and counting it against a definition's deadline
# quarantined well-behaved definitions.
_STARTUP_SECONDS = 60.0
# The share of the deadline a worker must have spent on the CPU for the deadline to count
# against the object.
_BUSY_SHARE = 0.5
_POLL_SECONDS = 0.1


class BoundHit(Exception):
    """An evaluation broke a bound: ``bound`` is ``"time"``, ``"cpu"``, ``"memory"``,
    ``"result size"`` or ``"worker"`` (the worker died otherwise)."""

    def __init__(self, bound: str, detail: str) -> None:
        self.bound = bound
        self.detail = detail
        super().__init__(f"{bound}: {detail}")


class Unavailable(Exception):
    """No worker could run the evaluation (it did not start, or got no CPU on a busy
    host): not the definition's nor the object's fault; a later call tries again."""


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (field 3 onwards)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # the command name may hold spaces


def cpu_seconds_of(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` (None when /proc cannot tell)."""
    fields = _stat_fields(pid)
    if fields is None:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime: fields 14, 15


def nice_of(pid: int) -> int | None:
    """The nice value of process ``pid``'s main thread, as the kernel reports it (field 19
    of ``/proc/<pid>/stat``; None when /proc cannot tell)."""
    fields = _stat_fields(pid)
    return int(fields[16]) if fields is not None else None


class Pool:
    """A few worker processes, started on first use, replaced when one dies.

    ``run`` blocks until a worker is free; the controller never lets more callers in than
    there are workers (``workloads.fairshare`` decides whose turn it is), so it never waits
    here."""

    def __init__(self, *, workers: int, deadline_seconds: float, cpu_seconds: int,
                 memory_mb: int, max_result_bytes: int, nice: int,
                 starved_seconds: float) -> None:
        self.workers = workers
        self._limits = _Limits(deadline_seconds=deadline_seconds, cpu_seconds=cpu_seconds,
                               memory_mb=memory_mb, max_result_bytes=max_result_bytes,
                               nice=nice, starved_seconds=starved_seconds)
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()
        self._all: list[_Worker] = []

    def run(self, expressions: Sequence[str], text: str) -> Results:
        """``expressions`` on ``text`` in a worker (BoundHit, Unavailable)."""
        worker = self._take()
        try:
            results = worker.call(expressions, text)
        except (BoundHit, Unavailable):
            worker.kill()
            with self._lock:
                self._started -= 1
                if worker in self._all:
                    self._all.remove(worker)
            raise
        self._idle.put(worker)
        return results

    def pids(self) -> list[int]:
        """The live workers' process ids (tests read their priority from /proc)."""
        with self._lock:
            return [w.process.pid for w in self._all
                    if w.process.pid is not None and w.process.is_alive()]

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle.empty() and self._started < self.workers:
                self._started += 1
                worker = _Worker(self._limits)
                self._all.append(worker)
                return worker
        return self._idle.get()

    def close(self) -> None:
        """Stop every worker. Only idle workers' pipes are closed here: a busy one's pipe
        belongs to the thread in ``call`` (it sees the process end and closes it), so no
        file descriptor is ever closed twice (a second close could hit a reused number)."""
        with self._lock:
            for worker in self._all:
                worker.stop_process()
            while not self._idle.empty():
                self._idle.get().kill()
            self._all.clear()
            self._started = 0


@dataclass(frozen=True, kw_only=True)
class _Limits:
    deadline_seconds: float
    cpu_seconds: int
    memory_mb: int
    max_result_bytes: int
    nice: int
    starved_seconds: float


_CONTEXT = multiprocessing.get_context("spawn")  # no fork of a process with threads/loops


class _Worker:
    """One worker process and its pipe."""

    def __init__(self, limits: _Limits) -> None:
        self.limits = limits
        self._close_lock = threading.Lock()
        self.conn, child = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(
            target=_serve, args=(child, limits.memory_mb, limits.cpu_seconds,
                                 limits.max_result_bytes, limits.nice), daemon=True)
        self.process.start()
        child.close()
        self._started = False

    def call(self, expressions: Sequence[str], text: str) -> Results:
        if not self._started:
            self._wait_started()
        pid = self.process.pid
        before = cpu_seconds_of(pid) if pid is not None else None
        try:
            self.conn.send((tuple(expressions), text))
            ready = self.conn.poll(self.limits.deadline_seconds)
            if not ready:
                self._wait_if_starved(pid, before)
            kind, payload = self.conn.recv()
        except (EOFError, BrokenPipeError, ConnectionError, OSError):
            raise self._died() from None
        if kind == "size":
            raise BoundHit("result size", payload)
        if kind == "memory":
            raise BoundHit("memory", payload)
        results: Results = [JqFailure(item["jqfailure"]) if isinstance(item, dict)
                            and set(item) == {"jqfailure"} else item for item in payload]
        return results

    def _wait_if_starved(self, pid: int | None, before: float | None) -> None:
        """Past the deadline: the object's fault once the worker spent half of it on the
        CPU (BoundHit "time"); else wait for the CPU it was not given, at most
        ``starved_seconds`` (then Unavailable). Returns when a result is ready."""
        deadline = self.limits.deadline_seconds
        starved = self.limits.starved_seconds
        given_up = time.monotonic() + starved
        while True:
            now = cpu_seconds_of(pid) if pid is not None else None
            if before is None or now is None or now - before >= deadline * _BUSY_SHARE:
                raise BoundHit("time", f"no result within {deadline:g} s")
            if time.monotonic() >= given_up:
                raise Unavailable(f"the evaluation worker got {now - before:.2f} s of CPU "
                                  f"in {deadline + starved:g} s (a busy host)")
            if self.conn.poll(_POLL_SECONDS):
                return

    def _wait_started(self) -> None:
        """Wait for the worker's ready message, outside any definition's deadline."""
        try:
            ready = self.conn.poll(_STARTUP_SECONDS)
            message = self.conn.recv() if ready else None
        except (EOFError, ConnectionError, OSError):
            message = None
        if message != ("ready", None):
            raise Unavailable(f"the evaluation worker did not start within "
                              f"{_STARTUP_SECONDS:g} s")
        self._started = True

    def _died(self) -> BoundHit:
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return BoundHit("cpu", f"more than {self.limits.cpu_seconds} s of CPU")
        if code == -signal.SIGABRT:
            return BoundHit("memory", f"libjq could not allocate within "
                                      f"{self.limits.memory_mb} MB")
        return BoundHit("worker", f"the worker process ended with code {code}")

    def stop_process(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)

    def kill(self) -> None:
        """Stop the process and close the pipe, once (callers hold the worker alone)."""
        self.stop_process()
        with self._close_lock:
            if self.conn.closed:
                return
            self.conn.close()


def _serve(conn: Connection, memory_mb: int, cpu_seconds: int, max_bytes: int,
           nice: int) -> None:
    """Worker loop: evaluate batches until the pipe closes (runs in the child)."""
    if nice > 0:
        os.nice(nice)  # before anything else, so every thread made later inherits it
    limit = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send(("ready", None))
    batches: dict[tuple[str, ...], Batch] = {}
    while True:
        try:
            expressions, text = conn.recv()
        except EOFError:
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)
        spent = int(usage.ru_utime + usage.ru_stime) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_seconds, resource.RLIM_INFINITY))
        try:
            batch = batches.get(expressions)
            if batch is None:
                batch = batches[expressions] = Batch(expressions)
                if len(batches) > 256:
                    batches.pop(next(iter(batches)))
            results = batch.run(text)
            payload = [{"jqfailure": r.message} if isinstance(r, JqFailure) else r
                       for r in results]
            size = len(json.dumps(payload, separators=(",", ":")))
        except MemoryError:
            conn.send(("memory", f"more than {memory_mb} MB"))
            continue
        if size > max_bytes:
            conn.send(("size", f"results are {size} bytes as JSON, more than {max_bytes}"))
        else:
            conn.send(("ok", payload))
