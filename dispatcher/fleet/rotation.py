"""Credential rotation: a member reconnects when its kubeconfig changes, and only then.

A change of a referenced Secret (watched in ``settings.secret_namespace``) reconnects that
member with the new kubeconfig without touching anything else; Secrets in other namespaces
are read at each (re)connect but not watched. A static member's kubeconfig file has no
watch event, so its version (modification time) is checked every probe interval.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import structlog

from dispatcher.fleet import credentials
from dispatcher.fleet.connection import MemberConnection
from dispatcher.fleet.health import Reason
from dispatcher.kube import watch

__all__ = ["SecretVersions", "watch_files"]

log = structlog.get_logger(__name__)

Connections = Callable[[], Iterable[MemberConnection]]


class SecretVersions:
    """The resourceVersion of each kubeconfig Secret in ``namespace``, as last listed or
    watched; ``on_secrets`` reloads the members whose Secret moved past the version their
    connection loaded."""

    def __init__(self, namespace: str, connections: Connections) -> None:
        self._namespace = namespace
        self._connections = connections
        self._versions: dict[tuple[str, str], str] = {}

    async def on_secrets(self, item: watch.Listed | watch.Changed) -> None:
        """One item of the hub's Secret watch."""
        namespace = self._namespace
        if isinstance(item, watch.Listed):
            changed = [(o, False) for o in item.objects]
            listed = {str(o["metadata"]["name"]) for o in item.objects}
            gone = [name for (_, name) in self._versions if name not in listed]
        else:
            changed = [(item.object, item.type == "DELETED")]
            gone = []
        touched = set(gone)
        for obj, deleted in changed:
            name = str(obj["metadata"]["name"])
            key = (namespace, name)
            if deleted:
                self._versions.pop(key, None)
            else:
                self._versions[key] = str(obj["metadata"].get("resourceVersion", ""))
            touched.add(name)
        for name in gone:
            self._versions.pop((namespace, name), None)
        self._reload(touched)

    def _reload(self, touched: set[str]) -> None:
        for conn in self._connections():
            ref = conn.spec.secret
            if ref is None or ref.namespace != self._namespace or ref.name not in touched:
                continue
            if conn.credentials_version is None and conn.health.reason != Reason.SECRET_MISSING:
                continue  # its first load is still to come and will read the latest version
            if self._versions.get((ref.namespace, ref.name)) != conn.credentials_version:
                log.info("member.credentials_changed", member=conn.name,
                         secret=f"{ref.namespace}/{ref.name}")
                conn.reload()


async def watch_files(connections: Connections, seen: dict[str, int | None], *,
                      interval_s: float) -> None:
    """Reconnect a static member when its kubeconfig file changes, checked every
    ``interval_s``; ``seen`` holds each file's version when the fleet started (taken before
    any connection read it, so an edit made in between is never swallowed)."""
    while True:
        for conn in list(connections()):
            if conn.spec.path is None:
                continue
            # None when unreadable: the next connect attempt reports it.
            version = await asyncio.to_thread(credentials.file_version, conn.spec.path)
            if conn.name in seen and seen[conn.name] != version:
                log.info("member.credentials_changed", member=conn.name,
                         file=conn.spec.path)
                conn.reload()
            seen[conn.name] = version
        await asyncio.sleep(interval_s)
