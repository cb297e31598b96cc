"""``dispatcher dev up|status|down|build``: real local control planes for tests and demos."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.devfleet.state import ClusterInfo

__all__ = ["register"]

HUB_MODES_HELP = """\
hub modes (--hub):
  dedicated (default)  kube-apiserver + a kube-controller-manager with only the controllers
                       a hub of intents needs (namespace, garbage collector, service
                       accounts and tokens, ClusterRole aggregation, ttl-after-finished),
                       as Karmada and Elotl Nova run theirs: deleting a namespace empties
                       it, a Dispatch whose workload is gone is garbage-collected, but a Job
                       created on the hub gets no pod and no status there. Choose it for
                       everyday work, and when the dispatcher's hub will be a control plane
                       of its own. Works with --light.
  shared               the hub is a full cluster like a member: every controller,
                       kube-scheduler, kwok with the fleet file's 'hub:' Nodes (default 2 x 8
                       NVIDIA-H100-80GB-HBM3) and the same operators and webhooks. A hub Job
                       left alone runs there. Choose it to test a dispatcher installed on a
                       normal cluster that runs workloads too (its webhook must hold them);
                       needs real members. Takes longer to start.
A running fleet of another profile or hub mode is stopped and started afresh.
"""

EPILOG = """\
examples:
  dispatcher dev up                         dedicated hub + the members of clusters/local.yaml
  dispatcher dev up --hub shared            the hub is a full cluster too (see hub modes)
  dispatcher dev up --light                 members run only kube-apiserver: nothing
                                            schedules or runs pods
  dispatcher dev up --with-kueue            + Kueue: MultiKueue manager on the hub, workers
                                            on the members (for comparison; not default)
  dispatcher dev up --with-kueue --kueue-dispatcher ours
                                            the same, with us as MultiKueue's dispatcher
                                            (then: dispatcher run --set mode=multikueue-dispatcher)
  dispatcher dev up --member-kueue --fleet clusters/kueue-members.yaml
                                            each member runs its own Kueue (no MultiKueue):
                                            quota decides what starts there; the fleet
                                            file's 'kueue:' objects are its queues
  kubectl --kubeconfig ~/.cache/dispatcher/devfleet/kubeconfig --context member-1 get nodes
  dispatcher dev status -o json             every process of every cluster
  dispatcher dev down                       stop every process 'up' started, remove state

