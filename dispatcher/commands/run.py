"""``dispatcher run``: the controller (hub watches, dispatch, mirror, delete, failover)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]

DESCRIPTION = """\
Run the dispatch controller against a hub cluster.

It watches every workload kind of the definition catalog that the hub serves, records a
Dispatch for each workload (kubectl get dispatches -A), picks the member where every gang
fits on real nodes, creates the workload there, mirrors its status back to the hub object,
deletes the copy when the hub object is deleted, and fails over when a member is lost.
Replicas elect a leader on a Lease; only the leader acts.

Configuration comes from one YAML file (config/default.yaml lists every key with its
default); flags override the file. Problems name the file and the key, and the exit code
is 2. Logs are JSON lines on stdout; /metrics, /healthz and /readyz are served on
server.address:server.port.
"""

EPILOG = """\
examples:
  dispatcher dev up && dispatcher run --config config/local.yaml
                                    the controller against the local dev fleet
  dispatcher run --config config/local.yaml --check
                                    validate the configuration and print it, warn when the
                                    hub does not look like hub.mode says, then exit
  dispatcher dev up --hub shared && dispatcher run -c config/local.yaml --hub-mode shared
                                    a hub that runs its own controllers: the webhook holds
                                    every dispatched workload there
  dispatcher run -c prod.yaml --set failover.policy=never --set workers=128
  dispatcher dev up --with-kueue --kueue-dispatcher ours && \
    dispatcher run -c config/local.yaml --mode multikueue-dispatcher
                                    any key of the file, overridden from the command line
  dispatcher run --hub-kubeconfig hub.kubeconfig --member gpu-a=a.kubeconfig \\
                 --member gpu-b=b.kubeconfig --no-leader-election
                                    no config file: static members from flags

exit codes: 0 stopped by SIGTERM/SIGINT, 1 leadership lost, 2 invalid configuration.
"""


def register(subparsers: Any) -> None:
    """Add ``run``."""
    parser = subparsers.add_parser(
        "run", help="run the dispatch controller", description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-c", "--config", metavar="FILE",
                        help="configuration file (default: built-in defaults)")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE",
                        help="override one key of the file, e.g. failover.policy=always "
                             "(value read as YAML; repeatable)")
    parser.add_argument("--hub-kubeconfig", metavar="FILE", help="hub kubeconfig (hub.kubeconfig)")
    parser.add_argument("--hub-context", metavar="NAME", help="hub context (hub.context)")
    parser.add_argument("--hub-id", metavar="ID", help="origin id stamped on copies (hubId)")
    parser.add_argument("--hub-mode", choices=("dedicated", "shared"),
                        help="dedicated: the hub runs no workload controllers; shared: they "
                             "run, and the webhook holds dispatched workloads there (hub.mode)")
    parser.add_argument("--mode", choices=("dispatch", "multikueue-dispatcher"),
                        help="dispatch: copies of our own; multikueue-dispatcher: nominate "
                             "workers for the hub's Kueue MultiKueue (mode)")
    parser.add_argument("-n", "--namespace", action="append", default=[], metavar="NS",
                        help="hub namespace to watch (watch.namespaces; repeatable)")
    parser.add_argument("--member", action="append", default=[], metavar="NAME=KUBECONFIG",
                        help="add a static member (fleet.staticMembers; repeatable)")
    parser.add_argument("--port", type=int, metavar="PORT",
                        help="metrics/health port, 0 for none (server.port)")
    parser.add_argument("--no-leader-election", action="store_true",
                        help="act without a Lease (one replica only!)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help="log level (log.level)")
    parser.add_argument("--event-loop", choices=("uvloop", "asyncio"), default=None,
                        help="the event loop (default: uvloop when installed, else asyncio)")
    parser.add_argument("--check", action="store_true",
                        help="validate the configuration, print it as JSON and exit")
    parser.set_defaults(run=_run)


def _overrides(args: argparse.Namespace) -> list[str]:
    out = list(args.overrides)
    for flag, key in (("hub_kubeconfig", "hub.kubeconfig"), ("hub_context", "hub.context"),
                      ("hub_id", "hubId"), ("hub_mode", "hub.mode"), ("mode", "mode"),
                      ("port", "server.port"),
                      ("log_level", "log.level")):
        value = getattr(args, flag)
        if value is not None:
            out.append(f"{key}={value}")
    if args.no_leader_election:
        out.append("leaderElection.enabled=false")
    return out


def _run(args: argparse.Namespace) -> int:
    import asyncio
    import json
    from pathlib import Path

    import dispatcher.config as configmod
    from dispatcher.shell import app

    def edit(data: dict[str, Any]) -> None:
        if args.namespace:
            data.setdefault("watch", {})["namespaces"] = list(args.namespace)
        for item in args.member:
            name, sep, path = item.partition("=")
            if not sep or not name or not path:
                raise configmod.ConfigError(f"--member {item!r}: expected NAME=KUBECONFIG")
            fleet = data.setdefault("fleet", {})
            members = fleet.setdefault("staticMembers", [])
            members.append({"name": name, "kubeconfig": str(Path(path).resolve())})

    try:
        config = configmod.load(args.config, overrides=_overrides(args), edit=edit)
    except configmod.ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        print(json.dumps(_plain(config), indent=2))
        for warning in asyncio.run(app.check_hub(config)):
            print(f"warning: {warning}", file=sys.stderr)
        return 0
    from dispatcher.shell import eventloop

    return eventloop.run(app.run(config), loop=args.event_loop or eventloop.default_loop())


def _plain(value: Any) -> Any:
    """Dataclasses, mappings and tuples as JSON-ready values (for ``--check``)."""
    import dataclasses
    from collections.abc import Mapping

    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_plain(v) for v in value)
    return value
