"""The hub's own identity on a member: applied with admin rights once, then used alone.

``dispatcher clusters add --create-identity`` must never store the operator's admin
kubeconfig on the hub. Instead it applies ``deploy/member/`` (a ServiceAccount, its
least-privilege ClusterRoles and a token Secret) on the member with the admin kubeconfig,
obtains a token for that ServiceAccount and writes a kubeconfig holding only that token;
that kubeconfig is what gets registered.

Two token sources, because clusters differ:

- ``secret``: the ``kubernetes.io/service-account-token`` Secret of ``deploy/member``, filled
  by kube-controller-manager's token controller. Long-lived; revoked by deleting the Secret.
- ``request``: the TokenRequest API (``POST .../serviceaccounts/NAME/token``), which
  kube-apiserver serves by itself, so it also works on a bare apiserver (the dev fleet). The
  token expires (the apiserver may shorten the duration asked for); re-run to renew.

``auto`` waits briefly for the Secret and falls back to a TokenRequest. Pure parts
(``load_manifests``, ``token_kubeconfig``) are separate from the calls.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from dispatcher.devfleet.binaries import BuildError, source_path
from dispatcher.fleet.kubeconfigs import KubeconfigProblem, flatten
from dispatcher.kube import errors
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NODES, SECRETS, ResourceRef

__all__ = [
    "APPLY_PATCH",
    "FIELD_MANAGER",
    "IdentityError",
    "MemberIdentity",
    "TokenSource",
    "apply_manifests",
    "create_identity",
    "identity_dir",
    "load_manifests",
    "request_token",
    "secret_token",
    "service_account_of",
    "token_kubeconfig",
]

APPLY_PATCH = "application/apply-patch+yaml"
FIELD_MANAGER = "dispatcher"
NAMESPACE_CREATE_PART = "create-namespaces"
"""Value of the ``dispatcher.io/identity-part`` label on the namespace-creation RBAC."""
PART_LABEL = "dispatcher.io/identity-part"
DEFAULT_TOKEN_SECONDS = 365 * 24 * 3600
SECRET_WAIT_S = 5.0
MANIFESTS_ENV = "DISPATCHER_MEMBER_MANIFESTS"

TokenSource = Literal["auto", "secret", "request"]


class IdentityError(RuntimeError):
    """The member identity could not be set up; the message says which step failed."""


@dataclass(frozen=True, kw_only=True)
class MemberIdentity:
    """A minted identity: the kubeconfig to register and where its token came from."""

    kubeconfig: dict[str, Any]
    service_account: str
    """``namespace/name`` of the ServiceAccount on the member."""
    token_source: Literal["secret", "request"]
    expires: str | None
    """Expiry of a TokenRequest token (RFC 3339); None for a Secret token."""
    applied: tuple[str, ...]
    """``kind/name`` of every object applied on the member."""


def identity_dir() -> Path:
    """The member manifests: ``$DISPATCHER_MEMBER_MANIFESTS``, else ``deploy/member`` of the
    source tree (the wheel does not ship deploy/); IdentityError says what to do."""
    override = os.environ.get(MANIFESTS_ENV)
    if override:
        return Path(override)
    try:
        return source_path("deploy", "member")
    except BuildError as exc:
        raise IdentityError(f"{exc}, or set {MANIFESTS_ENV} to a copy of deploy/member"
                            ) from None


def load_manifests(directory: Path, *, create_namespaces: bool = True
                   ) -> list[dict[str, Any]]:
    """The objects listed in ``directory/kustomization.yaml`` (``resources:`` only).

    Without ``create_namespaces`` the objects labelled as the namespace-creation part are
    left out. Anything in the kustomization that would transform the objects (patches,
    generators, a namespace override) is refused, since it would not be applied here.
    """
    try:
        kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise IdentityError(f"cannot read {directory / 'kustomization.yaml'}: {exc}") from None
    if not isinstance(kustomization, dict):
        raise IdentityError(f"{directory / 'kustomization.yaml'} is not a mapping")
    extra = sorted(set(kustomization) - {"apiVersion", "kind", "resources"})
    if extra:
        raise IdentityError(f"{directory / 'kustomization.yaml'}: only 'resources' is "
                            f"supported here, found {', '.join(extra)}")
    docs: list[dict[str, Any]] = []
    for entry in kustomization.get("resources") or []:
        path = directory / str(entry)
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError) as exc:
            raise IdentityError(f"cannot read {path}: {exc}") from None
        for doc in loaded:
            if not doc:
                continue
            if not isinstance(doc, dict) or not doc.get("kind") or not doc.get("apiVersion"):
                raise IdentityError(f"{path}: every document needs apiVersion and kind")
            labels = (doc.get("metadata") or {}).get("labels") or {}
            if not create_namespaces and labels.get(PART_LABEL) == NAMESPACE_CREATE_PART:
                continue
            docs.append(doc)
    return docs


def service_account_of(manifests: Sequence[Mapping[str, Any]]) -> tuple[str, str]:
    """(namespace, name) of the one ServiceAccount among ``manifests``."""
    accounts = [m for m in manifests if m.get("kind") == "ServiceAccount"]
    if len(accounts) != 1:
        raise IdentityError(f"the member manifests must hold exactly one ServiceAccount, "
                            f"found {len(accounts)}")
    meta = accounts[0].get("metadata") or {}
    return str(meta.get("namespace") or "default"), str(meta["name"])


def _token_secret_name(manifests: Sequence[Mapping[str, Any]], *, account: str) -> str | None:
    for doc in manifests:
        meta = doc.get("metadata") or {}
        if (doc.get("kind") == "Secret"
                and doc.get("type") == "kubernetes.io/service-account-token"
                and (meta.get("annotations") or {}).get("kubernetes.io/service-account.name")
                == account):
            return str(meta["name"])
    return None


def token_kubeconfig(admin_kubeconfig: Mapping[str, Any], *, token: str, user: str,
                     context: str | None = None) -> dict[str, Any]:
    """A kubeconfig for the same server and CA as ``admin_kubeconfig`` (its ``context``),
    authenticating with ``token`` only: no certificate, exec plugin or admin token is kept.
    """
    flat = flatten(admin_kubeconfig, context=context)
    cluster = flat["clusters"][0]
    name = f"{user}@{cluster['name']}"
    namespace = flat["contexts"][0]["context"].get("namespace")
    ctx: dict[str, Any] = {"cluster": cluster["name"], "user": user}
    if namespace:
        ctx["namespace"] = namespace
    return {"apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [cluster], "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": name, "context": ctx}]}


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
        applied.append(f"{str(doc['kind']).lower()}/{meta['name']}")
    return applied


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
                          directory: Path | None = None, create_namespaces: bool = True,
                          token_source: TokenSource = "auto",
                          expiration_s: int = DEFAULT_TOKEN_SECONDS,
                          secret_wait_s: float = SECRET_WAIT_S) -> MemberIdentity:
    """Apply the member manifests with ``admin_kubeconfig``, mint a token, check it works.

    The check lists one Node with the new kubeconfig, so a wrong server, CA or binding
    fails here and not later inside the controller.
    """
    manifests = load_manifests(directory or identity_dir(), create_namespaces=create_namespaces)
    namespace, account = service_account_of(manifests)
    secret_name = _token_secret_name(manifests, account=account)
    try:
        flat_admin = flatten(admin_kubeconfig, context=context)
    except KubeconfigProblem as exc:
        raise IdentityError(str(exc)) from None
    async with await KubeClient.from_kubeconfig(flat_admin, name="member (admin)") as admin:
        applied = await apply_manifests(admin, manifests)
        token: str | None = None
        expires: str | None = None
        source: Literal["secret", "request"] = "secret"
        if token_source in ("auto", "secret") and secret_name is not None:
            token = await secret_token(admin, namespace=namespace, name=secret_name,
                                       wait_s=secret_wait_s)
        if token is None:
            if token_source == "secret":
                raise IdentityError(
                    f"Secret {namespace}/{secret_name or '(none in the manifests)'} holds no "
                    "token: the cluster has no token controller; use the TokenRequest source")
            token, expires = await request_token(admin, namespace=namespace, name=account,
                                                 expiration_s=expiration_s)
            source = "request"
    kubeconfig = token_kubeconfig(flat_admin, token=token, user=account)
    async with await KubeClient.from_kubeconfig(kubeconfig, name="member (identity)") as mine:
        try:
            await mine.request("GET", NODES.collection(), query=[("limit", "1")])
        except errors.KubeError as exc:
            raise IdentityError(f"the new identity cannot list nodes: {exc}") from None
    return MemberIdentity(kubeconfig=kubeconfig, service_account=f"{namespace}/{account}",
                          token_source=source, expires=expires, applied=tuple(applied))
