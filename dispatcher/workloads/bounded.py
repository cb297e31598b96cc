"""Bounded evaluation of untrusted definitions: jq in worker processes with rlimits.

Trust model: the built-in catalog is reviewed code and is *trusted*: it runs in-process
(the fast path, microseconds). Any other definition (``--definitions`` files, definition
objects on the hub) is *untrusted*: whoever may write one must not be able to stall or
kill the process that evaluates it. The load-time safety check makes definitions
loop-free, but not cheap: ``("x" * 1000000000) | length`` allocates 1 GB and
``reduce (.a, .a, ... 26 times) as $x ([1]; . + .)`` doubles an array until libjq aborts
the whole process. No static check over jq's builtins is both sound and useful (string
repetition, ``+``, ``*`` on objects, ``tostring``, ``splits``, ``indices``... all grow),
so the bound is enforced by the kernel instead:

* only the jq batch of an untrusted definition runs in a worker process (a small pool,
  started with ``spawn``); its results (plain JSON) come back and are interpreted here,
  so a worker never holds anything but the definition's expressions;
* each worker has ``RLIMIT_AS`` = ``Bounds.memory_mb`` (libjq's failed allocation aborts
  the worker, not the caller) and, per task, an ``RLIMIT_CPU`` soft limit of
  ``Bounds.cpu_seconds`` beyond the CPU it has used so far (SIGXCPU ends it);
* the caller waits at most ``Bounds.deadline_seconds`` of wall time, then kills it;
* results larger than ``Bounds.max_result_bytes`` as JSON are refused in the worker, so
  a definition cannot make the caller keep or unpickle much;
* a worker that dies or times out is replaced, and its definition is **quarantined**:
  later calls fail at once with ``DefinitionQuarantined`` naming the bound that was hit,
  so a hostile definition costs one bounded evaluation, not one per event.

``Evaluator`` is what callers use: ``resolve``/``demand``/``status`` (blocking, for
commands) and ``resolve_async``/``demand_async``/``status_async`` (the caller's event
loop waits on a thread that waits on the worker). Trusted definitions take the
in-process path in both.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import queue
import resource
import signal
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Literal

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.errors import EvaluationError
from dispatcher.workloads.jqrun import DEFAULT_LIMITS, Batch, JqFailure, Limits, ObjectInput
from dispatcher.workloads.model import Definition
from dispatcher.workloads.paths import Location, Locator, in_process
from dispatcher.workloads.resolve import (
    Resolution,
    Text,
    demand_from,
    input_text,
    object_input,
    resolution_from,
    status_from,
)
from dispatcher.workloads.status import StatusReading

__all__ = ["DEFAULT_BOUNDS", "Bounds", "DefinitionQuarantined", "Evaluator"]

Section = Literal["full", "demand", "status"]
Results = list[list[Any] | JqFailure]


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """What one evaluation of an untrusted definition may cost."""

    deadline_seconds: float = 5.0  # wall time the caller waits for one object
    cpu_seconds: int = 2  # CPU time of one object in the worker (kernel-enforced)
    memory_mb: int = 512  # address space of a worker (kernel-enforced)
    max_result_bytes: int = 4 * 1024 * 1024  # JSON size of one object's results
    workers: int = 2


DEFAULT_BOUNDS = Bounds()


class DefinitionQuarantined(EvaluationError):
    """An untrusted definition broke a bound; it is not evaluated again.

    ``bound`` is ``"time"``, ``"cpu"``, ``"memory"``, ``"result size"`` or ``"worker"``
    (the worker died otherwise). A controller sets the definition ``Accepted=False``
    with this message; objects of other kinds are unaffected.
    """

    def __init__(self, *, definition: str, bound: str, detail: str, name: str = "") -> None:
        self.bound = bound
        super().__init__(f"evaluation exceeded its {bound} bound ({detail}); definition "
                         f"quarantined", expression="*", field="(every path)", name=name,
                         definition=definition)


class Evaluator:
    """Resolve objects through a catalog, untrusted definitions under ``Bounds``."""

    def __init__(self, catalog: Catalog, *, trusted: Iterable[Definition] = (),
                 bounds: Bounds = DEFAULT_BOUNDS, limits: Limits = DEFAULT_LIMITS) -> None:
        self.catalog = catalog
        self.bounds = bounds
        self.limits = limits
        self._trusted = {id(d) for d in trusted}
        self._keep = list(trusted)  # ids stay valid while the definitions live
        self._quarantined: dict[int, _BoundHit] = {}
        self._pool = _Pool(bounds)

    @classmethod
    def for_catalog(cls, catalog: Catalog, *, bounds: Bounds = DEFAULT_BOUNDS) -> Evaluator:
        """Trust exactly the built-in catalog's definitions (those ``catalog`` kept)."""
        return cls(catalog, trusted=Catalog.builtin().definitions, bounds=bounds)

    def is_trusted(self, definition: Definition) -> bool:
        """Whether ``definition`` runs in-process (the built-in catalog)."""
        return id(definition) in self._trusted

    def quarantined(self) -> dict[str, str]:
        """Quarantined definition names and why (for an ``Accepted=False`` condition)."""
        names = {id(d): d.name for d in self._keep}
        return {names[key]: f"{hit.bound}: {hit.detail}"
                for key, hit in self._quarantined.items()}

    def quarantine_of(self, definition: Definition) -> str | None:
        """Why this very definition (not another of the same name) is quarantined."""
        hit = self._quarantined.get(id(definition))
        return f"{hit.bound}: {hit.detail}" if hit is not None else None

    # -- blocking ------------------------------------------------------------------------

    def resolve(self, obj: Any) -> Resolution:
        """Resolve ``obj`` (NoDefinitionError, ObjectError, EvaluationError as ``resolve``)."""
        definition, given, results = self._run(obj, "full")
        return resolution_from(definition, obj, results, text=self._locatable(definition, given))

    def demand(self, obj: Any) -> Demand:
        """Only the demand of ``obj``."""
        definition, given, results = self._run(obj, "demand")
        return demand_from(definition, obj, results, text=self._locatable(definition, given))

    def status(self, obj: Any) -> StatusReading:
        """Only the status of ``obj``."""
        definition, _, results = self._run(obj, "status")
        return status_from(definition, obj, results)

    # -- awaitable: the event loop never runs an untrusted expression ---------------------

    async def resolve_async(self, obj: Any) -> Resolution:
        """``resolve`` without blocking the event loop on untrusted definitions."""
        if self.is_trusted(self.catalog.require(obj)):
            return self.resolve(obj)
        return await asyncio.to_thread(self.resolve, obj)

    async def demand_async(self, obj: Any) -> Demand:
        """``demand`` without blocking the event loop on untrusted definitions."""
        if self.is_trusted(self.catalog.require(obj)):
            return self.demand(obj)
        return await asyncio.to_thread(self.demand, obj)

    async def status_async(self, obj: Any) -> StatusReading:
        """``status`` without blocking the event loop on untrusted definitions."""
        if self.is_trusted(self.catalog.require(obj)):
            return self.status(obj)
        return await asyncio.to_thread(self.status, obj)

    # -- locations (copy building: mutate, server-set removal, pod templates) -------------

    def locator(self, definition: Definition) -> Locator:
        """How to evaluate ``definition``'s path expressions on an object: in-process when
        trusted, else in the bounded workers (same bounds and quarantine as ``resolve``:
        a jq ``path()`` of a read path runs the whole expression)."""
        if self.is_trusted(definition):
            return in_process

        def locate(expressions: Sequence[str], text: str) -> list[list[Location] | str]:
            programs = [f"path({expression}\n)" for expression in expressions]
            results = self._bounded(definition, programs, text, name="")
            return [r.message if isinstance(r, JqFailure) else r for r in results]
        return locate

    def close(self) -> None:
        """Stop the worker processes."""
        self._pool.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _locatable(self, definition: Definition, given: ObjectInput) -> Text:
        # a TemplateError's JSON path runs the spec path through jq: trusted ones only
        return (lambda: given.text) if self.is_trusted(definition) else ""

    def _run(self, obj: Any, section: Section) -> tuple[Definition, ObjectInput, Results]:
        definition = self.catalog.require(obj)
        given = object_input(obj, limits=self.limits)
        batch = {"full": definition.full_batch, "demand": definition.demand_batch,
                 "status": definition.status_batch}[section]
        if self.is_trusted(definition):
            return definition, given, batch.evaluate(given)
        return definition, given, self._bounded(definition, batch.expressions,
                                                input_text(given), name=_name(obj))

    def _bounded(self, definition: Definition, expressions: Sequence[str], text: str, *,
                 name: str) -> Results:
        """``expressions`` of an untrusted ``definition`` on ``text`` in a worker; a bound
        hit quarantines the definition."""
        known = self._quarantined.get(id(definition))
        if known is not None:
            raise DefinitionQuarantined(definition=definition.name, bound=known.bound,
                                        detail=known.detail, name=name)
        try:
            return self._pool.run(expressions, text)
        except _NotStarted as error:
            raise EvaluationError(str(error), expression="*", field="(every path)",
                                  name=name, definition=definition.name) from None
        except _BoundHit as hit:
            self._quarantined[id(definition)] = hit
            self._keep.append(definition)
            raise DefinitionQuarantined(definition=definition.name, bound=hit.bound,
                                        detail=hit.detail, name=name) from None


