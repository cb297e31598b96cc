"""Why a member cannot take a request, with the numbers an operator can act on.

The reason a verdict carries when the packer (``placement.fit``) finds no placement: the
first gang that cannot be placed and what is missing (a product nobody has, a selector no
node matches, taints, too few free GPUs, reservations in flight).
"""

from __future__ import annotations

from collections.abc import Sequence

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.placement.fit import GPU_TOLERATION, PodGroup, eligible

__all__ = ["IN_FLIGHT", "NO_ROOM_NOW", "explain_misfit"]

NO_ROOM_NOW = "fits 0 times"
"""The words every misfit reason about free GPUs ends with (before ``IN_FLIGHT``), whichever
way the numbers fall short (a block too small, room for too few pods, not all shapes at
once; also a block smaller than a pod on nodes that could never hold it: those numbers do
not move). A shortage of nodes, products, tolerated taints or health never says it.
``control.core.pending`` reads all such reasons as one meaning."""

IN_FLIGHT = " ({} GPUs reserved for dispatches in flight)"
"""The clause a misfit reason ends with while GPUs are reserved on the member: a number
that changes with every dispatch in flight, not a different reason
(``control.core.pending`` leaves it out of what a Pending reason means)."""


def explain_misfit(capacity: ClusterCapacity, groups: Sequence[PodGroup]) -> str:
    """Why the demand does not fit, with the numbers an operator can act on."""
    reserved = capacity.reserved
    suffix = IN_FLIGHT.format(reserved) if reserved else ""
    classes = capacity.classes()
    for group in groups:
        product_classes = [c for c in classes
                           if group.product is None or c.product == group.product]
        if not product_classes:
            if group.product is None:
                return "no nodes"
            return f"no nodes with product {group.product}"
        noun = f"with product {group.product}" if group.product else ""
        matching = [c for c in product_classes
                    if all(c.label_map.get(k) == v for k, v in group.selector)]
        if not matching:
            wanted = ",".join(f"{k}={v}" for k, v in group.selector)
            return " ".join(filter(None, ("no nodes", noun, f"match node selector {wanted}")))
        usable = [c for c in matching if eligible(c, group)]
        if not usable:
            taints = sorted({f"{k}={v}:{e}" if v else f"{k}:{e}"
                             for c in matching for k, v, e in c.hard_taints})
            count = sum(c.nodes for c in matching)
            return (f"{_nodes(count, noun)} {'has' if count == 1 else 'have'} taints the pods "
                    f"do not tolerate: {', '.join(taints)}")
        if not any(c.eligible for c in usable):
            count = sum(c.nodes for c in usable)
            return (f"{_nodes(count, noun)} {'is' if count == 1 else 'are all'} NotReady or "
                    f"cordoned")
        if group.gpus <= 0:
            continue
        free = sum(f * len(n) for c in usable for f, n in c.free_nodes.items())
        largest = max((f for c in usable for f in c.free_nodes), default=0)
        room = sum((f // group.gpus) * len(n) for c in usable for f, n in c.free_nodes.items())
        where = f" on nodes {noun}" if group.product else ""
        if group.selector or any(t != GPU_TOLERATION for t in group.tolerations):
            where = f" on the nodes these pods may use{' (' + noun + ')' if noun else ''}"
        if largest < group.gpus:
            return (f"{free} GPUs free{where}, largest free block on one node is {largest}, "
                    f"a pod needs {group.gpus}: {NO_ROOM_NOW}{suffix}")
        if room < group.count:
            return (f"{free} GPUs free{where}, room for {room} of {group.count} pods of "
                    f"{group.gpus} GPUs ({', '.join(group.gangs)}): {NO_ROOM_NOW}{suffix}")
    gpus = sum(g.gpus * g.count for g in groups)
    pods = sum(g.count for g in groups)
    return (f"{capacity.free} GPUs free, largest free block on one node is "
            f"{capacity.largest_free_block}; each pod shape fits alone but not all {pods} pods "
            f"({gpus} GPUs) at once: {NO_ROOM_NOW}{suffix}")


def _nodes(count: int, noun: str) -> str:
    return " ".join(filter(None, (str(count), "node" if count == 1 else "nodes", noun)))
