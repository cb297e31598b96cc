"""The hub's own identity on a member: applied with admin rights once, then used alone.

``dispatcher clusters add --create-identity`` must never store the operator's admin
kubeconfig on the hub. Instead it applies the member manifests (a ServiceAccount, its
least-privilege ClusterRoles and a token Secret) on the member with the admin kubeconfig,
obtains a token for that ServiceAccount and writes a kubeconfig holding only that token;
that kubeconfig is what gets registered.

Two installs, chosen explicitly (``plan``; neither is a silent default):

- namespaced (``deploy/member/``): the read ClusterRole is bound cluster-wide, the write
  ClusterRole (labelled ``dispatcher.io/identity-part: write``) by one RoleBinding per listed
  namespace (``namespace_bindings``), never in ``kube-*`` (``check_namespaces``).
- cluster-wide (``deploy/member/cluster-wide/``, opt-in): the write ClusterRole bound by a
  ClusterRoleBinding, namespace creation optional (objects labelled as that part).

Re-applying prunes the identity's bindings the new plan does not hold (``prune_bindings``),
so going from cluster-wide to namespaced, or dropping a namespace, takes the rights away.

Two token sources, because clusters differ:

- ``secret``: the ``kubernetes.io/service-account-token`` Secret of ``deploy/member``, filled
  by kube-controller-manager's token controller. Long-lived; revoked by deleting the Secret.
- ``request``: the TokenRequest API (``POST .../serviceaccounts/NAME/token``), which
  kube-apiserver serves by itself, so it also works on a bare apiserver (the dev fleet). The
  token expires (the apiserver may shorten the duration asked for); re-run to renew.

``auto`` waits briefly for the Secret and falls back to a TokenRequest. Pure parts
(``load_manifests``, ``plan``, ``namespace_bindings``, ``check_namespaces``,
``token_kubeconfig``) are separate from the calls.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from dispatcher.fleet import membernamespaces
from dispatcher.fleet.kubeconfigs import KubeconfigProblem, flatten
from dispatcher.kube import errors
from dispatcher.kube.client import KubeClient
from dispatcher.kube.resources import NODES, SECRETS, ResourceRef
from dispatcher.sources import SourceMissing, source_path

__all__ = [
    "APPLY_PATCH",
    "FIELD_MANAGER",
    "IdentityError",
    "MemberIdentity",
    "TokenSource",
    "apply_manifests",
    "check_namespaces",
    "create_identity",
    "identity_dir",
    "load_manifests",
    "namespace_bindings",
    "plan",
    "prune_bindings",
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
WRITE_PART = "write"
"""``dispatcher.io/identity-part`` of the write ClusterRole (bound per namespace)."""
NAMESPACE_WRITE_PART = "namespace-write"
"""``dispatcher.io/identity-part`` of the RoleBindings ``namespace_bindings`` makes."""
COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "member-identity"
CLUSTER_WIDE_DIR = "cluster-wide"
"""The opt-in overlay, a folder of the member manifests."""
CHOOSE = ("say where the member identity may write: --namespace NS (repeatable; a "
          "RoleBinding in each, never kube-*), or --cluster-wide to let it write in every "
          "namespace of the member, kube-system included (opt-in; see "
          "deploy/member/cluster-wide/kustomization.yaml for the risk)")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
RBAC = "/apis/rbac.authorization.k8s.io/v1"
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
    """``kind/name`` (``kind/namespace/name`` for RoleBindings) of every object applied."""
    namespaces: tuple[str, ...] = ()
    """Namespaces the identity got a RoleBinding in (namespaced install)."""
    cluster_wide: bool = False
    removed: tuple[str, ...] = ()
    """Bindings of an earlier install the plan no longer holds, deleted."""
    created_namespaces: tuple[membernamespaces.MemberNamespace, ...] = ()
    """Listed namespaces created here, with the Pod Security labels they got."""
    warnings: tuple[str, ...] = ()
    """What the checks found suspicious: the minted token can write in kube-system, a listed
    namespace exists with a weaker Pod Security level than its hub namespace."""


def identity_dir() -> Path:
    """The member manifests: ``$DISPATCHER_MEMBER_MANIFESTS``, else ``deploy/member`` of the
    source tree (the wheel does not ship deploy/); IdentityError says what to do."""
    override = os.environ.get(MANIFESTS_ENV)
    if override:
        return Path(override)
    try:
        return source_path("deploy", "member")
    except SourceMissing as exc:
        raise IdentityError(f"{exc}, or set {MANIFESTS_ENV} to a copy of deploy/member"
                            ) from None


def load_manifests(directory: Path, *, create_namespaces: bool = True
                   ) -> list[dict[str, Any]]:
    """The objects listed in ``directory/kustomization.yaml`` (``resources:`` only).

    An entry that is a folder is read the same way (its own kustomization.yaml), as
    kustomize does with a base. Without ``create_namespaces`` the objects labelled as the
    namespace-creation part are left out. Anything in a kustomization that would transform
    the objects (patches, generators, a namespace override) is refused, since it would not
    be applied here; so are cycles and one object listed twice.
    """
    docs = _load(directory, create_namespaces=create_namespaces, visiting=())
    seen: set[tuple[str, str, str]] = set()
    for doc in docs:
        meta = doc.get("metadata") or {}
        key = (str(doc["kind"]), str(meta.get("namespace") or ""), str(meta.get("name")))
        if key in seen:
            raise IdentityError(f"{directory}: {key[0]}/{key[2]} is listed twice")
        seen.add(key)
    return docs


def _load(directory: Path, *, create_namespaces: bool, visiting: tuple[Path, ...]
          ) -> list[dict[str, Any]]:
    here = directory.resolve()
    if here in visiting:
        raise IdentityError(f"{directory}: kustomization cycle")
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
        if path.is_dir():
            docs += _load(path, create_namespaces=create_namespaces,
                          visiting=(*visiting, here))
            continue
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


def check_namespaces(names: Iterable[str]) -> tuple[str, ...]:
    """``names`` without repeats, in order; IdentityError for a name that is no namespace
    name (DNS label) or one of the cluster's own (``kube-*``)."""
    out: list[str] = []
    for name in names:
        if name.startswith("kube-"):
            raise IdentityError(
                f"namespace {name}: kube-* namespaces belong to the cluster itself; a hub "
                "workload written there could run with its ServiceAccounts and Secrets, so "
                "the member identity never gets a RoleBinding in one")
        if len(name) > 63 or not _DNS_LABEL.fullmatch(name):
            raise IdentityError(f"namespace {name!r} is not a valid namespace name "
                                "(lower-case letters, digits and '-', at most 63)")
        if name not in out:
            out.append(name)
    return tuple(out)


