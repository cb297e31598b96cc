"""``dispatcher definitions list|lint``: the workload definition catalog."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["register"]

EPILOG = """\
examples:
  dispatcher definitions list                        the built-in catalog
  dispatcher definitions list --definitions my-defs/ -o yaml
  dispatcher definitions lint definitions/ my-crd.yaml   every error, with file and field

Formats: ResourceInterface (optimization.nvidia.com/v1alpha1) and Karta (run.ai/v1alpha1),
plus the extensions in docs/definitions.md.
"""


def register(subparsers: Any) -> None:
    """Add ``definitions`` with ``list`` and ``lint``."""
    parser = subparsers.add_parser(
        "definitions", help="list or lint workload definitions",
        description="Workload definitions tell the dispatcher, with jq paths, where a "
                    "workload type keeps its pod templates, how many pods it creates, its "
                    "gangs and its status.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="definitions_command", metavar="ACTION", required=True)
    listing = sub.add_parser("list", help="the loaded definitions (built-in + --definitions)")
    listing.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"),
                         default="table")
    listing.add_argument("--definitions", action="append", default=[], metavar="PATH",
                         help="extra definition file or directory; repeatable")
    listing.set_defaults(run=_list)
    lint = sub.add_parser("lint", help="validate definition files; exit 1 listing every error")
    lint.add_argument("paths", nargs="+", metavar="PATH", help="definition file or directory")
    lint.set_defaults(run=_lint)


def _list(args: argparse.Namespace) -> int:
    from dispatcher.commands.inspect import load_catalog
    from dispatcher.output import emit, table
    from dispatcher.workloads.definitions import summary
    from dispatcher.workloads.errors import DefinitionError

    try:
        catalog = load_catalog(args.definitions)
    except DefinitionError as error:
        print(f"error: invalid definitions:\n{error}", file=sys.stderr)
        return 1
    items = [summary(d) for d in catalog.definitions]
    if args.output in ("json", "yaml"):
        emit(items, fmt=args.output)
        return 0
    columns = ["name", "apiVersion", "kind", "components", "gangs"]
    if args.output == "wide":
        columns += ["format", "source"]
    table(columns=columns, rows=[
        [i["name"], i["apiVersion"], i["kind"], ",".join(i["components"]),
         i["gangs"] or "-", *([i["format"], i["source"]] if args.output == "wide" else [])]
        for i in items])
    return 0


def _lint(args: argparse.Namespace) -> int:
    from dispatcher.workloads.definitions import expand_paths, load_file
    from dispatcher.workloads.errors import DefinitionError

    files = expand_paths(args.paths)
    count = 0
    failed = 0
    for path in files:
        try:
            count += len(load_file(path))
        except DefinitionError as error:
            failed += 1
            for issue in error.issues:
                print(issue, file=sys.stderr)
    if not files:
        print("error: no definition files found", file=sys.stderr)
        return 1
    if failed:
        print(f"{failed} of {len(files)} files have errors", file=sys.stderr)
        return 1
    print(f"ok: {count} definitions in {len(files)} files")
    return 0
