"""``kubectl dispatcher``: the kubectl plugin (the ``kubectl-dispatcher`` executable).

How kubectl runs a plugin (``k8s.io/kubectl/pkg/cmd/plugin.go``, ``HandlePluginCommand``):
for a command it does not know, it takes the leading words before the first flag, looks
for the longest ``kubectl-<word>-<word>...`` on PATH, and ``exec``s it with every remaining
argument untouched and its own environment. So ``kubectl dispatcher why -n a jobset/x
--context hub`` runs ``kubectl-dispatcher why -n a jobset/x --context hub``: kubectl parses
none of its global flags for a plugin (``kubectl --context hub dispatcher ...`` is refused by
kubectl itself: "flags cannot be placed before plugin name"), ``$KUBECONFIG`` arrives through
the environment, and ``--help`` reaches the plugin. This module therefore reads kubectl's
flags itself, in the spellings kubectl's flag library (pflag) takes: ``-n NS``, ``-nNS``,
``-n=NS``, ``--namespace=NS``, ``-A``, ``-o json``, before or after the subcommand; the
global flags it cannot honour (``--server``, ``--token``, ``--as``, ...) are refused by
name instead of being ignored.

The hub is reached like kubectl does: ``--kubeconfig`` and ``--context``, else the
controller config's ``hub.kubeconfig`` (``--config``, default ``$DISPATCHER_CONFIG``), else
the first ``$KUBECONFIG`` entry, else ``~/.kube/config``; the namespace is ``-n``, else the
context's namespace, else ``default``. The members (for ``explain`` and ``why``) are the
controller config's (static members and MemberCluster objects), as ``dispatcher explain``
live sees them. The work is the ``dispatcher`` commands' own (``commands.explain``,
``why``, ``inspect``, ``clusters``); this module is only the kubectl-shaped front end.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dispatcher.config import Config

__all__ = ["UNSUPPORTED", "build_parser", "context_namespace", "main", "normalize"]

PROG = "kubectl dispatcher"

DESCRIPTION = """\
The dispatcher, from kubectl: why a hub workload still waits and where there is room, which
member would take it, what it needs, and the member clusters.
"""

EPILOG = """\
examples:
  kubectl dispatcher why -n team-a jobset/train
  kubectl dispatcher why -A
  kubectl dispatcher explain jobset/train -o wide --context hub
  kubectl dispatcher inspect -n team-a pytorchjobs/bert -o json
  kubectl dispatcher clusters -o wide

