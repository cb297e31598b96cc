"""What a member serves, read through discovery: the catalog's kinds, its gang APIs, whether
it runs Kueue, and which cluster it is (its kube-system namespace's uid).

The connection (``fleet/connection.py``) asks after each connect and every discovery
interval; the answers go on the MemberCluster status and into placement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatcher.fleet.queueing import LOCAL_QUEUES
from dispatcher.fleet.quota import Kind
from dispatcher.kube import errors, gangapis
from dispatcher.kube.client import KubeClient
from dispatcher.kube.gangapis import Mechanism
from dispatcher.kube.resources import GroupVersionKind, ResourceRef

__all__ = ["cluster_id", "gang_mechanism", "kueue_resources", "served_kinds"]


async def served_kinds(client: KubeClient, kinds: Sequence[GroupVersionKind]
                       ) -> dict[GroupVersionKind, ResourceRef]:
    """The resource of each of ``kinds`` the member serves."""
    found: dict[GroupVersionKind, ResourceRef] = {}
    for gvk in kinds:
        ref = await client.discovery.resource(gvk.api_version, gvk.kind)
        if ref is not None:
            found[gvk] = ref
    return found


async def gang_mechanism(client: KubeClient) -> Mechanism:
    """The gang mechanism the member's served APIs point to (``kube.gangapis``)."""
    apis = {gvk for gvk in gangapis.API_OF.values()
            if await client.discovery.resource(gvk.api_version, gvk.kind) is not None}
    return gangapis.discovered(apis)


_QUEUE_KINDS: dict[Kind, str] = {"clusterqueues": "ClusterQueue", "localqueues": "LocalQueue",
                                 "resourceflavors": "ResourceFlavor", "workloads": "Workload"}


async def kueue_resources(client: KubeClient) -> dict[Kind, ResourceRef] | None:
    """The member's ClusterQueue, LocalQueue, ResourceFlavor and Workload resources, of the
    newest Kueue version it serves all of (None: it runs no Kueue we can read)."""
    for gvk in LOCAL_QUEUES:
        found: dict[Kind, ResourceRef] = {}
        for kind, name in _QUEUE_KINDS.items():
            ref = await client.discovery.resource(gvk.api_version, name)
            if ref is None:
                break
            found[kind] = ref
        else:
            return found
    return None


async def cluster_id(client: KubeClient, *, request_timeout: float, log: Any) -> str | None:
    """The uid of the member's kube-system namespace: the same cluster registered twice
    shows up as two members with one id. None (with a warning) when it cannot be read."""
    try:
        obj = await client.request("GET", "/api/v1/namespaces/kube-system",
                                   request_timeout=request_timeout)
    except (errors.Forbidden, errors.NotFound):
        log.warning("member.identity_unknown",
                    hint="cannot read namespace kube-system: a cluster registered "
                         "twice cannot be detected (see deploy/member)")
        return None
    return str(((obj or {}).get("metadata") or {}).get("uid") or "") or None
