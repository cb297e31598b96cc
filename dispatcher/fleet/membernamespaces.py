"""The namespaces ``clusters add --create-identity`` lists, on the member: made with the
hub namespace's Pod Security level, or reported when they exist with a weaker one.

Runs with the operator's admin kubeconfig of the member (``fleet/identity``); the hub
namespace's labels come from the caller, who reads them with the hub kubeconfig. A
namespace is created (POST, never applied: an existing namespace's labels are the member
operator's and are never overwritten) with ``podsecurity.member_labels``; one that exists
is compared with ``podsecurity.weaker`` and a weaker one is a warning, not a refusal: the
registration itself grants nothing there that the namespace's RoleBinding would not, and
the controller refuses copies into it by default (``submit.weakerMemberNamespaces``),
which the warning says, with the command that labels it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dispatcher.kube import errors, podsecurity
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NAMESPACES

__all__ = ["MemberNamespace", "create", "read", "weaker_warning"]


@dataclass(frozen=True, kw_only=True)
class MemberNamespace:
    """A listed namespace as found or made on the member."""

    name: str
    labels: Mapping[str, str]
    """Its labels (for one created here: the ones it was created with)."""
    created: bool = False


async def read(client: KubeClient, names: Iterable[str]) -> dict[str, MemberNamespace | None]:
    """Each namespace of ``names`` on the member, None when it does not exist."""
    out: dict[str, MemberNamespace | None] = {}
    for name in names:
        try:
            found = await client.request("GET", NAMESPACES.item(name))
        except errors.NotFound:
            out[name] = None
            continue
        out[name] = MemberNamespace(
            name=name, labels=dict((found.get("metadata") or {}).get("labels") or {}))
    return out


async def create(client: KubeClient, name: str, *, hub_labels: Mapping[str, str] | None,
                 floor: str) -> MemberNamespace:
    """Create ``name`` with the Pod Security labels its hub namespace's ``hub_labels``
    (None: no hub namespace) and ``floor`` call for; one created meanwhile by someone else
    is read and returned as found (``created`` False)."""
    labels = podsecurity.member_labels(hub_labels, floor=floor)
    try:
        await client.request("POST", NAMESPACES.collection(), body={
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "labels": labels}})
    except errors.Conflict:
        found = (await read(client, [name]))[name]
        if found is not None:
            return found
        raise
    return MemberNamespace(name=name, labels=labels, created=True)


def weaker_warning(found: MemberNamespace, *, hub_labels: Mapping[str, str] | None,
                   member: str = "the member") -> str | None:
    """What to tell the operator about an existing member namespace whose enforce level is
    weaker than its hub namespace's; None when it is not weaker."""
    gap = podsecurity.weaker(found.labels, hub_labels)
    if gap is None:
        return None
    level = gap[1]
    version = f" pod-security.kubernetes.io/enforce-version={level.version}"
    return (f"namespace {found.name} on {member} enforces Pod Security "
            f"{podsecurity.describe(found.labels)}, weaker than hub namespace "
            f"{found.name}'s {level}: the controller refuses copies into it "
            f"(submit.weakerMemberNamespaces: refuse, the default) until it is labelled: "
            f"kubectl label namespace {found.name} --overwrite "
            f"pod-security.kubernetes.io/enforce={level.level}{version}")
