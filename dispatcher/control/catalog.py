"""The controller's catalog as a value that can be swapped, with its bounded evaluator.

Hub definition objects change the catalog while the controller runs (``control.definitions``
merges them); every reader (hub and member watchers, the reconciler) reads ``current`` at
the moment it decides, so the next decision uses the new definition and nothing restarts.
Every evaluation goes through ``evaluator``: the built-in catalog's definitions in-process
(trusted, the fast path), any other one in the bounded worker pool
(``workloads.bounded``), so a definition from the cluster never runs jq on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from dispatcher.workloads.bounded import DEFAULT_BOUNDS, Bounds, Evaluator
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.model import Definition

__all__ = ["LiveCatalog"]

Listener = Callable[[Catalog, Catalog], None]


class LiveCatalog:
    """``current`` catalog, ``base`` (what the controller started with), ``evaluator``."""

    def __init__(self, base: Catalog, *, bounds: Bounds = DEFAULT_BOUNDS) -> None:
        self.base = base
        self.builtin = Catalog.builtin()
        self.evaluator = Evaluator.for_catalog(base, bounds=bounds)
        self.version = 0
        self._listeners: list[Listener] = []
        self.quarantine = asyncio.Event()
        """Set when an evaluation quarantined a definition (its status must say so)."""

    @property
    def current(self) -> Catalog:
        """The effective catalog now."""
        return self.evaluator.catalog

    def subscribe(self, listener: Listener) -> None:
        """Call ``listener(old, new)`` after every swap (synchronously: keep it cheap)."""
        self._listeners.append(listener)

    def swap(self, catalog: Catalog) -> None:
        """Make ``catalog`` current; the evaluator keeps its workers and quarantine."""
        old = self.evaluator.catalog
        if catalog is old:
            return
        self.evaluator.catalog = catalog
        self.version += 1
        for listener in self._listeners:
            listener(old, catalog)

    def trusted(self, definition: Definition) -> bool:
        """Whether ``definition`` is evaluated in-process (the built-in catalog)."""
        return self.evaluator.is_trusted(definition)

    def notify_quarantine(self) -> None:
        """An evaluation hit ``DefinitionQuarantined``: wake the definition watcher."""
        self.quarantine.set()

    def close(self) -> None:
        """Stop the evaluator's worker processes."""
        self.evaluator.close()
