"""Registering members on the hub: the kubeconfig Secret and the MemberCluster object.

``secret_manifest`` and ``member_cluster_manifest`` are pure; ``register`` and
``unregister`` apply them (create, or merge-patch when they exist). The Secret carries the
``dispatcher.io/member`` label, so ``unregister`` deletes only Secrets it created, never one
an operator pointed a MemberCluster at by hand.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from dispatcher.fleet.kubeconfigs import DEFAULT_KEY
from dispatcher.fleet.members import MEMBER_LABEL
from dispatcher.fleet.settings import DEFAULT_SECRET_NAMESPACE
from dispatcher.kube import errors
from dispatcher.kube.client import JSON_MERGE_PATCH, KubeClient
from dispatcher.kube.resources import MEMBER_CLUSTERS, SECRETS

__all__ = ["Registered", "member_cluster_manifest", "register", "secret_manifest",
           "secret_name", "unregister"]


def secret_name(member: str) -> str:
    """The Secret ``clusters add`` creates for ``member``."""
    return f"{member}-kubeconfig"


def secret_manifest(*, member: str, kubeconfig: Mapping[str, Any],
                    namespace: str = DEFAULT_SECRET_NAMESPACE) -> dict[str, Any]:
    """A v1.Secret holding ``kubeconfig`` (YAML) under the key ``kubeconfig``."""
    text = yaml.safe_dump(dict(kubeconfig), sort_keys=False)
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(member), "namespace": namespace,
                         "labels": {MEMBER_LABEL: member}},
            "data": {DEFAULT_KEY: base64.b64encode(text.encode()).decode()}}


def member_cluster_manifest(*, member: str, labels: Mapping[str, str], cordoned: bool,
                            namespace: str = DEFAULT_SECRET_NAMESPACE,
                            context: str | None = None,
                            allowed_namespaces: Sequence[str] | None = None
                            ) -> dict[str, Any]:
    """A MemberCluster pointing at the Secret of ``secret_manifest``.

    ``allowed_namespaces`` None leaves ``spec.allowedNamespaces`` out (an update keeps what
    the object has); a list sets it (placement sends only those namespaces' workloads).
    """
    spec: dict[str, Any] = {
        "kubeconfigSecretRef": {"namespace": namespace, "name": secret_name(member),
                                "key": DEFAULT_KEY},
        "cordoned": cordoned}
    if allowed_namespaces is not None:
        spec["allowedNamespaces"] = list(allowed_namespaces)
    if context:
        spec["context"] = context
    return {"apiVersion": MEMBER_CLUSTERS.api_version, "kind": MEMBER_CLUSTERS.kind,
            "metadata": {"name": member, "labels": dict(labels)}, "spec": spec}


@dataclass(frozen=True, kw_only=True)
class Registered:
    """What ``register`` did: ``created`` False means the objects existed and were updated."""

    member: str
    secret: str
    created: bool


async def _create_or_patch(hub: KubeClient, *, collection: str, item: str,
                           body: Mapping[str, Any]) -> bool:
    """POST ``body``; on 409 merge-patch it instead. True when created."""
    try:
        await hub.request("POST", collection, body=dict(body))
        return True
    except errors.Conflict:
        patch = {k: v for k, v in body.items() if k not in ("apiVersion", "kind")}
        await hub.request("PATCH", item, body=patch, content_type=JSON_MERGE_PATCH)
        return False


async def register(hub: KubeClient, *, member: str, kubeconfig: Mapping[str, Any],
                   labels: Mapping[str, str], cordoned: bool,
                   namespace: str = DEFAULT_SECRET_NAMESPACE,
                   allowed_namespaces: Sequence[str] | None = None) -> Registered:
    """Create or update the member's Secret (first: the controller needs it) and object."""
    secret = secret_manifest(member=member, kubeconfig=kubeconfig, namespace=namespace)
    await _create_or_patch(hub, collection=SECRETS.collection(namespace),
                           item=SECRETS.item(secret_name(member), namespace), body=secret)
    obj = member_cluster_manifest(member=member, labels=labels, cordoned=cordoned,
                                  namespace=namespace, allowed_namespaces=allowed_namespaces)
    created = await _create_or_patch(hub, collection=MEMBER_CLUSTERS.collection(),
                                     item=MEMBER_CLUSTERS.item(member), body=obj)
    return Registered(member=member, secret=f"{namespace}/{secret_name(member)}",
                      created=created)


async def unregister(hub: KubeClient, *, member: str) -> bool:
    """Delete the MemberCluster and the Secret ``register`` made; False if it did not exist.

    The Secret is found through the object's own reference and deleted only when it carries
    this member's label.
    """
    try:
        obj = await hub.request("GET", MEMBER_CLUSTERS.item(member))
    except errors.NotFound:
        return False
    ref = (obj.get("spec") or {}).get("kubeconfigSecretRef") or {}
    await hub.request("DELETE", MEMBER_CLUSTERS.item(member))
    if ref.get("name") and ref.get("namespace"):
        try:
            secret = await hub.request("GET", SECRETS.item(ref["name"], ref["namespace"]))
        except errors.NotFound:
            return True
        if ((secret.get("metadata") or {}).get("labels") or {}).get(MEMBER_LABEL) == member:
            await hub.request("DELETE", SECRETS.item(ref["name"], ref["namespace"]))
    return True
