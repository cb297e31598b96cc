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

``auto`` waits briefly for the Secret and falls back to a TokenRequest. This module is the
pure part (``load_manifests``, ``plan``, ``namespace_bindings``, ``check_namespaces``,
``token_kubeconfig``); the calls that set the identity up on a member are
``fleet/minting.py`` (``create_identity``).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml

from dispatcher.fleet import membernamespaces
from dispatcher.fleet.kubeconfigs import flatten
from dispatcher.sources import SourceMissing, source_path

__all__ = [
    "APPLY_PATCH",
    "FIELD_MANAGER",
    "IdentityError",
    "MemberIdentity",
    "TokenSource",
    "check_namespaces",
    "identity_dir",
    "load_manifests",
    "namespace_bindings",
    "plan",
    "service_account_of",
    "token_kubeconfig",
    "token_secret_name",
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


def token_secret_name(manifests: Sequence[Mapping[str, Any]], *, account: str) -> str | None:
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
