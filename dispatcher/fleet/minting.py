"""Setting the member identity up on a member: applied with admin rights, then its token.

``create_identity`` applies the manifests ``identity.plan`` chooses with the operator's
admin kubeconfig (server-side apply), prunes the bindings of an earlier install the plan no
longer holds, mints a token (the token Secret, else a TokenRequest: ``identity`` says why
both) and checks that the kubeconfig holding only that token works. The admin kubeconfig
is used here and never stored.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from dispatcher.fleet import membernamespaces
from dispatcher.fleet.identity import (
    APPLY_PATCH,
    COMPONENT,
    COMPONENT_LABEL,
    DEFAULT_TOKEN_SECONDS,
    FIELD_MANAGER,
    RBAC,
    SECRET_WAIT_S,
    IdentityError,
    MemberIdentity,
    TokenSource,
    check_namespaces,
    identity_dir,
    plan,
    service_account_of,
    token_kubeconfig,
    token_secret_name,
)
from dispatcher.fleet.kubeconfigs import KubeconfigProblem, flatten
from dispatcher.kube import errors
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NODES, SECRETS, ResourceRef

__all__ = ["apply_manifests", "create_identity", "prune_bindings", "request_token",
           "secret_token"]


async def apply_manifests(client: KubeClient, manifests: Sequence[Mapping[str, Any]]
                          ) -> list[str]:
    """Server-side apply each object (create or update, idempotent); returns ``kind/name``.

    Resources are found through discovery, so any kind the member serves can be listed.
    """
    applied = []
    for doc in manifests:
        ref = await _resource(client, doc)
        meta = doc.get("metadata") or {}
        namespace = meta.get("namespace") if ref.namespaced else None
        if ref.namespaced and not namespace:
            raise IdentityError(f"{doc['kind']}/{meta.get('name')} needs metadata.namespace")
        await client.request("PATCH", ref.item(str(meta["name"]), namespace),
                             query=[("fieldManager", FIELD_MANAGER), ("force", "true")],
                             body=dict(doc), content_type=APPLY_PATCH)
        kind = str(doc["kind"]).lower()
        applied.append(f"{kind}/{namespace}/{meta['name']}" if kind == "rolebinding"
                       else f"{kind}/{meta['name']}")
    return applied


def _ours(binding: Mapping[str, Any], *, namespace: str, account: str) -> bool:
    return any(s.get("kind") == "ServiceAccount" and s.get("name") == account
               and s.get("namespace") == namespace for s in binding.get("subjects") or [])


async def prune_bindings(client: KubeClient, keep: Sequence[Mapping[str, Any]]) -> list[str]:
    """Delete the identity's ClusterRoleBindings and RoleBindings (label
    ``app.kubernetes.io/component: member-identity``, binding the ServiceAccount of
    ``keep``) that ``keep`` does not hold; returns them as ``kind/[namespace/]name``.

    Bindings someone made by hand without the label are left alone (``create_identity``
    reports a token that can still write in kube-system).
    """
    namespace, account = service_account_of(keep)
    wanted = {(str(d["kind"]), str((d.get("metadata") or {}).get("namespace") or ""),
               str((d.get("metadata") or {}).get("name"))) for d in keep}
    removed = []
    selector = [("labelSelector", f"{COMPONENT_LABEL}={COMPONENT}")]
    for kind, plural in (("ClusterRoleBinding", "clusterrolebindings"),
                         ("RoleBinding", "rolebindings")):
        listed = await client.request("GET", f"{RBAC}/{plural}", query=selector)
        for obj in (listed or {}).get("items") or []:
            meta = obj.get("metadata") or {}
            ns = str(meta.get("namespace") or "")
            if (kind, ns, str(meta.get("name"))) in wanted or not _ours(
                    obj, namespace=namespace, account=account):
                continue
            path = (f"{RBAC}/namespaces/{ns}/{plural}/{meta['name']}" if ns
                    else f"{RBAC}/{plural}/{meta['name']}")
            try:
                await client.request("DELETE", path)
            except errors.NotFound:
                continue
            removed.append(f"{kind.lower()}/{ns + '/' if ns else ''}{meta['name']}")
    return removed


async def _can_write_kube_system(client: KubeClient) -> bool:
    """Whether the client may create Deployments in kube-system (SelfSubjectAccessReview,
    which every authenticated user may ask)."""
    review = await client.request(
        "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {"group": "apps", "resource": "deployments",
                                            "verb": "create", "namespace": "kube-system"}}})
    return bool(((review or {}).get("status") or {}).get("allowed"))


async def _resource(client: KubeClient, doc: Mapping[str, Any]) -> ResourceRef:
    ref = await client.discovery.resource(str(doc["apiVersion"]), str(doc["kind"]))
    if ref is None:
        raise IdentityError(f"the member does not serve {doc['apiVersion']} {doc['kind']}")
    return ref


async def request_token(client: KubeClient, *, namespace: str, name: str,
                        expiration_s: int = DEFAULT_TOKEN_SECONDS) -> tuple[str, str | None]:
    """A TokenRequest for ServiceAccount ``namespace/name``: (token, expirationTimestamp)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_s}}
    answer = await client.request(
        "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token", body=body)
    status = (answer or {}).get("status") or {}
    token = status.get("token")
    if not token:
        raise IdentityError(f"TokenRequest for {namespace}/{name} returned no token")
    expires = status.get("expirationTimestamp")
    return str(token), str(expires) if expires else None


