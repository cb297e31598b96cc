"""A member's node and pod events into its capacity and reservations.

Capacity first, then reservations, in one synchronous step: a bound pod's GPUs move from
reserved to used at once (never counted twice, never forgotten). ``what`` is ``nodes`` or
``pods``, the two watches of a member connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.reservations import MemberReservations
from dispatcher.kube import watch

__all__ = ["apply", "relist"]


def relist(capacity: ClusterCapacity, reservations: MemberReservations, what: str,
           objects: list[dict[str, Any]]) -> None:
    """Replace every node or pod."""
    if what == "nodes":
        capacity.relist_nodes(objects)
    else:
        capacity.relist_pods(objects)
        reservations.relist_pods(objects)  # after capacity: see reservations


def apply(capacity: ClusterCapacity, reservations: MemberReservations, what: str,
          change: watch.Changed) -> None:
    """One watch event of a node or pod."""
    obj: Mapping[str, Any] = change.object
    if what == "nodes":
        if change.type == "DELETED":
            capacity.delete_node(str((obj.get("metadata") or {}).get("name")))
        else:
            capacity.upsert_node(obj)
        return
    if change.type == "DELETED":
        capacity.delete_pod(obj)
        reservations.delete_pod(obj)
    else:
        capacity.upsert_pod(obj)  # finished or unbound: dropped by the model
        reservations.upsert_pod(obj)