The hub: --kubeconfig/--context, else the --config file's hub.kubeconfig, else $KUBECONFIG,
else ~/.kube/config. The members: the controller's config (--config FILE, default
$DISPATCHER_CONFIG; without one, the MemberCluster objects on the hub, whose kubeconfig
Secrets the caller must be able to read). Flags go after `dispatcher` (kubectl passes
them through unread); `kubectl dispatcher COMMAND --help` describes each command.
"""

UNSUPPORTED = frozenset({
    "--server", "-s", "--token", "--user", "--cluster", "--as", "--as-group", "--as-uid",
    "--username", "--password", "--certificate-authority", "--client-certificate",
    "--client-key", "--insecure-skip-tls-verify", "--tls-server-name", "--request-timeout",
    "--cache-dir", "--disable-compression", "--match-server-version", "-v", "--v",
    "--vmodule", "--warnings-as-errors", "--profile", "--profile-output",
    "--log-flush-frequency"})
"""kubectl's global flags that this plugin does not honour: refused by name, so a
``--server`` that would be silently ignored never sends a request to another cluster."""

_VALUED_SHORT = ("-n", "-o", "-f")
_BOOLS = {"-A": "-A", "--all-namespaces": "--all-namespaces"}


class UsageError(ValueError):
    """The command line cannot be used as given (message for the user)."""


def normalize(argv: Sequence[str]) -> list[str]:
    """kubectl's (pflag) spellings that argparse reads otherwise, rewritten: ``-n=NS`` and
    ``-o=json`` (argparse would take ``=NS``), ``-A=true|false`` and
    ``--all-namespaces=true|false`` (argparse refuses a value for a switch). Stops at
    ``--``. Raises UsageError for a kubectl global flag in ``UNSUPPORTED``."""
    out: list[str] = []
    for index, arg in enumerate(argv):
        if arg == "--":
            return out + list(argv[index:])
        flag, eq, value = arg.partition("=")
        if flag in UNSUPPORTED:
            raise UsageError(f"{flag} is a kubectl flag kubectl dispatcher does not "
                             "honour: reach the hub through a kubeconfig context "
                             "(--kubeconfig, --context)")
        if eq and flag in _VALUED_SHORT:
            out += [flag, value]
        elif eq and flag in _BOOLS:
            if value.lower() in ("true", "1", "t"):
                out.append(_BOOLS[flag])
            elif value.lower() not in ("false", "0", "f"):
                raise UsageError(f"{flag}: expected true or false, got {value!r}")
        else:
            out.append(arg)
    return out


def _global_flags(parser: argparse.ArgumentParser, *, sub: bool) -> None:
    """kubectl's flags, on the top parser and (not overriding it unless given) on every
    subcommand, so they may stand before or after the subcommand as with kubectl."""
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if sub else value

    group = parser.add_argument_group("kubectl flags")
    group.add_argument("--kubeconfig", metavar="FILE", default=default(None),
                       help="the hub's kubeconfig (default: the --config file's, "
                            "$KUBECONFIG, ~/.kube/config)")
    group.add_argument("--context", default=default(None),
                       help="context in the kubeconfig (default: its current-context)")
    group.add_argument("-n", "--namespace", default=default(None),
                       help="hub namespace (default: the context's, else default)")
    group.add_argument("-A", "--all-namespaces", action="store_true", default=default(False),
                       help="every namespace (why without KIND/NAME)")
    group.add_argument("-o", "--output", choices=("wide", "json", "yaml"),
                       default=default(None), help="output format (default: a table)")
    group.add_argument("--config", metavar="FILE",
                       default=default(os.environ.get("DISPATCHER_CONFIG") or None),
                       help="the controller's config file: its members (default: "
                            "$DISPATCHER_CONFIG, else MemberCluster objects on the hub)")


Run = Callable[[argparse.Namespace, "Config", str], int]


def build_parser() -> argparse.ArgumentParser:
    """The plugin's parser (``prog`` ``kubectl dispatcher``)."""
    parser = argparse.ArgumentParser(prog=PROG, description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_flags(parser, sub=False)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND",
                                     title="commands")

    why = commands.add_parser("why", help="why a workload waits, with every member's "
                                          "numbers; without KIND/NAME every waiting one",
                              description="The controller's reason (from the Dispatch) and, "
                                          "while the workload waits, every member's "
                                          "verdict now. Without KIND/NAME: every waiting "
                                          "workload with its reason.")
    why.add_argument("target", nargs="?", metavar="KIND/NAME")
    _global_flags(why, sub=True)
    why.set_defaults(run=_why)

    explain = commands.add_parser("explain", help="which member would take a workload now",
                                  description="Every member's verdict for a hub workload, "
                                              "live.")
    explain.add_argument("target", metavar="KIND/NAME")
    explain.add_argument("--policy", choices=("most-free", "best-fit"),
                         help="scoring policy (default: the workload's annotation, else "
                              "the controller's)")
    _global_flags(explain, sub=True)
    explain.set_defaults(run=_explain)

    inspect = commands.add_parser("inspect", help="what a workload needs: pods, gangs, GPUs",
                                  description="Resolve hub workloads (KIND/NAME) or "
                                              "manifests (-f) through their definitions.")
    inspect.add_argument("targets", nargs="*", metavar="KIND/NAME")
    inspect.add_argument("-f", "--filename", action="append", default=[], metavar="FILE",
                         help="a manifest file (- for stdin); repeatable")
    _global_flags(inspect, sub=True)
    inspect.set_defaults(run=_inspect)

    clusters = commands.add_parser("clusters", help="the member clusters and their GPUs",
                                   description="MemberCluster objects on the hub.")
    _global_flags(clusters, sub=True)
    clusters.set_defaults(run=_clusters)
    return parser


def context_namespace(kubeconfig: Any, context: str | None) -> str | None:
    """The namespace a kubeconfig's context (``context``, else its current-context) sets,
    as kubectl defaults ``-n`` to it; None when it sets none or cannot be read."""
    if not isinstance(kubeconfig, Mapping):
        return None
    name = context or kubeconfig.get("current-context")
    for entry in kubeconfig.get("contexts") or ():
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get("context")
            namespace = body.get("namespace") if isinstance(body, Mapping) else None
            return str(namespace) if namespace else None
    return None


