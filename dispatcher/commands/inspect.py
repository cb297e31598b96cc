"""``dispatcher inspect FILE|- ...``: what a manifest needs, through its definition."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from dispatcher.output import Format
    from dispatcher.workloads.bounded import Evaluator
    from dispatcher.workloads.catalog import Catalog
    from dispatcher.workloads.resolve import Resolution

__all__ = ["load_catalog", "object_label", "print_results", "read_objects", "register",
           "resolve_files"]

EPILOG = """\
examples:
  dispatcher inspect job.yaml                      one line per object
  dispatcher inspect job.yaml -o json              pods, GPUs, gangs, pod shapes, status
  kubectl get jobsets -A -o yaml | dispatcher inspect - -o wide
  dispatcher inspect my-crd.yaml --definitions my-defs/   add or override definitions

exit codes: 0 all resolved; 1 an object or file is broken; 2 an object has no definition.
"""


def register(subparsers: Any) -> None:
    """Add ``inspect``."""
    parser = subparsers.add_parser(
        "inspect", help="show what a workload manifest needs: pods, gangs, GPUs, status",
        description="Resolve workload manifests through their definitions (built-in "
                    "catalog plus --definitions) and print pods, GPUs, gangs with pod "
                    "shapes, components and the generic status. Reads YAML or JSON, "
                    "several documents per file, List objects; '-' is stdin.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("files", nargs="+", metavar="FILE", help="manifest file, or - for stdin")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"),
                        default="table", help="output format (default: %(default)s)")
    parser.add_argument("--definitions", action="append", default=[], metavar="PATH",
                        help="definition file or directory, added to (and overriding) the "
                             "built-in catalog; repeatable")
    parser.add_argument("--no-builtin", action="store_true",
                        help="use only the --definitions given")
    parser.set_defaults(run=run)


def load_catalog(paths: list[str], *, builtin: bool = True) -> Catalog:
    """The built-in catalog (unless told not to) merged with extra definition paths."""
    from dispatcher.workloads.catalog import Catalog

    parts = [Catalog.builtin()] if builtin else []
    if paths:
        parts.append(Catalog.load(paths))
    return Catalog.merged(*parts)


def read_objects(name: str) -> list[Any]:
    """The objects of one file (``-`` = stdin): YAML/JSON documents, lists, ``List`` items."""
    import yaml

    text = sys.stdin.read() if name == "-" else Path(name).read_text(encoding="utf-8")
    out: list[Any] = []
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present
    for doc in yaml.load_all(text, Loader=loader):
        if doc is None:
            continue
        if isinstance(doc, list):
            out.extend(doc)
        elif isinstance(doc, Mapping) and str(doc.get("kind", "")).endswith("List") \
                and isinstance(doc.get("items"), list):
            out.extend(doc["items"])
        else:
            out.append(doc)
    return out


def run(args: argparse.Namespace) -> int:
    """Resolve every object of every file; print results; errors go to stderr."""
    from dispatcher.workloads.bounded import Evaluator
    from dispatcher.workloads.errors import DefinitionError

    try:
        catalog = load_catalog(args.definitions, builtin=not args.no_builtin)
    except DefinitionError as error:
        print(f"error: invalid definitions:\n{error}", file=sys.stderr)
        return 1
    # definitions other than the built-in catalog are untrusted: evaluated in bounded
    # worker processes (docs/definitions.md, "Bounds and trust")
    with Evaluator.for_catalog(catalog) as evaluator:
        results, code = resolve_files(args.files, evaluator)
    print_results(results, output=args.output, empty=code == 0)
    return code


def print_results(results: list[Resolution], *, output: str, empty: bool = True) -> None:
    """Resolutions as ``output`` (table, wide: one line per object, then one per gang
    unit; json, yaml: the DESIGN shape, one object or a list). ``empty``: print an empty
    list for no results in json/yaml (not when every object failed)."""
    from dispatcher.output import emit, table

    if output in ("json", "yaml"):
        data = [r.to_dict() for r in results]
        if data or empty:
            emit(data[0] if len(data) == 1 else data, fmt=cast("Format", output))
    elif results:
        wide = output == "wide"
        columns = ["kind", "name", "definition", "status", "pods", "gpus", "gangs"]
        if wide:
            columns += ["namespace", "min pods", "shapes"]
        table(columns=columns, rows=[_row(r, wide=wide) for r in results])
        units = [row for r in results for row in _unit_rows(r, wide=wide)]
        if units:
            print()
            table(columns=["object", "gang", "unit", "pods", "min pods", "gpus"]
                  + (["shapes"] if wide else []), rows=units)


def resolve_files(files: list[str], evaluator: Evaluator) -> tuple[list[Resolution], int]:
    """Resolve every object of every file; errors go to stderr; the exit code."""
    import yaml

    from dispatcher.workloads.errors import NoDefinitionError, WorkloadError

    results: list[Resolution] = []
    code = 0
    for name in files:
        try:
            objects = read_objects(name)
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
            print(f"error: {name}: cannot read manifests: {' '.join(str(error).split())}",
                  file=sys.stderr)
            code = max(code, 1)
            continue
        for index, obj in enumerate(objects):
            try:
                results.append(evaluator.resolve(obj))
            except NoDefinitionError as error:
                print(f"error: {name}: {object_label(obj, index)}: {error}", file=sys.stderr)
                code = 2
            except WorkloadError as error:
                print(f"error: {name}: {object_label(obj, index)}: {error}", file=sys.stderr)
                code = max(code, 1)
    return results, code


def object_label(obj: Any, index: int) -> str:
    """``Kind/name`` of an object for messages; its position when it has no name."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata")
        name = meta.get("name") if isinstance(meta, Mapping) else None
        return f"{obj.get('kind', '?')}/{name or f'#{index}'}"
    return f"document #{index}"


def _row(result: Resolution, *, wide: bool) -> list[Any]:
    """One object: GANGS counts real gangs (independent pods are listed, not counted)."""
    gangs = result.demand.gangs
    row: list[Any] = [result.kind, result.name, result.definition_name, result.status,
                      result.demand.pods, result.demand.gpus,
                      sum(1 for g in gangs if not g.independent)]
    if wide:
        shapes = sorted({f"{s.gpus}x{s.gpu_product or 'any'}" for g in gangs
                         for s in g.pod_shapes})
        row += [result.namespace, ",".join(str(g.min_pods) for g in gangs) or "-",
                ",".join(shapes) or "-"]
    return row


def _unit_rows(result: Resolution, *, wide: bool) -> list[list[Any]]:
    """One row per unit of an object: UNIT ``gang`` (started together, MIN PODS its
    minimum) or ``pods`` (independent pods, each a unit of its own)."""
    rows = []
    for gang in result.demand.gangs:
        row: list[Any] = [f"{result.kind}/{result.name}", gang.name,
                          "pods" if gang.independent else "gang", gang.pods, gang.min_pods,
                          gang.gpus]
        if wide:
            row.append(",".join(f"{s.count}x{s.gpus}x{s.gpu_product or 'any'}"
                                for s in gang.pod_shapes) or "-")
        rows.append(row)
    return rows