async def secret_token(client: KubeClient, *, namespace: str, name: str,
                       wait_s: float = SECRET_WAIT_S) -> str | None:
    """The token the token controller wrote into Secret ``namespace/name``, waiting up to
    ``wait_s`` for it; None when it stays empty (no token controller on this cluster)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            secret = await client.request("GET", SECRETS.item(name, namespace))
        except errors.NotFound:
            secret = {}
        raw = ((secret or {}).get("data") or {}).get("token")
        if raw:
            return base64.b64decode(str(raw)).decode()
        if time.monotonic() >= deadline:
            return None
        await asyncio.sleep(0.25)


async def create_identity(admin_kubeconfig: Mapping[str, Any], *, context: str | None = None,
                          directory: Path | None = None, namespaces: Sequence[str] = (),
                          cluster_wide: bool = False, create_namespaces: bool = False,
                          token_source: TokenSource = "auto",
                          expiration_s: int = DEFAULT_TOKEN_SECONDS,
                          secret_wait_s: float = SECRET_WAIT_S,
                          hub_labels: Mapping[str, Mapping[str, str]] | None = None,
                          pod_security_floor: str = "baseline",
                          member: str = "the member") -> MemberIdentity:
    """Apply the member manifests (``plan``) with ``admin_kubeconfig``, remove the bindings
    of an earlier install the plan no longer holds, mint a token, check it works.

    Namespaced: the listed namespaces must exist unless ``create_namespaces`` (checked
    before anything is applied); missing ones are then created with the Pod Security
    labels of their hub namespace, ``hub_labels[name]`` (absent: no hub namespace), never
    below ``pod_security_floor`` (``podsecurity.member_labels``). A listed namespace that
    exists with a weaker enforce level than its hub namespace's is left as it is and
    reported in ``warnings``. The check lists one Node with the new kubeconfig, so a
    wrong server, CA or binding fails here and not later inside the controller; a token
    that may still create Deployments in kube-system without ``cluster_wide`` (a binding
    made by hand) is reported in ``warnings``.
    """
    manifests = plan(directory or identity_dir(), namespaces=namespaces,
                     cluster_wide=cluster_wide, create_namespaces=create_namespaces)
    chosen = check_namespaces(namespaces)
    namespace, account = service_account_of(manifests)
    secret_name = token_secret_name(manifests, account=account)
    try:
        flat_admin = flatten(admin_kubeconfig, context=context)
    except KubeconfigProblem as exc:
        raise IdentityError(str(exc)) from None
    async with await KubeClient.from_kubeconfig(flat_admin, name="member (admin)") as admin:
        created, warnings = await _namespaces(
            admin, chosen, cluster_wide=cluster_wide, create_namespaces=create_namespaces,
            hub_labels=hub_labels or {}, floor=pod_security_floor, member=member)
        applied = await apply_manifests(admin, manifests)
        removed = await prune_bindings(admin, manifests)
        token, expires, source = await _mint(
            admin, namespace=namespace, account=account, secret_name=secret_name,
            token_source=token_source, expiration_s=expiration_s, secret_wait_s=secret_wait_s)
    kubeconfig = token_kubeconfig(flat_admin, token=token, user=account)
    warnings += await _check(kubeconfig, namespace=namespace, account=account,
                             cluster_wide=cluster_wide)
    return MemberIdentity(kubeconfig=kubeconfig, service_account=f"{namespace}/{account}",
                          token_source=source, expires=expires, applied=tuple(applied),
                          namespaces=() if cluster_wide else chosen,
                          cluster_wide=cluster_wide, removed=tuple(removed),
                          created_namespaces=tuple(created), warnings=tuple(warnings))


async def _namespaces(admin: KubeClient, chosen: Sequence[str], *, cluster_wide: bool,
                      create_namespaces: bool, hub_labels: Mapping[str, Mapping[str, str]],
                      floor: str, member: str
                      ) -> tuple[list[membernamespaces.MemberNamespace], list[str]]:
    """The listed namespaces on the member: missing ones created (or refused), and the
    warnings about existing ones weaker than their hub namespace."""
    found = await membernamespaces.read(admin, chosen)
    missing = [name for name, ns in found.items() if ns is None]
    if missing and not cluster_wide and not create_namespaces:
        raise IdentityError(
            f"namespace {', '.join(missing)} does not exist on the member: create "
            "it first (with the Pod Security labels it should have), or pass "
            "--create-namespaces")
    existing = [ns for ns in found.values() if ns is not None]
    created: list[membernamespaces.MemberNamespace] = []
    for name in [] if cluster_wide else missing:
        made = await membernamespaces.create(admin, name, hub_labels=hub_labels.get(name),
                                             floor=floor)
        (created if made.created else existing).append(made)
    warnings = [w for ns in existing if (w := membernamespaces.weaker_warning(
        ns, hub_labels=hub_labels.get(ns.name), member=member))]
    return created, warnings


async def _mint(admin: KubeClient, *, namespace: str, account: str, secret_name: str | None,
                token_source: TokenSource, expiration_s: int, secret_wait_s: float
                ) -> tuple[str, str | None, Literal["secret", "request"]]:
    """(token, expiry, source): the token Secret's, else (or by choice) a TokenRequest's."""
    token: str | None = None
    if token_source in ("auto", "secret") and secret_name is not None:
        token = await secret_token(admin, namespace=namespace, name=secret_name,
                                   wait_s=secret_wait_s)
    if token is not None:
        return token, None, "secret"
    if token_source == "secret":
        raise IdentityError(
            f"Secret {namespace}/{secret_name or '(none in the manifests)'} holds no "
            "token: the cluster has no token controller; use the TokenRequest source")
    token, expires = await request_token(admin, namespace=namespace, name=account,
                                         expiration_s=expiration_s)
    return token, expires, "request"


async def _check(kubeconfig: Mapping[str, Any], *, namespace: str, account: str,
                 cluster_wide: bool) -> list[str]:
    """The new identity lists a Node (IdentityError if not); a warning when it may still
    write in kube-system without ``cluster_wide``."""
    async with await KubeClient.from_kubeconfig(kubeconfig, name="member (identity)") as mine:
        try:
            await mine.request("GET", NODES.collection(), query=[("limit", "1")])
        except errors.KubeError as exc:
            raise IdentityError(f"the new identity cannot list nodes: {exc}") from None
        if not cluster_wide and await _can_write_kube_system(mine):
            return [
                f"{namespace}/{account} may still create Deployments in kube-system: a "
                "binding not made by this command grants it (kubectl get clusterrolebindings,"
                "rolebindings -A -o wide | grep " + account + ")"]
    return []