def _name(obj: Any) -> str:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    name = meta.get("name") if isinstance(meta, dict) else None
    return name if isinstance(name, str) else ""


class _NotStarted(Exception):
    """A worker process did not start in time (a loaded host, not the definition's fault):
    the evaluation fails, the definition is not quarantined, a later call tries again."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the evaluation worker did not start within {seconds:g} s")


# How long a new worker may take to start (spawn, imports) before its first task: on a
# loaded host this took seconds, and counting it against a definition's deadline
# quarantined well-behaved definitions.
_STARTUP_SECONDS = 60.0


class _BoundHit(Exception):
    def __init__(self, bound: str, detail: str) -> None:
        self.bound = bound
        self.detail = detail
        super().__init__(f"{bound}: {detail}")


class _Pool:
    """A few worker processes, started on first use, replaced when one dies."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self._idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
        self._started = 0
        self._lock = threading.Lock()
        self._all: list[_Worker] = []

    def run(self, expressions: Sequence[str], text: str) -> Results:
        worker = self._take()
        try:
            results = worker.call(expressions, text)
        except (_BoundHit, _NotStarted):
            worker.kill()
            with self._lock:
                self._started -= 1
            raise
        self._idle.put(worker)
        return results

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle.empty() and self._started < self.bounds.workers:
                self._started += 1
                worker = _Worker(self.bounds)
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


