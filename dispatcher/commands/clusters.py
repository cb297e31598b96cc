"""``dispatcher clusters [add|remove]``: register member clusters and list them from the hub."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.fleet.membernamespaces import MemberNamespace

__all__ = ["list_members", "register"]

EPILOG = """\
examples:
  dispatcher clusters                                   members, readiness and free GPUs
  dispatcher clusters -o wide                           ... with Kubernetes version and reason
  dispatcher clusters -o yaml                           the MemberCluster objects
  dispatcher clusters add gpu-east --kubeconfig east.yaml --context admin@east \\
      --label region=us-east --label tier=prod
  dispatcher clusters add gpu-east --kubeconfig east.yaml --cordon   update: no new dispatches
  dispatcher clusters add gpu-east --kubeconfig east-admin.yaml --create-identity \\
      --namespace team-a --namespace team-b
                                  register a least-privilege token, not the admin kubeconfig:
                                  it reads cluster-wide and writes only in team-a and team-b
                                  (a RoleBinding each); placement sends it only those
  dispatcher clusters add gpu-east --kubeconfig east-admin.yaml --create-identity \\
      --namespaces team-a,team-c --create-namespaces
                                  ... creating team-c on the member first if missing,
                                  with hub namespace team-c's Pod Security labels
  dispatcher clusters add gpu-east --kubeconfig east-admin.yaml --create-identity --cluster-wide
                                  opt-in: the token writes in EVERY namespace of the member,
                                  kube-system included (see the warning it prints)
  dispatcher clusters remove gpu-east

