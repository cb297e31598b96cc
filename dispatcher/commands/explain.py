"""``dispatcher explain``: which member would take a workload, and why every other would not.

The decision is the controller's own: ``control.core.placing.place`` (the priority annotation,
the annotation rules, exclusions, the engine with fit counts, parking), so a workload the
controller parks is said to park here too. Only the source of member snapshots differs.
Offline, ``--fleet FILE`` builds them from a fleet file's node pools through the same
capacity model a live watch feeds. Live mode (``-n NS KIND/NAME`` against the hub) reads
the members as the controller sees them, the controller's settings (priority caps, pod
field policy) and the members the workload's Dispatch excluded. What explain cannot see:
the controller's queue (so no namespace gate) and copies already on members (adoption).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, cast

from dispatcher.kube.gangapis import MECHANISMS
from dispatcher.placement.offline import fleet_snapshots

if TYPE_CHECKING:
    from dispatcher.config import Config
    from dispatcher.control.core.placing import Placement
    from dispatcher.control.settings import ControlSettings
    from dispatcher.output import Format
    from dispatcher.placement.model import Decision, MemberSnapshot
    from dispatcher.workloads.demand import Demand
    from dispatcher.workloads.resolve import Resolution

__all__ = ["SnapshotSource", "explain_demand", "explain_objects", "fleet_snapshots", "live",
           "print_reports", "print_table", "register"]

# Returns the members to decide over; raises ValueError with a message for the user.
SnapshotSource = Callable[[], "list[MemberSnapshot]"]

EPILOG = """\
examples:
  dispatcher explain -f train.yaml --fleet clusters/local.yaml
  dispatcher explain -f train.yaml --fleet clusters/local.yaml --policy best-fit -o wide
  dispatcher explain -f train.yaml --fleet clusters/local.yaml -o json | jq .decision.summary
  kubectl get jobset train -o yaml | dispatcher explain -f - --fleet clusters/local.yaml
  dispatcher explain -f train.yaml --fleet clusters/local.yaml --show-copy \
                     --gang-mechanism workload-api
                     also the copy the controller would create on the chosen member: the
                     object, its gang objects, the pods dry-run against its admission
  dispatcher explain -n team-a jobset/train --config config/local.yaml
                     live: the hub object, over the members as the controller sees them

The workload's annotations apply: dispatcher.io/cluster (pin), dispatcher.io/cluster-selector
(label selector over members, e.g. "region in (eu-west,us-east),!legacy") and
dispatcher.io/policy; --policy overrides the annotation.

