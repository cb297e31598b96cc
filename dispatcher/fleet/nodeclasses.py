"""Classes of interchangeable nodes: one GPU product, labels and taints.

Placement cannot tell the nodes of a ``NodeClass`` apart except by their free GPUs, so a
class indexes its Ready, schedulable nodes by free GPUs (``free_nodes``, ``sizes``) and gang
fit reads a handful of buckets instead of scanning nodes (``fleet/capacity.py`` keeps the
index up to date; ``placement/fit.py`` reads it).
"""

from __future__ import annotations

import heapq

from dispatcher.fleet.nodes import HARD_EFFECTS, TaintTuple

__all__ = ["ClassKey", "NodeClass", "class_order"]

ClassKey = tuple[str | None, tuple[tuple[str, str], ...], tuple[TaintTuple, ...]]


class NodeClass:
    """Nodes placement cannot tell apart except by free GPUs: one product, labels, taints.

    ``free_nodes`` maps a free-GPU amount (> 0) to the names of the Ready, schedulable nodes
    of the class with exactly that many free GPUs (``sizes``: its keys, ascending);
    ``eligible`` counts those nodes including the ones with nothing free.
    """

    __slots__ = ("eligible", "fit_cache", "free_nodes", "hard_taints", "key", "label_map",
                 "labels", "nodes", "product", "sizes", "taints")

    def __init__(self, key: ClassKey) -> None:
        self.key = key
        self.product, self.labels, self.taints = key
        self.label_map: dict[str, str] = dict(self.labels)
        self.hard_taints: tuple[TaintTuple, ...] = tuple(
            t for t in self.taints if t[2] in HARD_EFFECTS)
        self.free_nodes: dict[int, set[str]] = {}
        self.sizes: list[int] = []  # keys of free_nodes, ascending
        self.eligible = 0
        self.nodes = 0
        # Placement memo: pod requirement -> may such a pod run on this class (labels/taints
        # of a class never change, so the answer never goes stale).
        self.fit_cache: dict[object, bool] = {}

    def histogram(self) -> dict[int, int]:
        """Free GPUs -> number of eligible nodes with exactly that many free (> 0)."""
        return {free: len(names) for free, names in self.free_nodes.items()}

    def pick(self, free: int, count: int, *, exclude: frozenset[str] = frozenset()) -> list[str]:
        """The ``count`` alphabetically first node names with ``free`` GPUs free.

        Alphabetical, not insertion order, so equal states give equal assignments whatever
        order the events came in.
        """
        names = self.free_nodes.get(free, ())
        if exclude:
            return heapq.nsmallest(count, (n for n in names if n not in exclude))
        return heapq.nsmallest(count, names)


def class_order(cls: NodeClass) -> tuple[str, tuple[tuple[str, str], ...],
                                          tuple[TaintTuple, ...]]:
    return (cls.product or "", cls.labels, cls.taints)
