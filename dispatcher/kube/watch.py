"""List-then-watch, informer style, with a re-list when the resourceVersion is gone.

``informer`` yields a ``Listed`` snapshot first (and again after every re-list), then
``Changed`` events. A consumer that rebuilds its state from each ``Listed`` and applies each
``Changed`` stays exact across 410 Gone, apiserver restarts and compaction, which
kubernetes_asyncio's own watch does not handle (it retries the stale resourceVersion).
Unreachable errors propagate: reconnect policy and backoff belong to the caller.

Objects arrive without ``metadata.managedFields`` (as controller-runtime's
``TransformStripManagedFields``): nothing here reads them, every copy drops them anyway, and
on a hub object that a user, the dispatcher and a status mirror have all written they are
a large part of what every cache would hold and every resolve would walk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Gone, ServerError, error_for_status
from dispatcher.kube.resources import ResourceRef

__all__ = ["Changed", "Listed", "informer", "lean", "list_objects", "watch_from"]

PAGE_SIZE = 500
WATCH_TIMEOUT_S = 300  # the server ends each watch after this; we resume from the last RV


@dataclass(frozen=True, slots=True)
class Listed:
    """The complete current set of objects (after a list or re-list)."""

    objects: list[dict[str, Any]]
    resource_version: str


@dataclass(frozen=True, slots=True)
class Changed:
    """One watch event."""

    type: Literal["ADDED", "MODIFIED", "DELETED"]
    object: dict[str, Any]


def lean(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """``obj`` without ``metadata.managedFields`` (a write's response, before a cache keeps
    it, so cached objects look the same whether a watch or a write brought them)."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping) or "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}


def _received(obj: dict[str, Any], ref: ResourceRef) -> dict[str, Any]:
    """An object as it enters the process: kind filled in, managedFields dropped."""
    obj.setdefault("apiVersion", ref.api_version)
    obj.setdefault("kind", ref.kind)
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


def _selectors(label_selector: str | None, field_selector: str | None) -> list[tuple[str, str]]:
    query = []
    if label_selector:
        query.append(("labelSelector", label_selector))
    if field_selector:
        query.append(("fieldSelector", field_selector))
    return query


async def list_objects(client: KubeClient, ref: ResourceRef, *, namespace: str | None = None,
                       label_selector: str | None = None, field_selector: str | None = None
                       ) -> Listed:
    """All objects, paginated; items get apiVersion/kind filled in (lists omit them)."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        query = [("limit", str(PAGE_SIZE)), *_selectors(label_selector, field_selector)]
        if token:
            query.append(("continue", token))
        body = await client.request("GET", ref.collection(namespace), query=query)
        items += [_received(item, ref) for item in body.get("items") or []]
        token = body.get("metadata", {}).get("continue", "")
        if not token:
            return Listed(objects=items, resource_version=body["metadata"]["resourceVersion"])


async def watch_from(client: KubeClient, ref: ResourceRef, *, resource_version: str,
                     namespace: str | None = None, label_selector: str | None = None,
                     field_selector: str | None = None, timeout_seconds: int = WATCH_TIMEOUT_S
                     ) -> AsyncIterator[Changed | str]:
    """One watch request: yields Changed events, and bookmark resourceVersions as ``str``.

    Ends when the server closes the watch; raises Gone when ``resource_version`` is too old.
    """
    query = [("watch", "true"), ("resourceVersion", resource_version),
             ("allowWatchBookmarks", "true"), ("timeoutSeconds", str(timeout_seconds)),
             *_selectors(label_selector, field_selector)]
    async for event in client.stream(ref.collection(namespace), query=query,
                                     read_timeout=timeout_seconds + 30):
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "BOOKMARK":
            yield str(obj.get("metadata", {}).get("resourceVersion", resource_version))
        elif kind == "ERROR":
            code = int(obj.get("code", 500))
            raise error_for_status(status=code, reason=str(obj.get("reason", "")),
                                   message=f"{client.name}: watch {ref.plural}: "
                                           f"{obj.get('message', 'error event')}")
        elif kind in ("ADDED", "MODIFIED", "DELETED"):
            yield Changed(type=kind, object=_received(obj, ref))
        else:
            raise ServerError(f"{client.name}: watch {ref.plural}: unexpected event {kind!r}")


async def informer(client: KubeClient, ref: ResourceRef, *, namespace: str | None = None,
                   label_selector: str | None = None, field_selector: str | None = None,
                   timeout_seconds: int = WATCH_TIMEOUT_S) -> AsyncIterator[Listed | Changed]:
    """List, then watch forever; re-list (yielding a fresh ``Listed``) on 410 Gone."""
    while True:
        listed = await list_objects(client, ref, namespace=namespace,
                                    label_selector=label_selector,
                                    field_selector=field_selector)
        yield listed
        version = listed.resource_version
        try:
            while True:
                async for item in watch_from(client, ref, resource_version=version,
                                             namespace=namespace,
                                             label_selector=label_selector,
                                             field_selector=field_selector,
                                             timeout_seconds=timeout_seconds):
                    if isinstance(item, str):
                        version = item
                    else:
                        version = item.object.get("metadata", {}).get("resourceVersion",
                                                                      version)
                        yield item
        except Gone:
            continue