_CONTEXT = multiprocessing.get_context("spawn")  # no fork of a process with threads/loops


class _Worker:
    """One worker process and its pipe."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self._close_lock = threading.Lock()
        self.conn, child = _CONTEXT.Pipe()
        self.process = _CONTEXT.Process(
            target=_serve, args=(child, bounds.memory_mb, bounds.cpu_seconds,
                                 bounds.max_result_bytes), daemon=True)
        self.process.start()
        child.close()
        self._started = False

    def call(self, expressions: Sequence[str], text: str) -> Results:
        if not self._started:
            self._wait_started()
        try:
            self.conn.send((tuple(expressions), text))
            ready = self.conn.poll(self.bounds.deadline_seconds)
        except (BrokenPipeError, ConnectionError, OSError):
            raise self._died() from None
        if not ready:
            raise _BoundHit("time", f"no result within {self.bounds.deadline_seconds:g} s")
        try:
            kind, payload = self.conn.recv()
        except (EOFError, ConnectionError, OSError):
            raise self._died() from None
        if kind == "size":
            raise _BoundHit("result size", payload)
        if kind == "memory":
            raise _BoundHit("memory", payload)
        results: Results = [JqFailure(item["jqfailure"]) if isinstance(item, dict)
                            and set(item) == {"jqfailure"} else item for item in payload]
        return results

    def _wait_started(self) -> None:
        """Wait for the worker's ready message, outside any definition's deadline."""
        try:
            ready = self.conn.poll(_STARTUP_SECONDS)
            message = self.conn.recv() if ready else None
        except (EOFError, ConnectionError, OSError):
            message = None
        if message != ("ready", None):
            raise _NotStarted(_STARTUP_SECONDS)
        self._started = True

    def _died(self) -> _BoundHit:
        self.process.join(timeout=5)
        code = self.process.exitcode
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            return _BoundHit("cpu", f"more than {self.bounds.cpu_seconds} s of CPU")
        if code == -signal.SIGABRT:
            return _BoundHit("memory", f"libjq could not allocate within "
                                       f"{self.bounds.memory_mb} MB")
        return _BoundHit("worker", f"the worker process ended with code {code}")

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


def _serve(conn: Connection, memory_mb: int, cpu_seconds: int, max_bytes: int) -> None:
    """Worker loop: evaluate batches until the pipe closes (runs in the child)."""
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
