"""Live GPU capacity of one member cluster, updated incrementally from Node and Pod events.

Placement needs per-node free GPUs for 100 members x 1,000 nodes, and every watch event must
cost microseconds, so nothing is ever recomputed from scratch:

- nodes that are interchangeable for placement (same GPU product, labels and taints) share
  one ``NodeClass`` (``fleet/nodeclasses.py``; re-exported here for its readers); a class
  indexes its Ready, schedulable nodes by free GPUs, so gang fit reads a handful of
  (free GPUs -> node count) buckets instead of scanning nodes;
- cluster roll-ups (total, allocatable, free, per product, largest free block) are counters
  kept up to date by detaching a node's contribution before a change and attaching it after;
- only pods that hold GPUs on a node are stored, as ``key -> (node, gpus)``; a pod bound to a
  node that is not known yet (watch order) is counted as soon as the node arrives.

Reservations (GPUs promised to dispatches whose pods are not bound yet) are subtracted per
node through ``reserve``; ``fleet.reservations`` decides what to reserve and release.

"Free" everywhere means allocatable minus used minus reserved on Ready, schedulable nodes
(tainted nodes included: a tolerating pod may use them; placement checks taints per pod).
Not thread-safe by design: the controller mutates and reads it from one event loop, and a
placement decision reads it synchronously, so the view never changes under a decision. Use
``snapshot()`` for a copy that must outlive later events (simulation, offline explain).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

from dispatcher.fleet.nodeclasses import ClassKey, NodeClass, class_order
from dispatcher.fleet.nodes import (
    NodeFacts,
    node_facts,
    pod_binding,
    pod_key,
)
from dispatcher.fleet.rollups import CapacitySummary, NodeState, ProductCapacity

__all__ = ["CapacitySummary", "ClusterCapacity", "NodeClass", "NodeState", "ProductCapacity"]

class _Node:
    """Mutable per-node state; compact (``__slots__``, shared class and interned name)."""

    __slots__ = ("allocatable", "capacity", "cls", "name", "ready", "reserved",
                 "unschedulable", "used")

    def __init__(self, facts: NodeFacts, cls: NodeClass) -> None:
        self.name = facts.name
        self.cls = cls
        self.capacity = facts.capacity
        self.allocatable = facts.allocatable
        self.ready = facts.ready
        self.unschedulable = facts.unschedulable
        self.used = 0
        self.reserved = 0

    @property
    def eligible(self) -> bool:
        return self.ready and not self.unschedulable

    @property
    def free(self) -> int:
        return max(self.allocatable - self.used - self.reserved, 0)


class ClusterCapacity:
    """GPU capacity of one member, fed by Node/Pod watch events (see the module docstring)."""

    def __init__(self) -> None:
        self._nodes: dict[str, _Node] = {}
        self._classes: dict[ClassKey, NodeClass] = {}
        self._pods: dict[str, tuple[str, int]] = {}
        # GPUs held (or reserved) on nodes the model has not seen (yet).
        self._orphan_used: dict[str, int] = {}
        self._orphan_reserved: dict[str, int] = {}
        self._capacity = 0
        self._allocatable = 0
        self._used = 0
        self._reserved = 0
        self._free = 0
        self._not_ready = 0
        self._cordoned = 0
        self._free_hist: dict[int, int] = {}
        # product -> [nodes, allocatable, free]
        self._products: dict[str | None, list[int]] = {}
        self._class_list: tuple[NodeClass, ...] | None = None
        # Placement memo over the current class list (e.g. pod requirement -> eligible
        # classes); cleared whenever a class appears or disappears.
        self.class_memo: dict[str, tuple[NodeClass, ...]] = {}
        # Grows with every change of any node's free GPUs (placement memoises a verdict
        # per version: a member that did not change since the last decision costs nothing).
        self.version = 0
        self.verdict_memo: dict[object, object] = {}

    # -- contributions -------------------------------------------------------------------

    def _detach(self, node: _Node) -> None:
        self.version += 1
        cls = node.cls
        product = self._products[cls.product]
        product[0] -= 1
        product[1] -= node.allocatable
        self._capacity -= node.capacity
        self._allocatable -= node.allocatable
        self._used -= node.used
        self._reserved -= node.reserved
        cls.nodes -= 1
        if not node.ready:
            self._not_ready -= 1
        if node.unschedulable:
            self._cordoned -= 1
        if node.eligible:
            free = node.free
            cls.eligible -= 1
            product[2] -= free
            self._free -= free
            if free > 0:
                names = cls.free_nodes[free]
                names.discard(node.name)
                if not names:
                    del cls.free_nodes[free]
                    cls.sizes.remove(free)
                left = self._free_hist[free] - 1
                if left:
                    self._free_hist[free] = left
                else:
                    del self._free_hist[free]

    def _attach(self, node: _Node) -> None:
        self.version += 1
        cls = node.cls
        product = self._products.setdefault(cls.product, [0, 0, 0])
        product[0] += 1
        product[1] += node.allocatable
        self._capacity += node.capacity
        self._allocatable += node.allocatable
        self._used += node.used
        self._reserved += node.reserved
        cls.nodes += 1
        if not node.ready:
            self._not_ready += 1
        if node.unschedulable:
            self._cordoned += 1
        if node.eligible:
            free = node.free
            cls.eligible += 1
            product[2] += free
            self._free += free
            if free > 0:
                names = cls.free_nodes.get(free)
                if names is None:
                    names = cls.free_nodes[free] = set()
                    bisect.insort(cls.sizes, free)
                names.add(node.name)
                self._free_hist[free] = self._free_hist.get(free, 0) + 1

    def _class(self, facts: NodeFacts) -> NodeClass:
        key: ClassKey = (facts.product, facts.labels, facts.taints)
        cls = self._classes.get(key)
        if cls is None:
            cls = self._classes[key] = NodeClass(key)
            self._class_list = None
            self.class_memo.clear()
        return cls

    def _drop_empty(self, cls: NodeClass) -> None:
        if cls.nodes == 0:
            self._classes.pop(cls.key, None)
            self._class_list = None
            self.class_memo.clear()
            product = self._products.get(cls.product)
            if product is not None and product[0] == 0:
                del self._products[cls.product]

    def _add_used(self, node_name: str, delta: int, *, reserved: bool = False) -> None:
        node = self._nodes.get(node_name)
        if node is None:
            orphans = self._orphan_reserved if reserved else self._orphan_used
            total = orphans.get(node_name, 0) + delta
            if total:
                orphans[node_name] = total
            else:
                orphans.pop(node_name, None)
            return
        self._detach(node)
        if reserved:
            node.reserved += delta
        else:
            node.used += delta
        self._attach(node)

    # -- events --------------------------------------------------------------------------

    def upsert_node(self, node: Mapping[str, Any]) -> None:
        """A Node was added or modified (a watch ADDED/MODIFIED event, or a list item)."""
        facts = node_facts(node)
        old = self._nodes.get(facts.name)
        if old is not None:
            self._detach(old)
            old_cls = old.cls
            if old_cls.key != (facts.product, facts.labels, facts.taints):
                old.cls = self._class(facts)
                self._drop_empty(old_cls)
            old.capacity = facts.capacity
            old.allocatable = facts.allocatable
            old.ready = facts.ready
            old.unschedulable = facts.unschedulable
            self._attach(old)
            return
        fresh = _Node(facts, self._class(facts))
        fresh.used = self._orphan_used.pop(facts.name, 0)
        fresh.reserved = self._orphan_reserved.pop(facts.name, 0)
        self._nodes[facts.name] = fresh
        self._attach(fresh)

    def delete_node(self, name: str) -> None:
        """A Node was deleted; pods still bound to it keep their GPUs until they go too."""
        node = self._nodes.pop(name, None)
        if node is None:
            return
        self._detach(node)
        if node.used:
            self._orphan_used[node.name] = self._orphan_used.get(node.name, 0) + node.used
        if node.reserved:
            self._orphan_reserved[node.name] = (
                self._orphan_reserved.get(node.name, 0) + node.reserved)
        self._drop_empty(node.cls)

    def upsert_pod(self, pod: Mapping[str, Any]) -> None:
        """A Pod was added or modified: bound, rebound, finished (Succeeded/Failed), ..."""
        key = pod_key(pod)
        binding = pod_binding(pod)
        old = self._pods.get(key)
        if old == binding:
            return
        if old is not None:
            self._add_used(old[0], -old[1])
        if binding is None:
            self._pods.pop(key, None)
            return
        self._pods[key] = binding
        self._add_used(binding[0], binding[1])

    def delete_pod(self, pod: Mapping[str, Any] | str) -> None:
        """A Pod was deleted: pass the object from the DELETED event or its ``ns/name`` key."""
        key = pod if isinstance(pod, str) else pod_key(pod)
        old = self._pods.pop(key, None)
        if old is not None:
            self._add_used(old[0], -old[1])

    def relist_nodes(self, nodes: Iterable[Mapping[str, Any]]) -> None:
        """A full Node list (initial list, or re-list after 410 Gone): nodes missing from it
        are deleted, the rest upserted; pods and reservations are kept."""
        nodes = list(nodes)
        present = {str((n.get("metadata") or {}).get("name") or "") for n in nodes}
        for name in [name for name in self._nodes if name not in present]:
            self.delete_node(name)
        for raw in nodes:
            self.upsert_node(raw)

    def relist_pods(self, pods: Iterable[Mapping[str, Any]]) -> None:
        """A full Pod list: stored pods missing from it are deleted, the rest upserted."""
        pods = list(pods)
        present = {pod_key(p) for p in pods}
        for key in [key for key in self._pods if key not in present]:
            self.delete_pod(key)
        for raw in pods:
            self.upsert_pod(raw)

    def pod_keys(self) -> frozenset[str]:
        """``namespace/name`` of every pod holding GPUs (the only pods stored)."""
        return frozenset(self._pods)

    def reserve(self, node: str, gpus: int) -> None:
        """Add ``gpus`` (negative to release) to the reservations held on ``node``."""
        if gpus:
            self._add_used(node, gpus, reserved=True)

    # -- reads ---------------------------------------------------------------------------

    @property
    def free(self) -> int:
        """Free GPUs on Ready, schedulable nodes, after reservations."""
        return self._free

    @property
    def reserved(self) -> int:
        """GPUs reserved on known nodes."""
        return self._reserved

    @property
    def largest_free_block(self) -> int:
        """Most free GPUs on one Ready, schedulable node (O(distinct free amounts))."""
        return max(self._free_hist, default=0)

    @property
    def node_count(self) -> int:
        return len(self._nodes)

    @property
    def pod_count(self) -> int:
        """Pods holding GPUs on a node (the only pods stored)."""
        return len(self._pods)

    def classes(self) -> tuple[NodeClass, ...]:
        """Node classes in a deterministic order (by product, labels, taints); cached."""
        if self._class_list is None:
            self._class_list = tuple(sorted(self._classes.values(), key=class_order))
        return self._class_list

    def products(self) -> frozenset[str | None]:
        """GPU products present on any node (``None``: nodes without the label)."""
        return frozenset(self._products)

    def node(self, name: str) -> NodeState | None:
        """One node's state, or None."""
        node = self._nodes.get(name)
        if node is None:
            return None
        return NodeState(name=node.name, product=node.cls.product,
                         allocatable=node.allocatable, used=node.used, reserved=node.reserved,
                         free=node.free, ready=node.ready, unschedulable=node.unschedulable,
                         labels=MappingProxyType(node.cls.label_map), taints=node.cls.taints)

    def nodes(self) -> Iterator[NodeState]:
        """Every node, by name."""
        for name in sorted(self._nodes):
            state = self.node(name)
            if state is not None:
                yield state

    def summary(self) -> CapacitySummary:
        """Roll-ups in O(products + distinct free amounts)."""
        products = tuple(
            ProductCapacity(product=p, nodes=v[0], allocatable=v[1], free=v[2])
            for p, v in sorted(self._products.items(), key=lambda item: item[0] or ""))
        nodes = len(self._nodes)
        return CapacitySummary(
            nodes=nodes, ready_nodes=nodes - self._not_ready, not_ready_nodes=self._not_ready,
            cordoned_nodes=self._cordoned, capacity=self._capacity,
            allocatable=self._allocatable, used=self._used, reserved=self._reserved,
            free=self._free, largest_free_block=self.largest_free_block, products=products)

    def snapshot(self) -> ClusterCapacity:
        """An independent copy (O(nodes + pods)) for uses that outlive later events."""
        copy = ClusterCapacity()
        copy._pods = dict(self._pods)
        copy._orphan_used = dict(self._orphan_used)
        copy._orphan_reserved = dict(self._orphan_reserved)
        for node in self._nodes.values():
            cls = copy._classes.get(node.cls.key)
            if cls is None:
                cls = copy._classes[node.cls.key] = NodeClass(node.cls.key)
                copy._class_list = None
            clone = _Node.__new__(_Node)
            for slot in _Node.__slots__:
                setattr(clone, slot, getattr(node, slot))
            clone.cls = cls
            copy._nodes[node.name] = clone
            copy._attach(clone)
        return copy