'add' stores only the chosen context of the kubeconfig, with certificate and token files
inlined, in the Secret dispatcher-system/NAME-kubeconfig on the hub, then creates or updates
the MemberCluster NAME that points at it (with --namespace: spec.allowedNamespaces, so only
those namespaces' workloads are placed there). The running controller connects within seconds.
A kubeconfig that would reach the member unverified (insecure-skip-tls-verify, an http://
server) is refused before anything is contacted; --allow-insecure-tls stores it with a warning.
With --create-identity, say where the member identity may write: --namespace (the default
install, deploy/member/) or --cluster-wide (deploy/member/cluster-wide/); re-running with
other choices removes the bindings the new choice does not hold.
The hub is reached through --hub-kubeconfig (default: $KUBECONFIG, else ~/.kube/config).
"""


def register(subparsers: Any) -> None:
    """Add ``clusters`` and its ``add``/``remove`` actions."""
    from dispatcher.output import FORMATS

    parser = subparsers.add_parser(
        "clusters", help="register member clusters and show their health and free GPUs",
        description="List the member clusters registered on the hub (MemberCluster objects) "
                    "with their readiness, GPU capacity and served workload kinds; register "
                    "or remove members.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _hub_flags(parser)
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="output format (default: %(default)s)")
    parser.set_defaults(run=_list)
    sub = parser.add_subparsers(dest="clusters_command", metavar="ACTION")
    add = sub.add_parser(
        "add", help="register a member (creates or updates its Secret and MemberCluster)",
        description="Register a member cluster on the hub from a kubeconfig file.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_flags(add)
    _hub_flags(add)
    add.set_defaults(run=_add)
    remove = sub.add_parser("remove", help="delete a member's MemberCluster and its Secret",
                            description="Unregister a member cluster.")
    remove.add_argument("name", metavar="NAME")
    _hub_flags(remove)
    remove.set_defaults(run=_remove)


def _add_flags(add: argparse.ArgumentParser) -> None:
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


def _hub_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hub-kubeconfig", type=Path, default=argparse.SUPPRESS,
                        help="kubeconfig of the hub (default: $KUBECONFIG or ~/.kube/config)")
    parser.add_argument("--hub-context", default=argparse.SUPPRESS,
                        help="context in the hub kubeconfig (default: current)")


def _hub_kubeconfig(args: argparse.Namespace) -> Path:
    path: Path | None = getattr(args, "hub_kubeconfig", None)
    if path is not None:
        return path
    env = os.environ.get("KUBECONFIG", "")
    first = next((p for p in env.split(os.pathsep) if p), "")
    return Path(first) if first else Path.home() / ".kube" / "config"


async def _hub(args: argparse.Namespace) -> Any:
    import yaml

    from dispatcher.kube.client import KubeClient, KubeconfigError

    path = _hub_kubeconfig(args)
    try:
        config = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise KubeconfigError(f"hub kubeconfig {path} is not valid YAML") from None
    if not isinstance(config, dict):
        raise KubeconfigError(f"hub kubeconfig {path} is not a kubeconfig")
    return await KubeClient.from_kubeconfig(config, name="hub",
                                            context=getattr(args, "hub_context", None))


def _fail(message: str, code: int = 1) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def list_members(*, kubeconfig: Path, context: str | None, output: str) -> int:
    """``dispatcher clusters`` for another front end (``kubectl dispatcher clusters``):
    the members of the hub that ``kubeconfig`` (``context``) reaches, as ``output``."""
    return _list(argparse.Namespace(hub_kubeconfig=kubeconfig, hub_context=context,
                                    output=output))


def _list(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from dispatcher.control.leader import HUB_MODE_ANNOTATION
    from dispatcher.fleet import status
    from dispatcher.kube import watch
    from dispatcher.kube.errors import KubeError
    from dispatcher.kube.resources import LEASES, MEMBER_CLUSTERS
    from dispatcher.output import emit, table

    async def fetch() -> tuple[list[dict[str, Any]], str]:
        async with await _hub(args) as hub:
            listed = await watch.list_objects(hub, MEMBER_CLUSTERS)
            try:
                lease = await hub.request("GET", LEASES.item("dispatcher", "dispatcher-system"))
                mode = ((lease.get("metadata") or {}).get("annotations") or {}).get(
                    HUB_MODE_ANNOTATION, "")
            except KubeError:
                mode = ""
        return sorted(listed.objects, key=lambda o: str(o["metadata"]["name"])), mode

    try:
        objects, mode = asyncio.run(fetch())
    except (KubeError, OSError) as exc:
        return _fail(str(exc))
    if args.output not in ("json", "yaml"):
        print(f"hub mode: {mode or 'unknown (no controller Lease dispatcher-system/dispatcher)'}",
              file=sys.stderr)
    if args.output in ("json", "yaml"):
        emit({"apiVersion": "v1", "kind": "List", "items": objects}, fmt=args.output)
        return 0
    wide = args.output == "wide"
    now = datetime.now(UTC)
    if not objects:
        print("No member clusters registered (add one: dispatcher clusters add NAME "
              "--kubeconfig FILE)", file=sys.stderr)
        return 0
    table(columns=status.WIDE_COLUMNS if wide else status.BASE_COLUMNS,
          rows=[status.row(o, now=now, wide=wide) for o in objects])
    return 0


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


def _namespaces(items: list[str]) -> list[str]:
    return [n.strip() for item in items for n in item.split(",") if n.strip()]


def _add(args: argparse.Namespace) -> int:
    from dispatcher.fleet import identity

    try:
        namespaces = identity.check_namespaces(_namespaces(args.namespaces))
    except identity.IdentityError as exc:
        return _fail(str(exc), 2)
    if args.create_identity and not namespaces and not args.cluster_wide:
        return _fail(f"--create-identity: {identity.CHOOSE}", 2)
    if not args.create_identity and (args.cluster_wide or args.create_namespaces):
        return _fail("--cluster-wide and --create-namespaces only apply with "
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
            return _fail(f"{args.kubeconfig} is not a kubeconfig", 2)
        kubeconfig = flatten(source, context=args.context,
                             base_dir=args.kubeconfig.resolve().parent)
        # Before anything is contacted: with --create-identity the admin credentials would
        # cross this transport too, and the minted kubeconfig keeps the same server.
        risk = transport_risk(kubeconfig)
    except (ValueError, OSError, yaml.YAMLError, KubeconfigProblem) as exc:
        # YAML errors can quote lines of the file: print only their kind.
        text = "kubeconfig is not valid YAML" if isinstance(exc, yaml.YAMLError) else str(exc)
        return _fail(text, 2)
    if risk and not args.allow_insecure_tls:
        fix = ("use the member's https:// address" if risk == PLAIN_HTTP
               else "give it the member's CA (certificate-authority-data)")
        return _fail(f"the kubeconfig {INSECURE[risk]}: {fix}, or store it anyway with "
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
        return _fail(f"cannot read the hub namespaces, whose Pod Security level the member "
                     f"namespaces must carry: {exc}")
    try:
        minted = asyncio.run(minting.create_identity(
            kubeconfig, namespaces=namespaces, cluster_wide=args.cluster_wide,
            create_namespaces=args.create_namespaces, token_source=args.token_source,
            hub_labels=hub_labels, pod_security_floor=args.pod_security_floor,
            member=args.name))
    except (identity.IdentityError, KubeError, OSError) as exc:
        return _fail(f"cannot create the member identity: {exc}")
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
        return _fail(f"{plugin}: register with --create-identity to store a minted token", 2)
    files = file_reference(kubeconfig)  # flatten inlined every file: a guard, never expected
    if files:
        return _fail(files, 2)

    async def apply() -> registration.Registered:
        async with await _hub(args) as hub:
            return await registration.register(
                hub, member=args.name, kubeconfig=kubeconfig, labels=labels,
                cordoned=args.cordon, allowed_namespaces=namespaces or None)

    try:
        done = asyncio.run(apply())
    except (KubeError, OSError) as exc:
        return _fail(str(exc))
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
    async with await _hub(args) as hub:
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


def _remove(args: argparse.Namespace) -> int:
    from dispatcher.fleet import registration
    from dispatcher.kube.errors import KubeError

    async def apply() -> bool:
        async with await _hub(args) as hub:
            return await registration.unregister(hub, member=args.name)

    try:
        existed = asyncio.run(apply())
    except (KubeError, OSError) as exc:
        return _fail(str(exc))
    if not existed:
        return _fail(f"membercluster {args.name!r} not found")
    print(f"membercluster/{args.name} removed")
    return 0