Each member runs kube-apiserver, kube-controller-manager, kube-scheduler, kwok (simulated
kubelets: nodes stay Ready, bound pods run, a Job's pods succeed after a few seconds) and
the workload operators (JobSet, LWS, KubeRay, training-operator, MPI operator) with their
webhooks; --light members run only kube-apiserver. All clusters share one etcd.

Kubernetes versions are per cluster (the fleet file's 'kubernetes: {version, featureGates}'):
the default fleet is mixed, the hub and member-2 on 1.37 (built-in gangs through
scheduling.k8s.io/v1beta1 PodGroups, GenericWorkload on), member-1 on 1.35 (the v1alpha1
Workload API); 'dispatcher dev status' shows each, 'dispatcher clusters -o wide' what the
dispatcher discovered (VERSION, GANG). A cluster runs the operator builds of its minor
(JobSet v0.12.0 on 1.37: its pod templates keep spec.schedulingGroup).

The first 'up' builds the binaries from the pinned Go modules in deploy/local/ (several
minutes; cached under ~/.cache/dispatcher/bin, keyed by the pins).

""" + HUB_MODES_HELP


HUB_MODE_TEXT = {
    "dedicated": "kube-apiserver + kube-controller-manager limited to namespace, garbage "
                 "collector, service-account, ClusterRole-aggregation and TTL controllers; "
                 "no workload runs on the hub",
    "shared": "a full cluster: every controller, scheduler, kwok nodes, operators; a hub "
              "workload not held by the dispatcher runs there",
}


def register(subparsers: Any) -> None:
    """Add ``dev`` and its subcommands."""
    parser = subparsers.add_parser(
        "dev", help="local control planes (etcd + kube-apiservers) for tests and demos",
        description="Run a real hub and member clusters on loopback: one etcd, one "
                    "kube-apiserver per cluster, GPU Nodes from a fleet file; members also "
                    "run kube-controller-manager, kube-scheduler, kwok and the operators "
                    "unless --light; the hub a limited kube-controller-manager (dedicated) "
                    "or everything a member runs (--hub shared).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--state", type=Path, default=None,
                        help="state directory (default: $DISPATCHER_DEVFLEET or "
                             "~/.cache/dispatcher/devfleet)")
    sub = parser.add_subparsers(dest="dev_command", metavar="ACTION", required=True)
    up = sub.add_parser(
        "up", help="start (or reuse) the hub and members",
        description="Start (or reuse) a hub and the members of a fleet file: one etcd, a "
                    "kube-apiserver per cluster; real members unless --light, a dedicated "
                    "hub unless --hub shared.",
        epilog=HUB_MODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    up.add_argument("--fleet", type=Path, default=Path("clusters/local.yaml"),
                    help="fleet file with members and node pools (default: %(default)s)")
    up.add_argument("--light", action="store_true",
                    help="members run only kube-apiserver (no controllers, scheduler, kwok): "
                         "pods stay Pending, objects change only when you change them")
    up.add_argument("--hub", choices=("dedicated", "shared"), default="dedicated",
                    help="how the hub runs: 'dedicated' (kube-apiserver + namespace, garbage "
                         "collector and service-account controllers only) or 'shared' (a "
                         "full cluster with nodes and operators, like a member); default "
                         "%(default)s, see 'hub modes' below")
    up.add_argument("--job-seconds", type=float, default=None, metavar="S",
                    help="how long a Job's pod runs on a real member (default: 5)")
    up.add_argument("--with-kueue", action="store_true",
                    help="also run Kueue v0.17 (built on first use): a MultiKueue manager on "
                         "the hub, a worker on each member, LocalQueue 'gpus' in namespace "
                         "default (label Jobs/JobSets kueue.x-k8s.io/queue-name=gpus)")
    up.add_argument("--member-kueue", action="store_true",
                    help="each member runs its own Kueue v0.17 (no MultiKueue, nothing on the "
                         "hub) with manageJobsWithoutQueueName: true and the queues of its "
                         "fleet-file 'kueue:' objects (none: ClusterQueue 'gpus' of its "
                         "node GPUs, LocalQueue 'gpus' in namespace default); see "
                         "clusters/kueue-members.yaml")
    up.add_argument("--kueue-dispatcher", choices=("kueue", "ours"), default="kueue",
                    help="with --with-kueue: who chooses the worker MultiKueue copies a "
                         "workload to: 'kueue' (its own, all workers at once) or 'ours' "
                         "(multiKueue.dispatcherName dispatcher.io/multikueue-dispatcher: "
                         "run the controller with mode: multikueue-dispatcher); default "
                         "%(default)s")
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
                       help="only etcd, kube-apiserver, kubectl and kube-controller-manager "
                            "(a light fleet: the dedicated hub runs a kube-controller-manager)")
    build.set_defaults(run=_build)


def _root(args: argparse.Namespace) -> Path:
    from dispatcher.devfleet.devfleet import default_root

    root: Path = args.state or default_root()
    return root


def _up(args: argparse.Namespace) -> int:
    from dispatcher.control.nominator import DISPATCHER_NAME
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
    for flag, given in (("--with-kueue", args.with_kueue), ("--member-kueue", args.member_kueue)):
        if given and args.light:
            print(f"error: {flag} needs real members (drop --light)", file=sys.stderr)
            return 2
    if args.with_kueue and args.member_kueue:
        print("error: --with-kueue (MultiKueue) and --member-kueue are two profiles: choose "
              "one", file=sys.stderr)
        return 2
    if args.hub == "shared" and args.light:
        print("error: --hub shared runs the members' operators on the hub and needs real "
              "members (drop --light)", file=sys.stderr)
        return 2
    if args.kueue_dispatcher == "ours" and not args.with_kueue:
        print("error: --kueue-dispatcher ours is MultiKueue's: add --with-kueue",
              file=sys.stderr)
        return 2
    kueue = (ClientLimits(qps=args.kueue_qps, burst=args.kueue_burst,
                          dispatcher_name=DISPATCHER_NAME
                          if args.kueue_dispatcher == "ours" else None)
             if args.with_kueue else None)
    started = time.monotonic()
    try:
        state = devfleet.up(root=_root(args), fleet=fleet, real=not args.light, hub=args.hub,
                            job_seconds=args.job_seconds or JOB_SECONDS, kueue=kueue,
                            member_kueue=args.member_kueue)
    except (BuildError, RuntimeError, TimeoutError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    queues = ", MultiKueue" if kueue else ", Kueue on members" if args.member_kueue else ""
    profile = ("light" if args.light else "real members" + queues) + f", {args.hub} hub"
    clusters = ", ".join(f"{c.name} (Kubernetes {_minor(c)}{_gates(c)})"
                         for c in state.clusters)
    print(f"dev fleet ({profile}) ready in {time.monotonic() - started:.1f}s: {clusters}")
    print(f"kubeconfig: {state.kubeconfig}  (contexts: "
          f"{', '.join(c.name for c in state.clusters)})")
    print(f"try: kubectl --kubeconfig {state.kubeconfig} --context "
          f"{state.clusters[-1].name} get nodes")
    return 0


def _minor(cluster: ClusterInfo) -> str:
    """The cluster's Kubernetes minor, the default one when its fleet file named none."""
    from dispatcher.devfleet.components import DEFAULT_MINOR
    return cluster.kubernetes or DEFAULT_MINOR


def _gates(cluster: ClusterInfo) -> str:
    gates = ",".join(f"{k}={str(v).lower()}" for k, v in cluster.feature_gates.items())
    return f", {gates}" if gates else ""


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
                     "profile": cluster.profile, "kubernetes": _minor(cluster),
                     "featureGates": cluster.feature_gates,
                     "ready": all(p["ready"] for p in processes),
                     "pid": cluster.process.pid, "kubeconfig": cluster.kubeconfig,
                     "processes": processes})
    if args.output == "table":
        if state.hub_mode:
            print(f"hub mode: {state.hub_mode} ({HUB_MODE_TEXT.get(state.hub_mode, '')})")
        table(columns=["cluster", "profile", "kubernetes", "server", "process", "pid",
                       "state"],
              rows=[[row["name"] if i == 0 else "", row["profile"] if i == 0 else "",
                     row["kubernetes"] if i == 0 else "",
                     row["server"] if i == 0 else "", p["role"], p["pid"],
                     "ready" if p["ready"] else "running" if p["running"] else "stopped"]
                    for row in rows for i, p in enumerate(row["processes"])])
        print(f"etcd {state.etcd_url} (pid {state.etcd.pid}, "
              f"{'running' if is_alive(state.etcd) else 'stopped'}); "
              f"merged kubeconfig {state.kubeconfig}; logs in {state.root}/<cluster>/")
    else:
        emit({"kubeconfig": state.kubeconfig, "etcd": state.etcd_url,
              "hubMode": state.hub_mode or None,
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
    names = "kube-apiserver, kubectl, kube-controller-manager" if args.light else \
        "kube-apiserver, kubectl, kube-controller-manager, kube-scheduler"
    kwok = "" if args.light else f"; kwok {bins.kwok_version}"
    for minor in bins.minors:
        at = bins.at(minor)
        print(f"{names} {at.kubernetes_version}: {at.kube_apiserver.parent}")
    print(f"etcd {bins.etcd_version}{kwok}: {bins.etcd.parent}")
    return 0