def _setup(args: argparse.Namespace) -> tuple[Config, str]:
    """The controller config with the hub as kubectl's flags name it, and the namespace."""
    import yaml

    import dispatcher.config as configmod
    from dispatcher.shell.app import hub_kubeconfig_path

    config = configmod.load(args.config)
    if args.kubeconfig:
        # another file: its own current-context unless --context says otherwise
        config = replace(config, hub_kubeconfig=str(Path(args.kubeconfig).expanduser()),
                         hub_context=args.context)
    elif args.context:
        config = replace(config, hub_context=args.context)
    namespace = args.namespace
    if not namespace:
        try:
            data = yaml.safe_load(hub_kubeconfig_path(config).read_text())
        except (OSError, yaml.YAMLError):
            data = None  # the hub read itself says what is wrong with it
        namespace = context_namespace(data, config.hub_context) or "default"
    return config, namespace


def _output(args: argparse.Namespace) -> str:
    return str(args.output or "table")


def _why(args: argparse.Namespace, config: Config, namespace: str) -> int:
    from dispatcher.commands import why

    return why.answer(config, target=args.target, namespace=namespace,
                      all_namespaces=args.all_namespaces, output=_output(args))


def _one_namespace(args: argparse.Namespace) -> None:
    if args.all_namespaces:
        raise UsageError("a workload is named in one namespace: -A does not apply here")


def _explain(args: argparse.Namespace, config: Config, namespace: str) -> int:
    from dispatcher.commands import explain
    from dispatcher.shell.app import load_catalog

    _one_namespace(args)
    catalog = load_catalog(config)
    members, objects, excluded = explain.live(config, catalog, namespace=namespace,
                                              ref=args.target)
    reports, code = explain.explain_objects(
        objects, members=members, catalog=catalog, policy=args.policy,
        default_policy=config.control.default_policy, source="hub", control=config.control,
        excluded=excluded)
    explain.print_reports(reports, output=_output(args))
    return code


def _inspect(args: argparse.Namespace, config: Config, namespace: str) -> int:
    import asyncio

    from dispatcher.commands import inspect
    from dispatcher.shell import live
    from dispatcher.shell.app import load_catalog
    from dispatcher.workloads.bounded import Evaluator
    from dispatcher.workloads.errors import WorkloadError

    _one_namespace(args)
    if not args.targets and not args.filename:
        raise UsageError("inspect: name hub workloads (KIND/NAME) or files (-f FILE)")
    catalog = load_catalog(config)

    async def read() -> list[dict[str, Any]]:
        hub = await live.hub_client(config)
        try:
            return [await live.hub_workload(hub, catalog, namespace=namespace, ref=ref)
                    for ref in args.targets]
        finally:
            await hub.close()

    objects = asyncio.run(read()) if args.targets else []
    code = 0
    results = []
    # definitions other than the built-in catalog are untrusted: bounded worker processes
    with Evaluator.for_catalog(catalog) as evaluator:
        for index, obj in enumerate(objects):
            try:
                results.append(evaluator.resolve(obj))
            except WorkloadError as error:
                print(f"error: hub: {inspect.object_label(obj, index)}: {error}",
                      file=sys.stderr)
                code = max(code, 1)
        found, file_code = inspect.resolve_files(args.filename, evaluator)
    inspect.print_results(results + found, output=_output(args),
                          empty=max(code, file_code) == 0)
    return max(code, file_code)


def _clusters(args: argparse.Namespace, config: Config, namespace: str) -> int:
    from dispatcher.commands import clusters
    from dispatcher.shell.app import hub_kubeconfig_path

    return clusters.list_members(kubeconfig=hub_kubeconfig_path(config),
                                 context=config.hub_context, output=_output(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the plugin; returns the exit code (2 for a usage error, as argparse)."""
    from dispatcher.config import ConfigError
    from dispatcher.kube.errors import KubeError
    from dispatcher.workloads.errors import WorkloadError

    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    try:
        args = parser.parse_args(normalize(sys.argv[1:] if argv is None else argv))
    except UsageError as error:
        parser.error(str(error))
    run: Run | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        config, namespace = _setup(args)
        return run(args, config, namespace)
    except UsageError as error:
        parser.error(str(error))
    except (ConfigError, ValueError, KubeError, OSError, WorkloadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
