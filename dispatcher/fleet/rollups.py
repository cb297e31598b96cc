"""Read-only values the capacity model hands out: one node, one product, a cluster summary.

Plain frozen data, cheap to build on demand (``ClusterCapacity.node``/``summary``), safe to
keep after later events. The MemberCluster status shape is ``fleet.status.capacity_status``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dispatcher.fleet.nodes import TaintTuple

__all__ = ["CapacitySummary", "NodeState", "ProductCapacity"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeState:
    """One node as placement and tests see it."""

    name: str
    product: str | None
    allocatable: int
    used: int
    reserved: int
    free: int
    ready: bool
    unschedulable: bool
    labels: Mapping[str, str]
    taints: tuple[TaintTuple, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class ProductCapacity:
    """Roll-up for one GPU product (``None``: nodes without the product label)."""

    product: str | None
    nodes: int
    allocatable: int
    free: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CapacitySummary:
    """Cluster roll-ups, for MemberCluster status, ``dispatcher clusters`` and reasons."""

    nodes: int
    ready_nodes: int
    not_ready_nodes: int
    cordoned_nodes: int
    capacity: int
    allocatable: int
    used: int
    reserved: int
    free: int
    largest_free_block: int
    products: tuple[ProductCapacity, ...]
