"""A member's own queues on the ``--member-kueue`` profile: the fleet file's ``kueue``
objects, created on the member as its platform team would.

ResourceFlavors first, then ClusterQueues, then LocalQueues (each in its namespace, created
when missing), so Kueue never sees a queue naming what does not exist yet. A ``status`` in
the fleet file is for offline reads (``explain --fleet``): the member's Kueue writes its
own, so it is dropped here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dispatcher.devfleet.multikueue import BASE, apply_object
from dispatcher.devfleet.rest import Rest

__all__ = ["apply_objects", "cluster_queue_paths"]

_ORDER = ("ResourceFlavor", "ClusterQueue", "LocalQueue")
_PLURAL = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues",
           "LocalQueue": "localqueues"}


def _collection(obj: Mapping[str, Any]) -> str:
    meta = obj["metadata"]
    if obj["kind"] == "LocalQueue":
        return f"{BASE}/namespaces/{meta['namespace']}/localqueues"
    return f"{BASE}/{_PLURAL[obj['kind']]}"


def apply_objects(rest: Rest, objects: Sequence[Mapping[str, Any]]) -> None:
    """Create (or replace) ``objects`` on the member, in dependency order."""
    for kind in _ORDER:
        for obj in (o for o in objects if o["kind"] == kind):
            body = {k: v for k, v in obj.items() if k != "status"}
            if kind == "LocalQueue":
                rest.ensure("/api/v1/namespaces", {
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": obj["metadata"]["namespace"]}})
            apply_object(rest, _collection(obj), body)


def cluster_queue_paths(objects: Sequence[Mapping[str, Any]]) -> list[str]:
    """The ClusterQueues among ``objects``: what must turn Active."""
    return [f"{_collection(o)}/{o['metadata']['name']}" for o in objects
            if o["kind"] == "ClusterQueue"]
