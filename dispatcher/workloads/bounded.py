"""Bounded evaluation of untrusted definitions: jq in niced worker processes with rlimits,
the workers' time shared fairly across namespaces, a broken bound blamed on the object.

Trust model: the built-in catalog is reviewed code and is *trusted*: it runs in-process
(the fast path, microseconds). Any other definition (``--definitions`` files, definition
objects on the hub) is *untrusted*: whoever may write one must not be able to stall or
kill the process that evaluates it, and whoever writes *objects* for it (any tenant) must
not be able to turn it against other tenants. The load-time safety check makes definitions
loop-free, but not cheap: ``("x" * 1000000000) | length`` allocates 1 GB and
``reduce (.a, .a, ... 26 times) as $x ([1]; . + .)`` doubles an array until libjq aborts
the whole process. No static check over jq's builtins is both sound and useful (string
repetition, ``+``, ``*`` on objects, ``tostring``, ``splits``, ``indices``... all grow),
so the bound is enforced by the kernel instead:

* only the jq batch of an untrusted definition runs in a worker process (``workloads.jqpool``:
  a small pool, started with ``spawn``, each worker niced ``Bounds.nice`` below the
  controller, with ``RLIMIT_AS`` and a per-task ``RLIMIT_CPU``, a wall deadline that counts
  only CPU the worker was given, a cap on the result's size); its results (plain JSON) come
  back and are interpreted here, so a worker never holds anything but the expressions;
* the awaitable calls (the controller's) take turns by namespace (``workloads.fairshare``):
  the pool's time goes to the namespace that used the least of it, on threads of its own,
  so one tenant's slow objects delay that tenant, and never the event loop's executor;
* a broken bound quarantines **the object** at its version (``ObjectQuarantined``: later
  calls on that version fail at once; any change evaluates it again), and **the
  definition** only once it broke bounds on several objects from more than one namespace
  (``workloads.quarantine``, ``Bounds.quarantine``; then ``DefinitionQuarantined``), so
  one tenant's object cannot switch a definition off for everyone.

``Evaluator`` is what callers use: ``resolve``/``demand``/``status`` (blocking, for
commands) and ``resolve_async``/``demand_async``/``status_async``/``run`` (the caller's
event loop waits for its turn, then on a thread that waits on the worker). Trusted
definitions take the in-process path in both.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.errors import EvaluationError
from dispatcher.workloads.fairshare import FairTurns
from dispatcher.workloads.jqpool import BoundHit, Pool, Results, Unavailable
from dispatcher.workloads.jqrun import DEFAULT_LIMITS, JqFailure, Limits, ObjectInput
from dispatcher.workloads.model import Definition
from dispatcher.workloads.paths import Location, Locator, in_process, object_text
from dispatcher.workloads.quarantine import (
    DEFAULT_RULE,
    Hit,
    QuarantineBook,
    QuarantineRule,
    Subject,
)
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

__all__ = ["DEFAULT_BOUNDS", "BoundExceeded", "Bounds", "DefinitionQuarantined",
           "EvaluationUnavailable", "Evaluator", "ObjectQuarantined", "Subject"]

Section = Literal["full", "demand", "status"]
_R = TypeVar("_R")


@dataclass(frozen=True, kw_only=True)
class Bounds:
    """What one evaluation of an untrusted definition may cost, and who answers for it."""

    deadline_seconds: float = 5.0  # wall time the caller waits for one object (CPU given)
    cpu_seconds: int = 2  # CPU time of one object in the worker (kernel-enforced)
    memory_mb: int = 512  # address space of a worker (kernel-enforced)
    max_result_bytes: int = 4 * 1024 * 1024  # JSON size of one object's results
    workers: int = 2
    nice: int = 10  # how far below the controller's CPU priority the workers run
    starved_seconds: float = 60.0  # past the deadline, how long a worker given no CPU
    # (a busy host) is waited for before the evaluation is given up, blaming nobody
    quarantine: QuarantineRule = field(default_factory=lambda: DEFAULT_RULE)


DEFAULT_BOUNDS = Bounds()


class BoundExceeded(EvaluationError):
    """An untrusted definition broke a bound on an object: ``bound`` is ``"time"``,
    ``"cpu"``, ``"memory"``, ``"result size"`` or ``"worker"`` (the worker died
    otherwise); ``detail`` says by how much."""

    def __init__(self, message: str, *, definition: str, bound: str, detail: str,
                 name: str = "") -> None:
        self.bound = bound
        self.detail = detail
        super().__init__(message, expression="*", field="(every path)", name=name,
                         definition=definition)


class ObjectQuarantined(BoundExceeded):
    """The bound was broken on this object: the object is quarantined (evaluated again
    only once it changes); the definition and every other object stay as they are."""

    def __init__(self, *, definition: str, bound: str, detail: str, name: str = "") -> None:
        super().__init__(f"evaluation exceeded its {bound} bound ({detail}) on this "
                         f"object; the object is quarantined: not evaluated again until it "
                         f"changes (other objects of its kind are unaffected)",
                         definition=definition, bound=bound, detail=detail, name=name)


class DefinitionQuarantined(BoundExceeded):
    """The definition broke bounds on enough objects from enough namespaces
    (``Bounds.quarantine``): it is not evaluated again. A controller sets the definition
    ``Accepted=False`` with this message; objects of other kinds are unaffected."""

    def __init__(self, *, definition: str, bound: str, detail: str, name: str = "") -> None:
        super().__init__(f"evaluation exceeded its {bound} bound ({detail}); definition "
                         f"quarantined", definition=definition, bound=bound, detail=detail,
                         name=name)


class EvaluationUnavailable(EvaluationError):
    """No worker could evaluate now (it did not start, or got no CPU on a busy host):
    nobody's fault, nothing is quarantined, and the caller should try again later (a
    transient failure: never remembered as the object's result)."""

    transient = True

    def __init__(self, message: str, *, definition: str, name: str = "") -> None:
        super().__init__(message, expression="*", field="(every path)", name=name,
                         definition=definition)


