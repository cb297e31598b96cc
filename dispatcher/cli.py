"""The ``dispatcher`` command: one subcommand per module in ``dispatcher.commands``.

Each command module exposes ``register(subparsers)``, adding its parser with
``set_defaults(run=...)``; ``run(args) -> int`` is the exit code. Imports stay lazy inside
each command so ``dispatcher --help`` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Callable, Sequence

__all__ = ["build_parser", "main"]

# Order is the order in --help.
COMMANDS: tuple[str, ...] = (
    "simulate",
    "dev",
    "inspect",
    "definitions",
    "clusters",
    "explain",
    "why",
    "run",
)

DESCRIPTION = """\
Dispatch GPU workloads of any type (JobSet, PyTorchJob, RayJob, LeaderWorkerSet, KServe, ...)
from one hub cluster to the member cluster where every gang fits on real nodes right now.

Start here:
  dispatcher simulate                     the dispatcher on a built-in fleet, in virtual time
  dispatcher inspect job.yaml             what a manifest needs: pods, gangs, GPUs, status
  dispatcher explain -f job.yaml --fleet clusters/local.yaml
                                          which member would take it, and why
  dispatcher dev up                       real local control planes (hub + members)
  dispatcher run --config config/local.yaml
                                          the controller itself
"""


def build_parser() -> argparse.ArgumentParser:
    """The full parser, with every command module registered."""
    parser = argparse.ArgumentParser(
        prog="dispatcher", description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"dispatcher.commands.{name}")
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the process exit code."""
    # Like any Unix tool: `dispatcher ... | head` ends quietly.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[argparse.Namespace], int] | None = getattr(args, "run", None)
    if run is None:
        parser.print_help()
        return 0
    try:
        return run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
