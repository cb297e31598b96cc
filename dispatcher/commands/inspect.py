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
           "resolve_files", "status_trace"]

EPILOG = """\
examples:
  dispatcher inspect job.yaml                      one line per object
  dispatcher inspect job.yaml -o json              pods, GPUs, gangs, pod shapes, status
  kubectl get jobsets -A -o yaml | dispatcher inspect - -o wide
  dispatcher inspect my-crd.yaml --definitions my-defs/   add or override definitions
  kubectl get jobset train -w -o yaml > t.yaml; dispatcher inspect --status-trace t.yaml
                                                   the generic status of every frame
  dispatcher inspect --status-trace recorded.yaml  a Workload Map e2e recording, read
                                                   next to upstream's reading of each frame
  dispatcher inspect --status-trace x.frames.yaml --base x.yaml   catalog frames

exit codes: 0 all resolved; 1 an object or file is broken; 2 an object has no definition;
3 (--status-trace) a frame reads otherwise than its recording or its expect says, and the
definition gives no reason (differsFromUpstream).
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
    parser.add_argument("files", nargs="*", metavar="FILE", help="manifest file, or - for stdin")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"),
                        default="table", help="output format (default: %(default)s)")
    parser.add_argument("--definitions", action="append", default=[], metavar="PATH",
                        help="definition file or directory, added to (and overriding) the "
                             "built-in catalog; repeatable")
    parser.add_argument("--no-builtin", action="store_true",
                        help="use only the --definitions given")
    parser.add_argument("--status-trace", metavar="TRACE",
                        help="replay recorded status frames of one object (objects in order, "
                             "a JSON watch stream, a Workload Map e2e recording, or catalog "
                             "frames with --base) and print the generic status of each")
    parser.add_argument("--base", metavar="MANIFEST",
                        help="with --status-trace: the manifest catalog frames apply to")
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

    if bool(args.status_trace) == bool(args.files):
        print("error: give manifest files, or --status-trace TRACE (not both)", file=sys.stderr)
        return 1
    if args.base and not args.status_trace:
        print("error: --base goes with --status-trace", file=sys.stderr)
        return 1
    try:
        catalog = load_catalog(args.definitions, builtin=not args.no_builtin)
    except DefinitionError as error:
        print(f"error: invalid definitions:\n{error}", file=sys.stderr)
        return 1
    # definitions other than the built-in catalog are untrusted: evaluated in bounded
    # worker processes (docs/definitions.md, "Bounds and trust")
    with Evaluator.for_catalog(catalog) as evaluator:
        if args.status_trace:
            return status_trace(args.status_trace, evaluator, output=args.output,
                                base=args.base)
        results, code = resolve_files(args.files, evaluator)
    print_results(results, output=args.output, empty=code == 0)
    return code


def status_trace(trace: str, evaluator: Evaluator, *, output: str,
                 base: str | None = None) -> int:
    """Read every frame of ``trace`` (``workloads.statustrace``) and print its generic
    status, next to the recording's reading or the frame's ``expect`` when it has one;
    the exit code of ``run``."""
    import yaml

    from dispatcher.output import emit, table
    from dispatcher.workloads.errors import NoDefinitionError, WorkloadError
    from dispatcher.workloads.statustrace import TraceError, frames_of, row_of

    try:
        text = sys.stdin.read() if trace == "-" else Path(trace).read_text(encoding="utf-8")
        manifest: Mapping[str, Any] | None = None
        if base is not None:
            manifests = [o for o in read_objects(base) if isinstance(o, Mapping)]
            if len(manifests) != 1:
                raise TraceError(f"{base}: want one manifest, found {len(manifests)}")
            manifest = manifests[0]
        frames = frames_of(text, base=manifest)
    except (OSError, UnicodeDecodeError, yaml.YAMLError, TraceError) as error:
        print(f"error: {trace}: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    rows: list[dict[str, Any]] = []
    code = 0
    for frame in frames:
        if frame.obj is None:
            rows.append(row_of(frame, None, (), None))
            continue
        try:
            result = evaluator.resolve(frame.obj)
        except NoDefinitionError as error:
            print(f"error: {trace}: frame {frame.label}: {error}", file=sys.stderr)
            return 2
        except WorkloadError as error:
            print(f"error: {trace}: frame {frame.label}: {error}", file=sys.stderr)
            code = 1
            continue
        note = result.reading.upstream_differs
        row = row_of(frame, result.status, result.statuses, note)
        wrong = row.get("agrees") is False or (frame.expect not in (None, result.status))
        if wrong and not note:
            code = max(code, 3)
        rows.append(row)
    if output in ("json", "yaml"):
        emit(rows, fmt=cast("Format", output))
        return code
    from rich.markup import escape  # labels are free text: "[...]" is not markup

    table(columns=["frame", "status", "statuses", "upstream", "reading"],
          rows=[[escape(str(c)) for c in _trace_cells(r, wide=output == "wide")]
                for r in rows])
    return code


def _trace_cells(row: Mapping[str, Any], *, wide: bool) -> list[Any]:
    """One table row of a status trace: READING says whether the frame reads as its
    recording (or its expect) does, and if not, the definition's reason (cut unless wide)."""
    if "action" in row:
        return [row["frame"], f"({row['action']})", "", "", ""]
    upstream = ",".join(row.get("upstream", ())) or row.get("expect") or "-"
    note = row.get("upstreamDiffers")
    same = row.get("agrees", row.get("expect", row["status"]) == row["status"])
    if same is None:
        reading = "- (no upstream reading)" if "upstream" in row else "-"
    elif same:
        reading = "same"
    elif note:
        reading = "differs: " + (note if wide else note[:70] + ("..." if len(note) > 70
                                                                else ""))
    else:
        reading = "DIFFERS (no reason in the definition)"
    return [row["frame"], row["status"], ",".join(row["statuses"]), upstream, reading]


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
