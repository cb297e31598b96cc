"""``dispatcher dev up|status|down|build``: real local control planes for tests and demos."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["register"]

EPILOG = """\
examples:
  dispatcher dev up                         hub + the members of clusters/local.yaml
  kubectl --kubeconfig ~/.cache/dispatcher/devfleet/kubeconfig --context member-1 get nodes
  dispatcher dev status -o json
  dispatcher dev down                       stop every process 'up' started, remove state

The first 'up' builds kube-apiserver, kubectl and etcd from the pinned Go modules in
deploy/local/ (a few minutes; cached under ~/.cache/dispatcher/bin, keyed by the pins).
"""


def register(subparsers: Any) -> None:
    """Add ``dev`` and its subcommands."""
    parser = subparsers.add_parser(
        "dev", help="local control planes (etcd + kube-apiservers) for tests and demos",
        description="Run a real hub and member clusters on loopback: one etcd, one "
                    "kube-apiserver per cluster, GPU Nodes from a fleet file.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", type=Path, default=None,
                        help="state directory (default: $DISPATCHER_DEVFLEET or "
                             "~/.cache/dispatcher/devfleet)")
    sub = parser.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start (or reuse) the hub and members")
    up.add_argument("--fleet", type=Path, default=Path("clusters/local.yaml"),
                    help="fleet file with members and node pools (default: %(default)s)")
    up.set_defaults(run=_up)
    status = sub.add_parser("status", help="show the clusters and whether they answer")
    status.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    status.set_defaults(run=_status)
    sub.add_parser("down", help="stop the processes 'up' started and remove state"
                   ).set_defaults(run=_down)
    sub.add_parser("build", help="build the control-plane binaries (cached)"
                   ).set_defaults(run=_build)


def _root(args: argparse.Namespace) -> Path:
    from dispatcher.devfleet.devfleet import default_root

    root: Path = args.state or default_root()
    return root


def _up(args: argparse.Namespace) -> int:
    from dispatcher.devfleet import devfleet
    from dispatcher.devfleet.binaries import BuildError
    from dispatcher.fleet.fleetfile import FleetFileError, load_fleet

    try:
        fleet = load_fleet(args.fleet)
    except FleetFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        state = devfleet.up(root=_root(args), fleet=fleet)
    except (BuildError, RuntimeError, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"dev fleet ready in {time.monotonic() - started:.1f}s: "
          f"{', '.join(c.name for c in state.clusters)}")
    print(f"kubeconfig: {state.kubeconfig}  (contexts: "
          f"{', '.join(c.name for c in state.clusters)})")
    print(f"try: kubectl --kubeconfig {state.kubeconfig} --context "
          f"{state.clusters[-1].name} get nodes")
    return 0


def _status(args: argparse.Namespace) -> int:
    from dispatcher.devfleet.controlplane import FleetState, is_alive
    from dispatcher.output import emit, table

    state = FleetState.read(_root(args))
    if state is None:
        print("no dev fleet running (start one with 'dispatcher dev up')", file=sys.stderr)
        return 1
    rows = []
    for cluster in state.clusters:
        ready = False
        if is_alive(cluster.process):
            try:
                cluster.rest().request("GET", "/readyz", timeout=3)
                ready = True
            except (OSError, RuntimeError):
                pass
        rows.append({"name": cluster.name, "server": cluster.server, "ready": ready,
                     "pid": cluster.process.pid, "kubeconfig": cluster.kubeconfig})
    if args.output == "table":
        table(columns=["name", "server", "ready", "pid", "kubeconfig"],
              rows=[list(r.values()) for r in rows])
        print(f"etcd {state.etcd_url} (pid {state.etcd.pid}, "
              f"{'running' if is_alive(state.etcd) else 'stopped'}); "
              f"merged kubeconfig {state.kubeconfig}")
    else:
        emit({"kubeconfig": state.kubeconfig, "etcd": state.etcd_url, "clusters": rows},
             fmt=args.output)
    return 0 if all(r["ready"] for r in rows) else 1


def _down(args: argparse.Namespace) -> int:
    from dispatcher.devfleet import devfleet

    devfleet.down(root=_root(args))
    print("dev fleet stopped")
    return 0


def _build(args: argparse.Namespace) -> int:
    from dispatcher.devfleet.binaries import BuildError, ensure_binaries

    try:
        bins = ensure_binaries()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"kube-apiserver, kubectl {bins.kubernetes_version}; etcd {bins.etcd_version}: "
          f"{bins.kube_apiserver.parent}")
    return 0