exit codes: 0 a member was chosen for every workload; 1 unreadable input, broken workload or
a workload the controller parks before any member is asked (unknown pinned member, bad
selector or policy, junk dispatcher.io/priority); 2 no definition for a kind; 3 no member
can take a workload now (or ever: the controller parks it Unplaceable).
"""


def register(subparsers: Any) -> None:
    """Add ``explain``."""
    parser = subparsers.add_parser(
        "explain", help="show which member would take a workload, and why (per member)",
        description="Resolve a workload manifest through its definition, then run the "
                    "placement decision over every member: verdict (fits or not, and how "
                    "many times), the numeric reason an operator can act on, the policy "
                    "score, the chosen member and the nodes its pods would use.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", metavar="KIND/NAME",
                        help="live mode: a workload on the hub (with -n), explained over "
                             "the members as the controller sees them now")
    parser.add_argument("-f", "--filename", metavar="FILE",
                        help="workload manifest (YAML/JSON, several documents allowed); - "
                             "for stdin")
    parser.add_argument("-n", "--namespace", default="default",
                        help="live mode: hub namespace of KIND/NAME (default: %(default)s)")
    parser.add_argument("--config", metavar="FILE",
                        help="live mode: the controller's config file (hub and members; "
                             "default: built-in defaults with $KUBECONFIG)")
    parser.add_argument("--fleet", metavar="FILE",
                        help="fleet file describing the members as node pools "
                             "(e.g. clusters/local.yaml)")
    parser.add_argument("--policy", choices=("most-free", "best-fit"),
                        help="scoring policy (default: the dispatcher.io/policy annotation, "
                             "else most-free)")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"),
                        default="table", help="output format (default: %(default)s)")
    parser.add_argument("--show-copy", action="store_true",
                        help="also print the copy the controller would create on the chosen "
                             "member (control.core.copyplan: the object as sent, the Workload or "
                             "PodGroups of its gangs), or why it would not be written")
    parser.add_argument("--gang-mechanism", choices=MECHANISMS, default=None,
                        help="offline: the members' gang mechanism the copy is joined to "
                             "(default: none; live mode reads each member's)")
    parser.add_argument("--definitions", action="append", default=[], metavar="PATH",
                        help="extra definition file or directory (added to the built-in "
                             "catalog); repeatable")
    parser.set_defaults(run=run)


def explain_demand(demand: Demand, *, members: Sequence[MemberSnapshot], api_version: str = "",
                   kind: str = "", annotations: Mapping[str, str] | None = None,
                   policy: str | None = None, namespace: str = "",
                   default_policy: str = "most-free") -> Decision:
    """The explained decision for a demand, through the controller's ``place_ask``:
    ``policy`` (``--policy``) over the ``dispatcher.io/policy`` annotation over
    ``default_policy`` (the controller's ``placement.defaultPolicy`` in live mode).

    Raises ``PlacementError`` with the controller's message when it would park the demand
    before asking any member (an invalid request: unknown pinned member, bad selector).
    """
    from dispatcher.control.core import parking
    from dispatcher.control.core.placing import Ask, Setting, place_ask
    from dispatcher.control.core.queue import Entry, PendingQueue
    from dispatcher.placement.model import PlacementError

    ask = Ask(entry=Entry(uid="", priority=0, created=0.0, namespace=namespace),
              demand=demand, api_version=api_version, kind=kind,
              annotations=annotations or {})
    placement = place_ask(ask, Setting(
        members=lambda: members, bare=parking.BareFleet(), queue=PendingQueue(backfill_limit=0),
        default_policy=default_policy, now=0.0, count_fits=True, policy=policy))
    decision = placement.checked or placement.decision
    if not placement.decided:
        raise PlacementError(decision.summary)
    return decision


def explain_placement(obj: Mapping[str, Any], resolution: Resolution, *,
                      members: Sequence[MemberSnapshot], policy: str | None,
                      default_policy: str, control: ControlSettings | None = None,
                      excluded: Sequence[str] = ()) -> Placement:
    """The controller's ``place`` for a resolved object, with fit counts: ``control``'s
    priority caps and pod field policy (live mode; defaults offline), ``excluded`` the
    members its Dispatch gave up on. Explain sees no queue (no namespace gate) and no
    copies on members (no adoption)."""
    import time

    from dispatcher.control.core import parking
    from dispatcher.control.core.placing import PlacementInput, place
    from dispatcher.control.core.podpolicy import PodFieldPolicy
    from dispatcher.control.core.priority import PriorityPolicy
    from dispatcher.control.core.queue import PendingQueue

    meta = obj.get("metadata") or {}
    return place(PlacementInput(
        uid=str(meta.get("uid") or ""), workload=obj, resolution=resolution,
        excluded=tuple(excluded), held=(), members=lambda: members,
        bare=parking.BareFleet(), queue=PendingQueue(backfill_limit=0),
        priority=control.priority if control is not None else PriorityPolicy(),
        pod_fields=control.pod_policy if control is not None else PodFieldPolicy(),
        default_policy=default_policy, reservation_ttl_s=0.0, now=time.time(),
        count_fits=True, policy=policy))


def _offline_source(path: str) -> SnapshotSource:
    def load() -> list[MemberSnapshot]:
        from dispatcher.fleet.fleetfile import load_fleet

        return fleet_snapshots(load_fleet(path))
    return load


def run(args: argparse.Namespace) -> int:
    """Explain every workload of the file; decisions on stdout, problems on stderr."""
    import yaml

    import dispatcher.config as configmod
    from dispatcher.commands.inspect import load_catalog, read_objects
    from dispatcher.fleet.fleetfile import FleetFileError
    from dispatcher.kube.errors import KubeError
    from dispatcher.workloads.errors import DefinitionError

    if args.target and args.gang_mechanism:
        print("error: --gang-mechanism is offline only (live mode reads each member's)",
              file=sys.stderr)
        return 1
    if args.target and (args.filename or args.fleet):
        print("error: KIND/NAME (live) and -f/--fleet (offline) do not mix", file=sys.stderr)
        return 1
    if not args.target and not (args.filename and args.fleet):
        print("error: give -f FILE --fleet FILE (offline) or -n NS KIND/NAME (live, against "
              "the hub)", file=sys.stderr)
        return 1
    default_policy = "most-free"
    control: ControlSettings | None = None
    excluded: dict[str, tuple[str, ...]] = {}
    try:
        catalog = load_catalog(args.definitions)
        if args.target:
            config = configmod.load(args.config)
            members, objects, excluded = live(config, catalog, namespace=args.namespace,
                                              ref=args.target)
            default_policy, control = config.control.default_policy, config.control
        else:
            members = _offline_source(args.fleet)()
            if args.gang_mechanism:
                members = [replace(m, gang_mechanism=args.gang_mechanism) for m in members]
            objects = read_objects(args.filename)
    except (FleetFileError, ValueError, KubeError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except DefinitionError as error:
        print(f"error: invalid definitions:\n{error}", file=sys.stderr)
        return 1
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as error:
        print(f"error: {args.filename}: cannot read manifests: {' '.join(str(error).split())}",
              file=sys.stderr)
        return 1
    reports, code = explain_objects(objects, members=members, catalog=catalog,
                                    policy=args.policy, default_policy=default_policy,
                                    source=args.filename or "hub", control=control,
                                    excluded=excluded, show_copy=args.show_copy)
    print_reports(reports, output=args.output)
    return code


def explain_objects(objects: Sequence[Any], *, members: Sequence[MemberSnapshot],
                    catalog: Any, policy: str | None, default_policy: str, source: str,
                    control: ControlSettings | None = None,
                    excluded: Mapping[str, Sequence[str]] | None = None,
                    show_copy: bool = False) -> tuple[list[dict[str, Any]], int]:
    """One report per object that resolves and reaches the members (the others are said
    on stderr, naming ``source``, with the reason the controller would park them), and the
    exit code (see ``EPILOG``). A report holds the workload, ``decision`` (its dict),
    ``_decision`` (the ``Decision``), ``parked`` (the reason and message when the controller
    parks it after asking the members: never placeable; else None) and ``gangMechanism``:
    the gang mechanism the chosen member's copy would be built for (None: none chosen).
    ``control`` and ``excluded`` (by workload uid) are live mode's (``explain_placement``).
    ``show_copy``: with a member chosen, ``copy`` is the copy the controller would create
    there (``copy_report``).
    """
    from dispatcher.commands.inspect import object_label
    from dispatcher.workloads.errors import NoDefinitionError, WorkloadError

    code = 0
    reports: list[dict[str, Any]] = []
    for index, obj in enumerate(objects):
        label = object_label(obj, index)
        try:
            resolution = catalog.resolve(obj)
        except NoDefinitionError as error:
            print(f"error: {source}: {label}: {error}", file=sys.stderr)
            code = max(code, 2)
            continue
        except WorkloadError as error:
            print(f"error: {source}: {label}: {error}", file=sys.stderr)
            code = max(code, 1)
            continue
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        placement = explain_placement(
            obj, resolution, members=members, policy=policy, default_policy=default_policy,
            control=control, excluded=(excluded or {}).get(uid, ()))
        decision = placement.checked or placement.decision
        if not placement.decided:  # parked before any member was asked
            print(f"error: {source}: {label}: parked ({placement.reason}): "
                  f"{decision.summary}", file=sys.stderr)
            code = max(code, 1)
            continue
        if decision.chosen is None and code == 0:
            code = 3
        chosen = next((m for m in members if m.name == decision.chosen), None)
        parked = placement.checked is not None
        reports.append({"workload": {"apiVersion": resolution.api_version,
                                     "kind": resolution.kind,
                                     "namespace": resolution.namespace,
                                     "name": resolution.name},
                        "decision": decision.to_dict(), "_decision": decision,
                        "parked": {"reason": str(placement.reason),
                                   "message": placement.decision.summary} if parked else None,
                        "gangMechanism": chosen.gang_mechanism if chosen else None})
        if show_copy and chosen is not None:
            reports[-1]["copy"] = copy_report(obj, resolution, catalog=catalog,
                                              member=chosen, decision=decision,
                                              control=control)
    return reports, code


def copy_report(obj: Mapping[str, Any], resolution: Resolution, *, catalog: Any,
                member: MemberSnapshot, decision: Decision,
                control: ControlSettings | None) -> dict[str, Any]:
    """The controller's own copy plan (``control.core.copyplan.plan``) for ``member``, from the
    same resolution, the member's gang mechanism, the decision's topology domains and
    planned nodes;
    ``control``'s hub id, pod mutations and pod field policy (defaults offline). A copy
    that would not be written says why (``refused``), the member's Kubernetes minor
    included (fields it would drop; Pod Security checks it lacks, judged at the floor
    level: explain does not read the hub namespace's). The definition's paths run
    in-process: explain runs the local catalog, not a tenant's on a shared host."""
    from dispatcher.control.core.copies import Rejection
    from dispatcher.control.core.copyplan import PlanInput, plan
    from dispatcher.control.settings import ControlSettings
    from dispatcher.kube import podsecurity

    settings = control or ControlSettings()
    definition = catalog.find(resolution.api_version, resolution.kind)
    planned = plan(PlanInput(
        uid=str((obj.get("metadata") or {}).get("uid") or ""), member=member.name,
        workload=obj, definition=definition, resolution=resolution, hub_id=settings.hub_id,
        mechanism=member.gang_mechanism, queueing=member.queueing,
        domains=tuple(decision.domains),
        nodes=tuple(g.node for g in decision.assignment)
        if settings.prefer_planned_nodes and decision.chosen == member.name else (),
        mutations=settings.pod_mutations, pod_fields=settings.pod_policy,
        dry_run=settings.admission_check, member_version=member.kubernetes_version,
        pod_security=podsecurity.required({}, floor=settings.pod_security_floor)))
    if isinstance(planned, Rejection):
        return {"member": member.name, "refused": planned.describe()}
    return planned.to_dict()


def print_reports(reports: Sequence[Mapping[str, Any]], *, output: str) -> None:
    """The reports as ``output`` (table, wide, json, yaml) on stdout."""
    from dispatcher.output import emit

    if output in ("json", "yaml"):
        data = [{k: v for k, v in r.items() if k != "_decision"} for r in reports]
        if data:
            emit(data[0] if len(data) == 1 else data, fmt=cast("Format", output))
        return
    for i, report in enumerate(reports):
        if i:
            print()
        print_table(report, wide=output == "wide")


def live(config: Config, catalog: Any, *, namespace: str, ref: str
         ) -> tuple[list[MemberSnapshot], list[Any], dict[str, tuple[str, ...]]]:
    """Live mode: the members as the controller of ``config`` sees them now, the hub
    object ``ref`` (``KIND/NAME``) in ``namespace``, and by its uid the members its
    Dispatch excluded (earlier attempts that failed there). Raises ValueError, KubeError,
    OSError."""
    import asyncio

    from dispatcher.control.core import record
    from dispatcher.control.observe import configure_logging
    from dispatcher.shell import live as liveview

    configure_logging(level="warning", stream=sys.stderr)  # stdout is the report

    async def read() -> tuple[list[MemberSnapshot], list[Any], dict[str, tuple[str, ...]]]:
        hub = await liveview.hub_client(config)
        try:
            obj = await liveview.hub_workload(hub, catalog, namespace=namespace, ref=ref)
            uid = str(obj.get("metadata", {}).get("uid", ""))
            dispatch = await liveview.dispatch_of(hub, obj)
            excluded = record.read(dispatch).excluded if dispatch is not None else ()
            members = await liveview.live_snapshots(config, hub=hub, catalog=catalog,
                                                    exclude_uid=uid)
            return members, [obj], {uid: excluded}
        finally:
            await hub.close()

    return asyncio.run(read())


def print_table(report: Mapping[str, Any], *, wide: bool) -> None:
    """One report as the per-member table, the chosen nodes and the summary."""
    from dispatcher.output import table

    decision: Decision = report["_decision"]
    workload = report["workload"]
    print(f"{workload['kind']}/{workload['name']}: {decision.pods} pod(s), {decision.gpus} "
          f"GPU(s), {decision.gangs} gang(s); policy {decision.policy}")
    columns = ["member", "verdict", "free", "after", "fits", "score", "reason"]
    quota = any(v.quota is not None for v in decision.verdicts)
    if quota:
        columns.insert(6, "quota")  # Kueue members: the bound their queue adds
    if wide:
        columns.append("nodes")
    rows = []
    for verdict in decision.verdicts:
        state = ("chosen" if verdict.member == decision.chosen
                 else "fits" if verdict.feasible else "no")
        row: list[Any] = [verdict.member, state, verdict.free,
                          "-" if verdict.free_after is None else verdict.free_after,
                          "-" if verdict.fits is None else verdict.fits,
                          "-" if verdict.score is None else f"{verdict.score:g}",
                          verdict.reason]
        if quota:
            row.insert(6, verdict.quota.cell() if verdict.quota is not None else "-")
        if wide:
            row.append(",".join(f"{g.node}={g.gpus}" for g in verdict.assignment) or "-")
        rows.append(row)
    table(columns=columns, rows=rows)
    _print_domains(decision)
    if decision.chosen is not None:
        nodes = ", ".join(f"{g.node} ({g.gpus} GPUs, {g.pods} pod(s))"
                          for g in decision.assignment)
        print(f"chosen: {decision.chosen}; nodes: {nodes or 'none (no GPU pods)'}")
        if decision.domains:
            print("domains: " + ", ".join(f"{d.level} {d.value} (gang {', '.join(d.gangs)})"
                                          for d in decision.domains))
        if report.get("gangMechanism"):
            print(f"gang mechanism on {decision.chosen}: {report['gangMechanism']}")
    else:
        print("chosen: none")
    print(f"summary: {decision.summary}")
    parked = report.get("parked")
    if parked:
        print(f"parked ({parked['reason']}): {parked['message']}")
    if "copy" in report:
        _print_copy(report["copy"])


def _print_copy(copy: Mapping[str, Any]) -> None:
    """The planned copy as YAML documents: the object, then its gang objects."""
    import yaml

    print()
    if "refused" in copy:
        print(f"copy on {copy['member']}: not written: {copy['refused']}")
        return
    gangs = len(copy["gangObjects"])
    print(f"copy on {copy['member']} (namespace {copy['namespace']}; gang mechanism "
          f"{copy['gangMechanism']}, the member's {copy['memberGangMechanism']}; "
          f"{gangs} gang object(s); {copy['dryRunPods']} pod(s) dry-run first):")
    for line in copy["gangsSkipped"]:
        print(f"  gang not joined: {line}")
    for line in copy.get("gangNotes", ()):
        print(f"  gang held: {line}")
    first = ("apiVersion", "kind", "metadata")
    documents = [{**{k: o[k] for k in first if k in o}, **o}
                 for o in (copy["object"], *copy["gangObjects"])]
    print(yaml.safe_dump_all(documents, sort_keys=False, explicit_start=True), end="")


def _print_domains(decision: Decision) -> None:
    """With a topology request: every member's domains, per gang, with their numbers (free
    GPUs the gang's pods may use there, how many of its pods the packer placed there)."""
    from dispatcher.output import table

    rows: list[list[Any]] = []
    for verdict in decision.verdicts:
        chosen = {(d.gangs, d.value) for d in verdict.domains} \
            if verdict.member == decision.chosen else set()
        for room in verdict.rooms:
            rows.append([verdict.member, room.level, room.value, room.free,
                         f"{room.pods}/{room.wanted}", ",".join(room.gangs),
                         "chosen" if (room.gangs, room.value) in chosen else "-"])
    if rows:
        print()
        table(columns=["member", "level", "domain", "free", "pods", "gangs", "chosen"],
              rows=rows)
