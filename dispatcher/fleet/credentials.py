"""Where a member's kubeconfig comes from: a file (static members) or a hub Secret.

Split from the fleet runtime so that it only wires connections: the loader a connection
calls at each (re)connect, and the file version the runtime compares to notice an edit
(files have no watch event here).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from dispatcher.fleet.connection import KubeconfigLoader
from dispatcher.fleet.kubeconfigs import KubeconfigProblem, from_secret, read_file
from dispatcher.fleet.members import MemberSpec
from dispatcher.kube import errors
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import SECRETS

__all__ = ["file_version", "loader"]


def loader(spec: MemberSpec, hub: KubeClient | None) -> KubeconfigLoader:
    """The member's kubeconfig loader: (kubeconfig, credentials version) at each call."""
    if spec.path is not None:
        path = Path(spec.path)

        async def from_file() -> tuple[dict[str, Any], str]:
            return await asyncio.to_thread(read_file, path)

        return from_file
    ref = spec.secret
    if ref is None or hub is None:
        raise ValueError(f"member {spec.name} has neither a Secret nor a file")

    async def from_hub_secret() -> tuple[dict[str, Any], str]:
        try:
            secret = await hub.request("GET", SECRETS.item(ref.name, ref.namespace))
        except errors.NotFound:
            raise KubeconfigProblem(f"Secret {ref.namespace}/{ref.name} not found on the hub",
                                    reason="SecretMissing") from None
        version = str((secret.get("metadata") or {}).get("resourceVersion", ""))
        return from_secret(secret, key=ref.key), version

    return from_hub_secret


def file_version(path: str | None) -> int | None:
    """A file's modification time in ns, None when absent (or no file)."""
    if path is None:
        return None
    try:
        return Path(path).stat().st_mtime_ns
    except OSError:
        return None
