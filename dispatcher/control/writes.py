"""The real ``HubWriter``: the control loop's writes to the hub (the Dispatch record, the
mirror, the finalizer, Events). Every answer goes back into the caches, so the next
``decide`` sees it without a read-after-write GET. The members' side is ``control.submit``."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

from dispatcher.control.caches import HubCache
from dispatcher.control.core import record as records
from dispatcher.control.core.names import FINALIZER
from dispatcher.control.core.record import DispatchRecord
from dispatcher.control.events import EventRecorder
from dispatcher.control.writer import Created, HubRead
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.errors import Conflict, KubeError, NotFound
from dispatcher.kube.resources import DISPATCHES

__all__ = ["HubWrites"]


def _same_kind(ref: Mapping[str, Any], workload: Mapping[str, Any]) -> bool:
    """Whether a record's workload reference is of the workload's group and kind."""
    def group(api_version: object) -> str:
        return str(api_version or "").rpartition("/")[0]
    return (group(ref.get("apiVersion")) == group(workload.get("apiVersion"))
            and ref.get("kind") == workload.get("kind"))


def _delete_options(uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


class HubWrites:
    """Implements ``control.writer.HubWriter`` (one instance, shared by all workers)."""

    def __init__(self, *, hub: KubeClient, cache: HubCache, events: EventRecorder | None,
                 hub_mode: str = "dedicated") -> None:
        self.hub = hub
        self.hub_mode = hub_mode
        self.cache = cache
        self.events = events

    # -- hub ------------------------------------------------------------------------------

    async def create_record(self, uid: str, workload: Mapping[str, Any], *,
                            placed: Mapping[str, Any] | None = None) -> Created:
        namespace = str(workload["metadata"].get("namespace") or "default")
        for name in records.dispatch_names(workload):
            body = records.dispatch_body(workload=workload, name=name,
                                         hub_mode=self.hub_mode, placed=placed)
            try:
                created = await self.hub.request("POST", DISPATCHES.collection(namespace),
                                                 body=body)
            except Conflict:
                existing = await self.hub.request("GET", DISPATCHES.item(name, namespace))
                held = (existing.get("spec") or {}).get("workload") or {}
                if held.get("uid") == uid:
                    self.cache.put_record(existing, force=True)
                    return Created.EXISTS
                if not _same_kind(held, workload):
                    continue  # a same-named kind of another group holds it: never touched
                # A record of an earlier object of this kind and name: its owner is gone.
                # Ours (with the finalizer) goes once its copy has; an older one at once.
                meta = existing["metadata"]
                if not meta.get("deletionTimestamp"):
                    with contextlib.suppress(NotFound, Conflict):
                        await self.hub.request("DELETE", DISPATCHES.item(name, namespace),
                                               body=_delete_options(meta["uid"]))
                return Created.BLOCKED if FINALIZER in (meta.get("finalizers") or ()) \
                    else Created.EXISTS
            self.cache.put_record(created, force=True)
            return Created.CREATED
        return Created.EXISTS

    async def read_workload(self, record: DispatchRecord) -> HubRead:
        api_version, kind, name = record.workload_ref
        try:
            ref = await self.hub.discovery.resource(api_version, kind)
            if ref is None:
                return HubRead(gone=False)  # not served (yet): never guess
            found = await self.hub.request("GET", ref.item(name, record.namespace))
        except NotFound:
            return HubRead(gone=True)
        except KubeError:
            return HubRead(gone=False)
        if str((found.get("metadata") or {}).get("uid")) != record.workload_uid:
            return HubRead(gone=True)
        return HubRead(gone=False, found=found)

    async def patch_record(self, uid: str, status: dict[str, Any]) -> None:
        raw = self.cache.record(uid)
        assert raw is not None
        if "conditions" in status:  # a move ends what was said of the member it left
            drop = records.MEMBER_CONDITIONS if records.leaves_member(status) else frozenset()
            status = {**status, "conditions": records.merge_conditions(
                (raw.get("status") or {}).get("conditions") or (), status["conditions"],
                drop=drop)}
        meta = raw["metadata"]
        updated = await self.hub.request(
            "PATCH", DISPATCHES.item(meta["name"], meta["namespace"], "status"),
            body={"status": status}, content_type=JSON_MERGE_PATCH)
        self.cache.put_record(updated, force=True)

    async def mirror_status(self, uid: str, diff: dict[str, Any]) -> bool:
        try:
            await self._patch_workload(uid, {"status": diff}, subresource="status")
        except NotFound:
            return False
        return True

    async def remove_finalizer(self, uid: str, workload: Mapping[str, Any] | None) -> bool:
        if workload is not None and FINALIZER in (workload["metadata"].get("finalizers") or ()):
            meta = workload["metadata"]  # held by a controller before 2026-12
            try:
                await self._patch_workload(uid, {"metadata": {
                    "finalizers": [f for f in meta["finalizers"] if f != FINALIZER],
                    "resourceVersion": meta["resourceVersion"]}})
            except NotFound:
                self.cache.drop(uid)
            except Conflict:
                return False
        raw = self.cache.record(uid)
        if raw is None:
            return True
        try:
            await self._release_record(raw)
        except Conflict:
            meta = raw["metadata"]
            with contextlib.suppress(NotFound):
                self.cache.put_record(await self.hub.request(
                    "GET", DISPATCHES.item(meta["name"], meta["namespace"])), force=True)
            return False
        self.cache.drop_record(raw)
        return True

    async def _release_record(self, raw: Mapping[str, Any]) -> None:
        """Delete the Dispatch (unless it is being deleted already: its owner's garbage
        collection) and then take our finalizer off it: it goes."""
        meta = raw["metadata"]
        item = DISPATCHES.item(meta["name"], meta["namespace"])
        current: Mapping[str, Any] = raw
        try:
            if not meta.get("deletionTimestamp"):
                try:
                    current = await self.hub.request("DELETE", item,
                                                     body=_delete_options(meta["uid"]))
                except Conflict:
                    return  # the uid precondition: another object has the name now
            current_meta = current.get("metadata") or {}
            finalizers = current_meta.get("finalizers") or ()
            if current.get("kind") == "Dispatch" and FINALIZER in finalizers:
                await self.hub.request("PATCH", item, content_type=JSON_MERGE_PATCH, body={
                    "metadata": {"finalizers": [f for f in finalizers if f != FINALIZER],
                                 "resourceVersion": current_meta["resourceVersion"]}})
        except NotFound:
            return

    async def _patch_workload(self, uid: str, body: Mapping[str, Any], *,
                              subresource: str = "") -> None:
        item = self.cache.workload(uid)
        if item is None:
            raise NotFound(f"workload {uid} is no longer cached")
        meta = item.obj["metadata"]
        updated = await self.hub.request(
            "PATCH", item.ref.item(meta["name"], meta.get("namespace"), subresource),
            body=body, content_type=JSON_MERGE_PATCH)
        self.cache.put(item.ref, updated, force=True)

    def event(self, workload: Mapping[str, Any], *, reason: str, message: str,
              warning: bool = False) -> None:
        if self.events is not None:
            self.events.record(workload=workload, reason=reason, message=message,
                               warning=warning)