class Evaluator:
    """Resolve objects through a catalog, untrusted definitions under ``Bounds``."""

    def __init__(self, catalog: Catalog, *, trusted: Iterable[Definition] = (),
                 bounds: Bounds = DEFAULT_BOUNDS, limits: Limits = DEFAULT_LIMITS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self.bounds = bounds
        self.limits = limits
        self._clock = clock
        self._trusted = {id(d) for d in trusted}
        self._keep: dict[int, Definition] = {id(d): d for d in trusted}
        """Definitions whose ids are keys here: kept alive so no id is reused."""
        self._book = QuarantineBook(bounds.quarantine)
        self._pool = Pool(workers=bounds.workers, deadline_seconds=bounds.deadline_seconds,
                          cpu_seconds=bounds.cpu_seconds, memory_mb=bounds.memory_mb,
                          max_result_bytes=bounds.max_result_bytes, nice=bounds.nice,
                          starved_seconds=bounds.starved_seconds)
        self._turns: FairTurns | None = None  # made on first awaitable use

    @classmethod
    def for_catalog(cls, catalog: Catalog, *, bounds: Bounds = DEFAULT_BOUNDS) -> Evaluator:
        """Trust exactly the built-in catalog's definitions (those ``catalog`` kept)."""
        return cls(catalog, trusted=Catalog.builtin().definitions, bounds=bounds)

    def is_trusted(self, definition: Definition) -> bool:
        """Whether ``definition`` runs in-process (the built-in catalog)."""
        return id(definition) in self._trusted

    def quarantined(self) -> dict[str, str]:
        """Quarantined definition names and why (for an ``Accepted=False`` condition)."""
        return {self._keep[key].name: str(hit)
                for key, hit in self._book.definitions().items()}

    def quarantine_of(self, definition: Definition) -> str | None:
        """Why this very definition (not another of the same name) is quarantined."""
        hit = self._book.of_definition(id(definition))
        return str(hit) if hit is not None else None

    def object_quarantine(self, definition: Definition, obj: Any) -> str | None:
        """Why ``obj`` (at its current version) is quarantined under ``definition``."""
        hit = self._book.of_object(id(definition), Subject.of(obj))
        return str(hit) if hit is not None else None

    def worker_pids(self) -> list[int]:
        """The worker processes' ids (tests read their priority)."""
        return self._pool.pids()

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
        return await self._maybe_off_loop(obj, self.resolve)

    async def demand_async(self, obj: Any) -> Demand:
        """``demand`` without blocking the event loop on untrusted definitions."""
        return await self._maybe_off_loop(obj, self.demand)

    async def status_async(self, obj: Any) -> StatusReading:
        """``status`` without blocking the event loop on untrusted definitions."""
        return await self._maybe_off_loop(obj, self.status)

    async def run(self, tenant: str, call: Callable[[], _R]) -> _R:
        """``call()`` (which evaluates untrusted definitions through this evaluator, e.g.
        with ``locator``) on a thread of the pool, in ``tenant``'s fair turn: at most
        ``Bounds.workers`` such calls run at once, so none waits inside for a worker."""
        if self._turns is None:
            self._turns = FairTurns(self.bounds.workers)
        return await self._turns.run(tenant, call)

    async def _maybe_off_loop(self, obj: Any, call: Callable[[Any], _R]) -> _R:
        if self.is_trusted(self.catalog.require(obj)):
            return call(obj)
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        namespace = meta.get("namespace") if isinstance(meta, dict) else None
        return await self.run(str(namespace or ""), lambda: call(obj))

    # -- locations (copy building: mutate, server-set removal, pod templates) -------------

    def locator(self, definition: Definition, *, subject: Any = None) -> Locator:
        """How to evaluate ``definition``'s path expressions on an object: in-process when
        trusted, else in the bounded workers (same bounds and quarantine as ``resolve``:
        a jq ``path()`` of a read path runs the whole expression). ``subject`` is the
        object the paths run on (its quarantine); without it, the text names it."""
        if self.is_trusted(definition):
            return in_process

        def locate(expressions: Sequence[str], obj: Any) -> list[list[Location] | str]:
            text = object_text(obj)
            programs = [f"path({expression}\n)" for expression in expressions]
            who = Subject.of(subject) if subject is not None else Subject.of_text(text)
            results = self._bounded(definition, programs, text, subject=who)
            return [r.message if isinstance(r, JqFailure) else r for r in results]
        return locate

    def close(self) -> None:
        """Stop the worker processes (and the threads that wait on them)."""
        if self._turns is not None:
            self._turns.close()
        self._pool.close()

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------

    def _locatable(self, definition: Definition, given: ObjectInput) -> Text:
        # a TemplateError's JSON path runs the spec path through jq: trusted ones only
        return (lambda: given.text) if self.is_trusted(definition) else ""

    def _run(self, obj: Any, section: Section
             ) -> tuple[Definition, ObjectInput, Sequence[list[Any] | JqFailure]]:
        definition = self.catalog.require(obj)
        given = object_input(obj, limits=self.limits)
        batch = {"full": definition.full_batch, "demand": definition.demand_batch,
                 "status": definition.status_batch}[section]
        if self.is_trusted(definition):
            return definition, given, batch.evaluate(given)
        text = input_text(given)
        return definition, given, self._bounded(definition, batch.expressions, text,
                                                subject=Subject.of(obj))

    def _bounded(self, definition: Definition, expressions: Sequence[str], text: str, *,
                 subject: Subject) -> Results:
        """``expressions`` of an untrusted ``definition`` on ``text`` in a worker; a bound
        hit quarantines the object, and the definition once the rule says so."""
        key = id(definition)
        name = subject.name
        known = self._book.of_definition(key)
        if known is not None:
            raise DefinitionQuarantined(definition=definition.name, bound=known.bound,
                                        detail=known.detail, name=name)
        held = self._book.of_object(key, subject)
        if held is not None:
            raise ObjectQuarantined(definition=definition.name, bound=held.bound,
                                    detail=held.detail, name=name)
        try:
            results = self._pool.run(expressions, text)
        except Unavailable as error:
            raise EvaluationUnavailable(str(error), definition=definition.name,
                                        name=name) from None
        except BoundHit as hit:
            self._keep[key] = definition
            found = Hit(bound=hit.bound, detail=hit.detail)
            if self._book.hit(key, subject, found, now=self._clock()):
                raise DefinitionQuarantined(definition=definition.name, bound=hit.bound,
                                            detail=hit.detail, name=name) from None
            raise ObjectQuarantined(definition=definition.name, bound=hit.bound,
                                    detail=hit.detail, name=name) from None
        self._book.cleared(key, subject)
        return results
