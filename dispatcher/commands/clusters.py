"""``dispatcher clusters [add|remove]``: register member clusters and list them from the hub."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from dispatcher.commands import clustersadd
from dispatcher.commands.hubaccess import fail, hub_client, hub_flags

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
    hub_flags(parser)
    parser.add_argument("-o", "--output", choices=FORMATS, default="table",
                        help="output format (default: %(default)s)")
    parser.set_defaults(run=_list)
    sub = parser.add_subparsers(dest="clusters_command", metavar="ACTION")
    add = sub.add_parser(
        "add", help="register a member (creates or updates its Secret and MemberCluster)",
        description="Register a member cluster on the hub from a kubeconfig file.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    clustersadd.add_flags(add)
    hub_flags(add)
    add.set_defaults(run=clustersadd.run)
    remove = sub.add_parser("remove", help="delete a member's MemberCluster and its Secret",
                            description="Unregister a member cluster.")
    remove.add_argument("name", metavar="NAME")
    hub_flags(remove)
    remove.set_defaults(run=_remove)


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
        async with await hub_client(args) as hub:
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
        return fail(str(exc))
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


def _remove(args: argparse.Namespace) -> int:
    from dispatcher.fleet import registration
    from dispatcher.kube.errors import KubeError

    async def apply() -> bool:
        async with await hub_client(args) as hub:
            return await registration.unregister(hub, member=args.name)

    try:
        existed = asyncio.run(apply())
    except (KubeError, OSError) as exc:
        return fail(str(exc))
    if not existed:
        return fail(f"membercluster {args.name!r} not found")
    print(f"membercluster/{args.name} removed")
    return 0