def namespace_bindings(manifests: Sequence[Mapping[str, Any]], namespaces: Iterable[str]
                       ) -> list[dict[str, Any]]:
    """One RoleBinding per namespace of the write ClusterRole (the one ClusterRole labelled
    ``dispatcher.io/identity-part: write``) to the manifests' ServiceAccount."""
    writes = [m for m in manifests if m.get("kind") == "ClusterRole"
              and ((m.get("metadata") or {}).get("labels") or {}).get(PART_LABEL)
              == WRITE_PART]
    if len(writes) != 1:
        raise IdentityError(f"the member manifests must hold exactly one ClusterRole "
                            f"labelled {PART_LABEL}: {WRITE_PART}, found {len(writes)}")
    sa_namespace, account = service_account_of(manifests)
    return [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
             "metadata": {"name": account, "namespace": namespace,
                          "labels": {"app.kubernetes.io/name": "dispatcher",
                                     COMPONENT_LABEL: COMPONENT,
                                     PART_LABEL: NAMESPACE_WRITE_PART}},
             "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                         "name": str(writes[0]["metadata"]["name"])},
             "subjects": [{"kind": "ServiceAccount", "name": account,
                           "namespace": sa_namespace}]}
            for namespace in check_namespaces(namespaces)]


def plan(directory: Path, *, namespaces: Sequence[str] = (), cluster_wide: bool = False,
         create_namespaces: bool = False) -> list[dict[str, Any]]:
    """Every object to apply on the member, in order.

    Namespaced (``namespaces``, not ``cluster_wide``): ``directory`` itself, then one
    RoleBinding per namespace (the listed namespaces themselves are created, never applied,
    by ``create_identity``: see ``fleet/membernamespaces``). ``cluster_wide``: the overlay
    ``directory/cluster-wide``, its namespace-creation part only with
    ``create_namespaces``; ``namespaces`` then only restrict placement (the caller's
    MemberCluster ``allowedNamespaces``), no RoleBinding is needed. Neither: IdentityError
    saying what to choose.
    """
    chosen = check_namespaces(namespaces)
    if cluster_wide:
        return load_manifests(directory / CLUSTER_WIDE_DIR, create_namespaces=create_namespaces)
    if not chosen:
        raise IdentityError(CHOOSE)
    manifests = load_manifests(directory, create_namespaces=False)
    return manifests + namespace_bindings(manifests, chosen)


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
    hubs = hub_labels or {}
    manifests = plan(directory or identity_dir(), namespaces=namespaces,
                     cluster_wide=cluster_wide, create_namespaces=create_namespaces)
    chosen = check_namespaces(namespaces)
    namespace, account = service_account_of(manifests)
    secret_name = _token_secret_name(manifests, account=account)
    try:
        flat_admin = flatten(admin_kubeconfig, context=context)
    except KubeconfigProblem as exc:
        raise IdentityError(str(exc)) from None
    async with await KubeClient.from_kubeconfig(flat_admin, name="member (admin)") as admin:
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
            made = await membernamespaces.create(admin, name, hub_labels=hubs.get(name),
                                                 floor=pod_security_floor)
            (created if made.created else existing).append(made)
        warnings = [w for ns in existing if (w := membernamespaces.weaker_warning(
            ns, hub_labels=hubs.get(ns.name), member=member))]
        applied = await apply_manifests(admin, manifests)
        removed = await prune_bindings(admin, manifests)
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
        if not cluster_wide and await _can_write_kube_system(mine):
            warnings.append(
                f"{namespace}/{account} may still create Deployments in kube-system: a "
                "binding not made by this command grants it (kubectl get clusterrolebindings,"
                "rolebindings -A -o wide | grep " + account + ")")
    return MemberIdentity(kubeconfig=kubeconfig, service_account=f"{namespace}/{account}",
                          token_source=source, expires=expires, applied=tuple(applied),
                          namespaces=() if cluster_wide else chosen,
                          cluster_wide=cluster_wide, removed=tuple(removed),
                          created_namespaces=tuple(created), warnings=tuple(warnings))
