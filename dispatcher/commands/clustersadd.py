"""``dispatcher clusters add``: a member's kubeconfig checked, optionally its own identity
minted with an admin kubeconfig (``--create-identity``), then stored on the hub as a Secret
and a MemberCluster."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatcher.commands.hubaccess import fail, hub_client

if TYPE_CHECKING:
    from dispatcher.fleet.membernamespaces import MemberNamespace

__all__ = ["add_flags", "run", "split_namespaces"]


def add_flags(add: argparse.ArgumentParser) -> None:
    """The flags of ``clusters add`` (in ``--help`` order): the member, the identity, TLS."""
    add.add_argument("name", metavar="NAME", help="member name (a DNS label)")
    add.add_argument("--kubeconfig", type=Path, required=True,
                     help="kubeconfig file with access to the member")
    add.add_argument("--context", default=None,
                     help="context to use from it (default: its current-context)")
    add.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                     help="label for cluster selectors (repeatable)")
    add.add_argument("--cordon", action="store_true",
                     help="register cordoned: no new dispatches until uncordoned")
    _identity_flags(add)
    add.add_argument("--allow-insecure-tls", action="store_true",
                     help="store a kubeconfig that reaches the member unverified "
                          "(insecure-skip-tls-verify or an http:// server) instead of refusing "
                          "it; the controller still refuses it unless its config sets "
                          "fleet.allowInsecureTLS: true")


def _identity_flags(add: argparse.ArgumentParser) -> None:
    """``clusters add --create-identity`` and where the identity may write."""
    add.add_argument("--create-identity", action="store_true",
                     help="--kubeconfig is an admin's: apply deploy/member/ on the member with "
                          "it, mint a token for that ServiceAccount and register only that; "
                          "needs --namespace or --cluster-wide")
    add.add_argument("--namespace", "--namespaces", dest="namespaces", action="append",
                     default=[], metavar="NS[,NS...]",
                     help="a namespace hub workloads may run in on this member (repeatable or "
                          "comma-separated; never kube-*): set as the MemberCluster's "
                          "allowedNamespaces and, with --create-identity, the only namespaces "
                          "the identity may write in (one RoleBinding each)")
    add.add_argument("--cluster-wide", action="store_true",
                     help="with --create-identity, OPT-IN: let the identity write in every "
                          "namespace of the member, kube-system included "
                          "(deploy/member/cluster-wide/); combine with --namespace to still "
                          "restrict placement")
    add.add_argument("--create-namespaces", action="store_true",
                     help="with --create-identity: with --namespace, create the missing "
                          "listed namespaces on the member now (admin kubeconfig), with "
                          "their hub namespace's Pod Security labels; with "
                          "--cluster-wide, let the identity create namespaces itself (for "
                          "config submit.createNamespaces: true)")
    add.add_argument("--pod-security-floor", choices=("privileged", "baseline", "restricted"),
                     default="baseline",
                     help="with --create-namespaces: the weakest Pod Security level of a "
                          "namespace created on the member; it gets its hub namespace's "
                          "pod-security.kubernetes.io labels, never below this (default: "
                          "%(default)s, as the config's submit.podSecurityFloor)")
    add.add_argument("--token-source", choices=("auto", "secret", "request"), default="auto",
                     help="with --create-identity: the token Secret (long-lived), a "
                          "TokenRequest (expires, works without a token controller), or the "
                          "Secret when it fills within seconds, else a TokenRequest "
                          "(default: %(default)s)")


def _parse_labels(items: list[str]) -> dict[str, str]:
    labels = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--label {item!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


INSECURE_WARNING = """\
warning: --allow-insecure-tls: the kubeconfig of {name} {risk}.
  Anyone on the network path can impersonate the member{clear}. The controller refuses this
  member unless its config sets fleet.allowInsecureTLS: true; then its MemberCluster shows
  TLSVerified=False."""

CLUSTER_WIDE_WARNING = """\
warning: --cluster-wide: the member identity of {name} may create, patch and delete workloads
  (Deployments, Jobs, Pods, ... every catalog kind) in EVERY namespace of the member,
  kube-system included{create}. Anyone who can submit a workload on the hub, or who obtains the
  token from the hub Secret, can then run pods on {name} in any namespace as far as its
  admission allows. {allowed}
  Prefer --namespace NS (one RoleBinding per namespace). See
  deploy/member/cluster-wide/kustomization.yaml."""


def split_namespaces(items: list[str]) -> list[str]:
    return [n.strip() for item in items for n in item.split(",") if n.strip()]


def run(args: argparse.Namespace) -> int:
    from dispatcher.fleet import identity

    try:
        namespaces = identity.check_namespaces(split_namespaces(args.namespaces))
    except identity.IdentityError as exc:
        return fail(str(exc), 2)
    if args.create_identity and not namespaces and not args.cluster_wide:
        return fail(f"--create-identity: {identity.CHOOSE}", 2)
    if not args.create_identity and (args.cluster_wide or args.create_namespaces):
        return fail("--cluster-wide and --create-namespaces only apply with "
                     "--create-identity", 2)
    read = _read_kubeconfig(args)
    if isinstance(read, int):
        return read
    labels, kubeconfig = read
    if args.create_identity:
        minted = _mint(args, kubeconfig, namespaces)
        if isinstance(minted, int):
            return minted
        kubeconfig = minted
    return _store(args, kubeconfig, labels=labels, namespaces=namespaces)


def _read_kubeconfig(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, Any]] | int:
    """The labels and the flattened kubeconfig of ``clusters add``, or the exit code when
    they cannot be used (an unverified transport is refused unless allowed)."""
    import yaml

    from dispatcher.fleet.kubeconfigs import (
        INSECURE,
        PLAIN_HTTP,
        KubeconfigProblem,
        flatten,
        transport_risk,
    )

    try:
        labels = _parse_labels(args.label)
        source = yaml.safe_load(args.kubeconfig.read_text())
        if not isinstance(source, dict):
            return fail(f"{args.kubeconfig} is not a kubeconfig", 2)
        kubeconfig = flatten(source, context=args.context,
                             base_dir=args.kubeconfig.resolve().parent)
        # Before anything is contacted: with --create-identity the admin credentials would
        # cross this transport too, and the minted kubeconfig keeps the same server.
        risk = transport_risk(kubeconfig)
    except (ValueError, OSError, yaml.YAMLError, KubeconfigProblem) as exc:
        # YAML errors can quote lines of the file: print only their kind.
        text = "kubeconfig is not valid YAML" if isinstance(exc, yaml.YAMLError) else str(exc)
        return fail(text, 2)
    if risk and not args.allow_insecure_tls:
        fix = ("use the member's https:// address" if risk == PLAIN_HTTP
               else "give it the member's CA (certificate-authority-data)")
        return fail(f"the kubeconfig {INSECURE[risk]}: {fix}, or store it anyway with "
                     "--allow-insecure-tls (the controller also needs "
                     "fleet.allowInsecureTLS: true)", 2)
    if risk:
        print(INSECURE_WARNING.format(
            name=args.name, risk=INSECURE[risk],
            clear=" and read its credentials" if risk == PLAIN_HTTP else ""), file=sys.stderr)
    return labels, kubeconfig


def _mint(args: argparse.Namespace, kubeconfig: dict[str, Any], namespaces: tuple[str, ...]
          ) -> dict[str, Any] | int:
    """``--create-identity``: the member identity applied with the admin ``kubeconfig``;
    the kubeconfig of its token, or the exit code."""
    from dispatcher.fleet import identity, minting
    from dispatcher.kube.errors import KubeError

    if args.cluster_wide:
        allowed = (f"Placement is restricted to {', '.join(namespaces)} "
                   "(allowedNamespaces); the token is not." if namespaces else
                   "No allowedNamespaces: any hub namespace but kube-* is placed there.")
        print(CLUSTER_WIDE_WARNING.format(
            name=args.name, allowed=allowed,
            create=", and create namespaces" if args.create_namespaces else ""),
            file=sys.stderr)
    try:
        hub_labels = asyncio.run(_hub_namespace_labels(args, namespaces))
    except (KubeError, OSError) as exc:
        return fail(f"cannot read the hub namespaces, whose Pod Security level the member "
                     f"namespaces must carry: {exc}")
    try:
        minted = asyncio.run(minting.create_identity(
            kubeconfig, namespaces=namespaces, cluster_wide=args.cluster_wide,
            create_namespaces=args.create_namespaces, token_source=args.token_source,
            hub_labels=hub_labels, pod_security_floor=args.pod_security_floor,
            member=args.name))
    except (identity.IdentityError, KubeError, OSError) as exc:
        return fail(f"cannot create the member identity: {exc}")
    for made in minted.created_namespaces:
        print(_created_line(made, member=args.name, from_hub=made.name in hub_labels,
                            floor=args.pod_security_floor))
    print(f"serviceaccount/{minted.service_account} on {args.name}: token from "
          f"{minted.token_source}" + (f", expires {minted.expires}" if minted.expires
                                      else ""))
    scope = ("every namespace (cluster-wide)" if minted.cluster_wide
             else ", ".join(minted.namespaces))
    print(f"writes in: {scope}")
    for removed in minted.removed:
        print(f"{removed} removed (not part of this install)")
    for warning in minted.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return minted.kubeconfig


def _store(args: argparse.Namespace, kubeconfig: dict[str, Any], *, labels: dict[str, str],
           namespaces: tuple[str, ...]) -> int:
    """The member's Secret and MemberCluster on the hub, once the kubeconfig is one the
    controller would read."""
    from dispatcher.fleet import registration
    from dispatcher.fleet.kubeconfigs import credential_plugin, file_reference
    from dispatcher.kube.errors import KubeError

    # What the controller refuses to read from a Secret, refused before it is stored.
    plugin = credential_plugin(kubeconfig)
    if plugin:
        return fail(f"{plugin}: register with --create-identity to store a minted token", 2)
    files = file_reference(kubeconfig)  # flatten inlined every file: a guard, never expected
    if files:
        return fail(files, 2)

    async def apply() -> registration.Registered:
        async with await hub_client(args) as hub:
            return await registration.register(
                hub, member=args.name, kubeconfig=kubeconfig, labels=labels,
                cordoned=args.cordon, allowed_namespaces=namespaces or None)

    try:
        done = asyncio.run(apply())
    except (KubeError, OSError) as exc:
        return fail(str(exc))
    verb = "registered" if done.created else "updated"
    print(f"membercluster/{done.member} {verb} (kubeconfig in secret {done.secret}, context "
          f"{kubeconfig['current-context']})")
    return 0


async def _hub_namespace_labels(args: argparse.Namespace, namespaces: tuple[str, ...]
                                ) -> dict[str, dict[str, str]]:
    """The labels of each listed namespace that exists on the hub (one that does not is
    left out: the floor alone applies to it, and the command says so). Any other failure
    raises: a member namespace is never made with the floor because the hub's could not
    be read."""
    from dispatcher.kube.errors import NotFound
    from dispatcher.kube.resources import NAMESPACES

    out: dict[str, dict[str, str]] = {}
    if not namespaces:
        return out
    async with await hub_client(args) as hub:
        for name in namespaces:
            try:
                found = await hub.request("GET", NAMESPACES.item(name))
            except NotFound:
                continue
            out[name] = dict((found.get("metadata") or {}).get("labels") or {})
    return out


def _created_line(made: MemberNamespace, *, member: str, from_hub: bool, floor: str) -> str:
    """``namespace/team-a created on gpu-east: enforce restricted:latest (hub namespace
    team-a)`` or ``... (no hub namespace team-a: the floor, --pod-security-floor baseline)``."""
    from dispatcher.kube import podsecurity

    level = podsecurity.policy(made.labels)["enforce"]
    where = (f"hub namespace {made.name}" if from_hub else
             f"no hub namespace {made.name}: the floor, --pod-security-floor {floor}")
    return f"namespace/{made.name} created on {member}: Pod Security enforce {level} ({where})"
