"""The member writes of a gang plan (``control.core.gangsched``): create its objects before the
copy, make them the copy's children after.

Order, for crash safety: the Workload / PodGroups first. A pod that names a missing
Workload waits unschedulable until it appears; created first, it is there before any pod.
A crash between the two leaves an object that waits for its copy: the retried submit
finds it (AlreadyExists, ours by its stamps) and goes on, so nothing is duplicated. After
the copy exists, each object gets the copy as its owner (merge patch, idempotent), so the
member's garbage collector deletes it with the copy; a copy the member refuses for good
takes its objects with it (``discard_objects``). A crash between the copy's create
and this patch leaves the object without an owner until the next submit of the same copy
(not the adoption of the copy by a restarted controller): then it outlives the copy; it
holds no capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.control.core.copies import Rejection
from dispatcher.control.core.gangsched import GangPlan, owned
from dispatcher.control.core.names import ORIGIN_LABEL
from dispatcher.fleet.reservations import HUB_UID_LABEL
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, NotFound
from dispatcher.kube.gangapis import API_OF, NONE, Mechanism
from dispatcher.kube.resources import GroupVersionKind, ResourceRef

__all__ = ["adopt_objects", "create_objects", "discard_objects", "served"]


async def served(client: KubeClient, gvk: GroupVersionKind) -> ResourceRef | None:
    """The member's resource for a gang object's kind, None when it does not serve it."""
    return await client.discovery.resource(gvk.api_version, gvk.kind)


async def usable(client: KubeClient, mechanism: Mechanism) -> Mechanism:
    """``mechanism`` when the member serves its gang API right now (discovery, cached per
    client), else ``none``."""
    if mechanism == NONE:
        return NONE
    return mechanism if await served(client, API_OF[mechanism]) is not None else NONE


async def create_objects(client: KubeClient, gang_plan: GangPlan, *, cluster: str,
                         hub_id: str, hub_uid: str) -> Rejection | None:
    """Create the plan's objects; an existing one that is ours (origin and hub uid) is
    fine, one that is not is a Rejection (its pods would join a stranger's gang).
    Transient failures raise (the worker's back-off retries the whole submit)."""
    for obj in gang_plan.objects:
        ref = await served(client, GroupVersionKind.of_object(obj))
        if ref is None:
            return Rejection.of(cluster, status=404, reason="GangAPINotServed",
                                message=f"{cluster} no longer serves {obj['kind']} "
                                        f"({obj['apiVersion']})")
        meta = obj["metadata"]
        try:
            await client.request("POST", ref.collection(meta.get("namespace")), body=obj)
        except Conflict:
            existing = await client.request("GET", ref.item(meta["name"],
                                                            meta.get("namespace")))
            if not _ours(existing, hub_id=hub_id, hub_uid=hub_uid):
                return Rejection.of(cluster, status=409, reason="GangObjectConflict",
                                    message=f"{obj['kind']} {meta['name']} exists on "
                                            f"{cluster} and is not this workload's")
    return None


async def adopt_objects(client: KubeClient, gang_plan: GangPlan,
                        created: Mapping[str, Any]) -> None:
    """Make every object of the plan a child of ``created`` (the copy with its uid)."""
    if not gang_plan.objects or not (created.get("metadata") or {}).get("uid"):
        return
    patch = owned(created)
    for obj in gang_plan.objects:
        ref = await served(client, GroupVersionKind.of_object(obj))
        if ref is None:
            continue
        meta = obj["metadata"]
        await client.request("PATCH", ref.item(meta["name"], meta.get("namespace")),
                             body=patch, content_type=JSON_MERGE_PATCH)


async def discard_objects(client: KubeClient, gang_plan: GangPlan, *, hub_id: str,
                          hub_uid: str) -> None:
    """Delete the plan's objects that are ours (uid precondition), after the member
    refused the copy for good: the workload goes elsewhere, its gang objects would
    otherwise stay behind unowned."""
    for obj in gang_plan.objects:
        ref = await served(client, GroupVersionKind.of_object(obj))
        if ref is None:
            continue
        meta = obj["metadata"]
        path = ref.item(meta["name"], meta.get("namespace"))
        try:
            current = await client.request("GET", path)
            if not _ours(current, hub_id=hub_id, hub_uid=hub_uid):
                continue
            await client.request("DELETE", path, body={
                "apiVersion": "v1", "kind": "DeleteOptions",
                "preconditions": {"uid": current["metadata"]["uid"]}})
        except (NotFound, Conflict):
            continue


def _ours(obj: Mapping[str, Any], *, hub_id: str, hub_uid: str) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return bool(hub_id) and labels.get(ORIGIN_LABEL) == hub_id \
        and labels.get(HUB_UID_LABEL) == hub_uid
