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
  dispatcher dev up --light                 apiservers only: nothing schedules or runs pods
  dispatcher dev up --with-kueue            + Kueue: MultiKueue manager on the hub, workers
                                            on the members (for comparison; not default)
  kubectl --kubeconfig ~/.cache/dispatcher/devfleet/kubeconfig --context member-1 get nodes
  dispatcher dev status -o json             every process of every cluster
  dispatcher dev down                       stop every process 'up' started, remove state

Each member runs kube-apiserver, kube-controller-manager, kube-scheduler and kwok (simulated
kubelets: nodes stay Ready, bound pods run, a Job's pods succeed after a few seconds); the
hub and --light members run only kube-apiserver. All share one etcd.

The first 'up' builds the binaries from the pinned Go modules in deploy/local/ (several
minutes; cached under ~/.cache/dispatcher/bin, keyed by the pins).
"""


def register(subparsers: Any) -> None:
    """Add ``dev`` and its subcommands."""
    parser = subparsers.add_parser(
        "dev", help="local control planes (etcd + kube-apiservers) for tests and demos",
        description="Run a real hub and member clusters on loopback: one etcd, one "
                    "kube-apiserver per cluster, GPU Nodes from a fleet file; members also "
                    "run kube-controller-manager, kube-scheduler and kwok unless --light.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", type=Path, default=None,
                        help="state directory (default: $DISPATCHER_DEVFLEET or "
                             "~/.cache/dispatcher/devfleet)")
    sub = parser.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    up = sub.add_parser("up", help="start (or reuse) the hub and members")
    up.add_argument("--fleet", type=Path, default=Path("clusters/local.yaml"),
                    help="fleet file with members and node pools (default: %(default)s)")
    up.add_argument("--light", action="store_true",
                    help="members run only kube-apiserver (no controllers, scheduler, kwok): "
                         "pods stay Pending, objects change only when you change them")
    up.add_argument("--job-seconds", type=float, default=None, metavar="S",
                    help="how long a Job's pod runs on a real member (default: 5)")
    up.add_argument("--with-kueue", action="store_true",
                    help="also run Kueue v0.17 (built on first use): a MultiKueue manager on "
                         "the hub, a worker on each member, LocalQueue 'gpus' in namespace "
                         "default (label Jobs/JobSets kueue.x-k8s.io/queue-name=gpus)")
    up.add_argument("--kueue-qps", type=float, default=None, metavar="N",
                    help="Kueue's client QPS (default: Kueue's own, 20)")
    up.add_argument("--kueue-burst", type=int, default=None, metavar="N",
                    help="Kueue's client burst (default: Kueue's own, 30)")
    up.set_defaults(run=_up)
    status = sub.add_parser("status", help="show the clusters and whether they answer")
    status.add_argument("-o", "--output", choices=("table", "json", "yaml"), default="table")
    status.set_defaults(run=_status)
    sub.add_parser("down", help="stop the processes 'up' started and remove state"
                   ).set_defaults(run=_down)
    build = sub.add_parser("build", help="build the dev fleet's binaries (cached)")
    build.add_argument("--light", action="store_true",
                       help="only etcd, kube-apiserver and kubectl")
    build.set_defaults(run=_build)


def _root(args: argparse.Namespace) -> Path:
    from dispatcher.devfleet.devfleet import default_root

    root: Path = args.state or default_root()
    return root


def _up(args: argparse.Namespace) -> int:
    from dispatcher.devfleet import devfleet
    from dispatcher.devfleet.binaries import BuildError
    from dispatcher.devfleet.controlplane import JOB_SECONDS
    from dispatcher.devfleet.kueue import ClientLimits
    from dispatcher.fleet.fleetfile import FleetFileError, load_fleet

    try:
        fleet = load_fleet(args.fleet)
    except FleetFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.with_kueue and args.light:
        print("error: --with-kueue needs real members (drop --light)", file=sys.stderr)
        return 2
    kueue = (ClientLimits(qps=args.kueue_qps, burst=args.kueue_burst)
             if args.with_kueue else None)
    started = time.monotonic()
    try:
        state = devfleet.up(root=_root(args), fleet=fleet, real=not args.light,
                            job_seconds=args.job_seconds or JOB_SECONDS, kueue=kueue)
    except (BuildError, RuntimeError, TimeoutError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    profile = "light" if args.light else "real members" + (", Kueue" if kueue else "")
    print(f"dev fleet ({profile}) ready in "
          f"{time.monotonic() - started:.1f}s: {', '.join(c.name for c in state.clusters)}")
    print(f"kubeconfig: {state.kubeconfig}  (contexts: "
          f"{', '.join(c.name for c in state.clusters)})")
    print(f"try: kubectl --kubeconfig {state.kubeconfig} --context "
          f"{state.clusters[-1].name} get nodes")
    return 0


def _status(args: argparse.Namespace) -> int:
    from dispatcher.devfleet.controlplane import FleetState, ProcessInfo, is_alive, probe
    from dispatcher.output import emit, table

    state = FleetState.read(_root(args))
    if state is None:
        print("no dev fleet running (start one with 'dispatcher dev up')", file=sys.stderr)
        return 1

    def process_row(proc: ProcessInfo, ready: bool) -> dict[str, Any]:
        return {"role": proc.role or "kube-apiserver", "pid": proc.pid,
                "running": is_alive(proc), "ready": ready, "log": proc.log}

    rows: list[dict[str, Any]] = []
    for cluster in state.clusters:
        api_ready = False
        if is_alive(cluster.process):
            try:
                cluster.rest().request("GET", "/readyz", timeout=3)
                api_ready = True
            except (OSError, RuntimeError):
                pass
        processes = [process_row(cluster.process, api_ready)]
        processes += [process_row(p, probe(p)) for p in cluster.components]
        rows.append({"name": cluster.name, "server": cluster.server,
                     "profile": "real" if cluster.real else "light",
                     "ready": all(p["ready"] for p in processes),
                     "pid": cluster.process.pid, "kubeconfig": cluster.kubeconfig,
                     "processes": processes})
    if args.output == "table":
        table(columns=["cluster", "server", "process", "pid", "state"],
              rows=[[row["name"] if i == 0 else "", row["server"] if i == 0 else "",
                     p["role"], p["pid"],
                     "ready" if p["ready"] else "running" if p["running"] else "stopped"]
                    for row in rows for i, p in enumerate(row["processes"])])
        print(f"etcd {state.etcd_url} (pid {state.etcd.pid}, "
              f"{'running' if is_alive(state.etcd) else 'stopped'}); "
              f"merged kubeconfig {state.kubeconfig}; logs in {state.root}/<cluster>/")
    else:
        emit({"kubeconfig": state.kubeconfig, "etcd": state.etcd_url,
              "etcdProcess": process_row(state.etcd, is_alive(state.etcd)), "clusters": rows},
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
        bins = ensure_binaries(members=not args.light)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    names = "kube-apiserver, kubectl" if args.light else \
        "kube-apiserver, kubectl, kube-scheduler, kube-controller-manager"
    kwok = "" if args.light else f"; kwok {bins.kwok_version}"
    print(f"{names} {bins.kubernetes_version}; etcd {bins.etcd_version}{kwok}: "
          f"{bins.kube_apiserver.parent}")
    return 0
