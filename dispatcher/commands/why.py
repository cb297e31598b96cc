"""``dispatcher why``: why a hub workload is still pending, and where there is room now.

The answer has two halves from two sources. The controller's own words come from the
workload's Dispatch: its phase, the ``Placed`` condition's reason and message (the decision
summary), since when it waits, earlier attempts and the members they excluded. The numbers
per member come from a live explanation (``dispatcher explain`` live: the members as the
controller sees them now, reservations included), which recomputes the decision, so a
fleet that changed since the controller last looked says so. A workload that is placed
needs no explanation: where it went and why is printed from the Dispatch alone.

A workload that Kueue queues on the hub (MultiKueue, with the dispatcher as its external
dispatcher: there is no Dispatch) is answered from its Kueue Workload instead
(``kueue_summary``): waiting for quota (Kueue's own message), waiting for a worker (the
dispatcher's last ``NoWorkerFits`` Event, and the live verdict of every MultiKueue
worker), nominated, or running on the worker that admitted it.

Without ``KIND/NAME``: every waiting workload of the namespace (``-A``: of the hub) with its
reason, from the Dispatches alone (no member is contacted).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from dispatcher.config import Config
    from dispatcher.output import Format

__all__ = ["answer", "dispatch_summary", "kueue_summary", "pending_rows", "register", "run"]

EPILOG = """\
examples:
  dispatcher why -n team-a jobset/train --config config/local.yaml
                             the reason it waits, and every member's verdict now
  dispatcher why -n team-a                     every waiting workload of team-a
  dispatcher why -A -o wide                    every waiting workload, full messages
  dispatcher why -n team-a job/train -c config/local.yaml
                             a job Kueue queues on the hub (MultiKueue): its quota,
                             the worker nominated or why none fits, each worker now
  kubectl dispatcher why -n team-a jobset/train     the same, as a kubectl plugin

exit codes: 0 answered (pending or not); 1 unreadable config, hub or workload.
"""

_MESSAGE_CUT = 100


def register(subparsers: Any) -> None:
    """Add ``why``."""
    parser = subparsers.add_parser(
        "why", help="why a hub workload is still pending, with every member's numbers",
        description="Read the workload's Dispatch (the controller's reason and message, "
                    "since when it waits, earlier attempts) and, while it waits, explain "
                    "it live over the members as the controller sees them now.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("target", nargs="?", metavar="KIND/NAME",
                        help="a workload on the hub; without it, list the waiting ones")
    parser.add_argument("-n", "--namespace", default="default",
                        help="hub namespace (default: %(default)s)")
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        help="without KIND/NAME: waiting workloads of every namespace")
    parser.add_argument("--config", metavar="FILE",
                        help="the controller's config file (hub and members; default: "
                             "built-in defaults with $KUBECONFIG)")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"),
                        default="table", help="output format (default: %(default)s)")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """``dispatcher why``: load the config, then ``answer``."""
    import dispatcher.config as configmod

    try:
        config = configmod.load(args.config)
    except configmod.ConfigError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return answer(config, target=args.target, namespace=args.namespace,
                  all_namespaces=args.all_namespaces, output=args.output)


def answer(config: Config, *, target: str | None, namespace: str, all_namespaces: bool,
           output: str) -> int:
    """Print the answer for ``target`` in ``namespace`` (or the waiting list) as
    ``output``; the exit code (see ``EPILOG``)."""
    import asyncio

    from dispatcher.kube.errors import KubeError
    from dispatcher.shell.app import load_catalog
    from dispatcher.workloads.errors import WorkloadError

    if target and all_namespaces:
        print("error: a workload is named in one namespace: drop -A or KIND/NAME",
              file=sys.stderr)
        return 1
    try:
        if not target:
            listed = asyncio.run(_list_dispatches(config, None if all_namespaces
                                                  else namespace))
            _print_rows(pending_rows(listed, now=time.time()), output=output,
                        namespaces=all_namespaces)
            return 0
        catalog = load_catalog(config)
        report = asyncio.run(_explained(config, catalog, namespace=namespace, ref=target))
    except (ValueError, KubeError, OSError, WorkloadError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    _print_report(report, output=output)
    return 0


async def _list_dispatches(config: Config, namespace: str | None) -> list[dict[str, Any]]:
    from dispatcher.kube import watch
    from dispatcher.kube.resources import DISPATCHES
    from dispatcher.shell import live

    hub = await live.hub_client(config)
    try:
        return (await watch.list_objects(hub, DISPATCHES, namespace=namespace)).objects
    finally:
        await hub.close()


async def _explained(config: Config, catalog: Any, *, namespace: str, ref: str
                     ) -> dict[str, Any]:
    """The workload, its Dispatch summary and, while it is not placed, the live decision
    (``members``) or why there is none (``membersError``)."""
    from dispatcher.commands import explain
    from dispatcher.control.observe import configure_logging
    from dispatcher.kube.errors import KubeError
    from dispatcher.shell import live

    configure_logging(level="warning", stream=sys.stderr)  # stdout is the answer
    hub = await live.hub_client(config)
    try:
        obj = await live.hub_workload(hub, catalog, namespace=namespace, ref=ref)
        dispatch = await live.dispatch_of(hub, obj)
        summary = dispatch_summary(dispatch) if dispatch is not None else None
        queued = await live.kueue_view(hub, obj) if dispatch is None else None
        kueue = kueue_summary(queued.workload, queued.checks, queued.events, now=time.time()) \
            if queued is not None else None
        report: dict[str, Any] = {
            "workload": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"),
                         "namespace": namespace, "name": obj["metadata"]["name"]},
            "dispatch": summary, "members": None, "_decision": None}
        if kueue is not None:
            report["kueue"] = kueue
            if kueue["stage"] != _WAITING_FOR_WORKER:
                return report  # Kueue's own words say it; no member is asked
        elif summary is not None and summary["phase"] not in ("", "Pending"):
            return report  # placed: the Dispatch says where and why
        try:
            members = await live.live_snapshots(
                config, hub=hub, catalog=catalog,
                exclude_uid=str(obj.get("metadata", {}).get("uid", "")))
        except (KubeError, OSError, ValueError) as error:
            report["membersError"] = f"the members could not be read: {error}"
            return report
    finally:
        await hub.close()
    if kueue is not None and kueue["workers"]:  # the MultiKueue check's workers only
        members = [m for m in members if m.name in kueue["workers"]]
    reports, _ = explain.explain_objects(
        [obj], members=members, catalog=catalog, policy=None,
        default_policy=config.control.default_policy, source="hub", control=config.control,
        excluded={str(obj.get("metadata", {}).get("uid", "")): summary["excluded"]
                  if summary is not None else ()})
    if reports:
        report["members"] = reports[0]["decision"]
        report["_decision"] = reports[0]["_decision"]
    else:
        report["membersError"] = "the workload cannot be explained (said above)"
    return report


def dispatch_summary(dispatch: Mapping[str, Any]) -> dict[str, Any]:
    """What a Dispatch says about where its workload is and why (pure): phase, the
    ``Placed`` condition (reason, message, since), while it waits when that message was
    written (``numbersAsOf``: its numbers are from then, rewritten at most every
    ``queue.pendingRefresh`` when only they change), member, attempts, excluded, failure,
    and the member gang mechanism the copy's gangs were joined to (None before a copy)."""
    from dispatcher.control.core.record import decision_of

    status = dispatch.get("status") or {}
    placed = next((c for c in status.get("conditions") or ()
                   if isinstance(c, Mapping) and c.get("type") == "Placed"), {})
    decision = decision_of(dispatch)
    phase = str(status.get("phase") or "")
    if not phase and decision.get("cluster"):
        phase = "Placed"  # decided at create (spec.decision), the copy not submitted yet
    return {
        "phase": phase,
        "reason": str(placed.get("reason") or ""),
        "message": str(placed.get("message") or decision.get("summary") or ""),
        "since": placed.get("lastTransitionTime"),
        "numbersAsOf": ((status.get("pending") or {}).get("writtenAt")
                        if phase in ("", "Pending") else None),
        "cluster": decision.get("cluster") or (status.get("remote") or {}).get("cluster"),
        "attempt": decision.get("attempt"),
        "attempts": [dict(a) for a in status.get("attempts") or () if isinstance(a, Mapping)],
        "excluded": list(status.get("excluded") or ()),
        "failure": status.get("failure"),
        "gangMechanism": (status.get("remote") or {}).get("gangMechanism"),
    }


_WAITING_FOR_QUOTA = "WaitingForQuota"
_WAITING_FOR_WORKER = "WaitingForWorker"
_DISPATCHER_REASONS = frozenset({"Nominated", "NoWorkerFits"})


def kueue_summary(workload: Mapping[str, Any], checks: Mapping[str, Sequence[str]],
                  events: Sequence[Mapping[str, Any]], *, now: float) -> dict[str, Any]:
    """Where a hub Kueue Workload is on MultiKueue's path, and in whose words (pure).

    ``stage``: ``Finished``; ``Running`` (a worker admitted the copy: ``cluster``);
    ``WaitingForQuota`` (the hub's ClusterQueue has not reserved it: Kueue's message);
    ``Nominated`` (workers listed, none admitted yet); ``WaitingForWorker`` (quota
    reserved, MultiKueue's check Pending, no worker nominated: the dispatcher's last
    word); ``NotMultiKueue`` (no MultiKueue check) or ``Check<state>`` (its check is
    neither Pending nor done). ``checks``: MultiKueue checks -> their workers; ``events``:
    the Events on the Workload (the dispatcher's latest ``Nominated``/``NoWorkerFits`` is
    kept)."""
    from dispatcher.control.core.record import parse_time
    from dispatcher.workloads.kueueworkload import KueueWorkload

    wl = KueueWorkload.of(workload, frozenset(checks), parse_time)
    status = workload.get("status") or {}
    conditions = {str(c.get("type")): c for c in status.get("conditions") or ()
                  if isinstance(c, Mapping)}
    quota = conditions.get("QuotaReserved") or {}
    check = next((c for c in status.get("admissionChecks") or ()
                  if isinstance(c, Mapping) and c.get("name") == wl.check), {})
    ours = [e for e in events if e.get("reason") in _DISPATCHER_REASONS
            and (e.get("reportingComponent") == "dispatcher"
                 or (e.get("source") or {}).get("component") == "dispatcher")]
    said = max(ours, key=_event_time, default=None)
    if wl.finished:
        stage, message, since = "Finished", str((conditions.get("Finished") or {})
                                                .get("message") or ""), None
    elif wl.cluster is not None:
        stage, message, since = "Running", f"admitted on {wl.cluster}", None
    elif not wl.quota_reserved:
        stage = _WAITING_FOR_QUOTA
        message = str(quota.get("message") or "Kueue has not looked at it yet")
        since = quota.get("lastTransitionTime") or (workload.get("metadata") or {}).get(
            "creationTimestamp")
    elif wl.nominated:
        stage, message = "Nominated", str(said.get("message") or "") if said else ""
        since = check.get("lastTransitionTime")
    elif wl.check is None:
        stage, message, since = "NotMultiKueue", "no MultiKueue admission check", None
    elif wl.check_state != "Pending":
        stage, message = f"Check{wl.check_state}", str(check.get("message") or "")
        since = check.get("lastTransitionTime")
    else:
        stage = _WAITING_FOR_WORKER
        message = str(said.get("message") or "") if said else \
            "the dispatcher has not decided yet (is it running with mode multikueue-dispatcher?)"
        since = quota.get("lastTransitionTime")
    at = parse_time(since)
    return {"name": wl.name, "stage": stage, "message": message,
            "waiting": None if at is None or stage in ("Running", "Finished")
            else max(now - at, 0.0),
            "clusterQueue": (status.get("admission") or {}).get("clusterQueue"),
            "queue": wl.queue, "check": wl.check, "checkState": wl.check_state,
            "nominated": list(wl.nominated), "cluster": wl.cluster,
            "workers": list(checks.get(wl.check or "", ())),
            "dispatcher": None if said is None else {
                "reason": said.get("reason"), "message": said.get("message"),
                "at": _event_time(said) or None}}


def _event_time(event: Mapping[str, Any]) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime")
               or (event.get("metadata") or {}).get("creationTimestamp") or "")


def pending_rows(dispatches: Sequence[Mapping[str, Any]], *, now: float
                 ) -> list[dict[str, Any]]:
    """The waiting workloads among ``dispatches`` (phase Pending, or no status yet), oldest
    wait first: namespace, workload (``Kind/name``), reason, waiting (seconds), message."""
    from dispatcher.control.core.record import parse_time

    rows = []
    for dispatch in dispatches:
        summary = dispatch_summary(dispatch)
        if summary["phase"] not in ("", "Pending"):
            continue
        ref = (dispatch.get("spec") or {}).get("workload") or {}
        meta = dispatch.get("metadata") or {}
        since = parse_time(summary["since"]) or parse_time(meta.get("creationTimestamp"))
        rows.append({"namespace": str(meta.get("namespace") or ""),
                     "workload": f"{ref.get('kind', '?')}/{ref.get('name', '?')}",
                     "reason": summary["reason"] or "NotDecided",
                     "waiting": None if since is None else max(now - since, 0.0),
                     "message": summary["message"], "numbersAsOf": summary["numbersAsOf"]})
    rows.sort(key=lambda r: (-(r["waiting"] or 0.0), r["namespace"], r["workload"]))
    return rows



def _print_rows(rows: list[dict[str, Any]], *, output: str, namespaces: bool) -> None:
    from dispatcher.output import emit, table

    if output in ("json", "yaml"):
        emit(rows, fmt=cast("Format", output))
        return
    if not rows:
        print("no waiting workloads", file=sys.stderr)
        return
    wide = output == "wide"
    columns = (["namespace"] if namespaces else []) + ["workload", "reason", "waiting",
                                                       "message"]
    table(columns=columns, rows=[
        ([r["namespace"]] if namespaces else [])
        + [r["workload"], r["reason"], _age(r["waiting"]),
           r["message"] if wide or len(r["message"]) <= _MESSAGE_CUT
           else r["message"][:_MESSAGE_CUT - 1] + "…"]
        for r in rows])


def _print_report(report: dict[str, Any], *, output: str) -> None:
    from dispatcher.commands import explain
    from dispatcher.control.core.record import parse_time
    from dispatcher.output import emit

    if output in ("json", "yaml"):
        emit({k: v for k, v in report.items() if not k.startswith("_")},
             fmt=cast("Format", output))
        return
    workload, summary = report["workload"], report["dispatch"]
    label = f"{workload['kind']}/{workload['name']} in {workload['namespace']}"
    if report.get("kueue") is not None:
        _print_kueue(label, report["kueue"])
    elif summary is None:
        print(f"{label}: no Dispatch yet: the controller has not taken it up (is it "
              "running, and is the namespace in its watch.namespaces and labelSelector?)")
    elif summary["phase"] in ("", "Pending"):
        since = parse_time(summary["since"])
        waited = "" if since is None else f" for {_age(time.time() - since)}"
        print(f"{label}: Pending{waited}, {summary['reason'] or 'not decided yet'}")
        if summary["message"]:
            print(f"  {summary['message']}")
            written = parse_time(summary.get("numbersAsOf"))
            if written is not None:
                print(f"  (the controller's numbers as of {_age(time.time() - written)} ago: "
                      f"rewritten only when the reason changes, or every "
                      f"queue.pendingRefresh; the members' numbers now are below)")
    else:
        where = f" on {summary['cluster']}" if summary["cluster"] else ""
        print(f"{label}: {summary['phase']}{where}"
              + (f" (attempt {summary['attempt']})" if summary["attempt"] else ""))
        if summary["failure"]:
            print(f"  gave up: {summary['failure']}")
        elif summary["message"]:
            print(f"  {summary['message']}")
        if summary.get("gangMechanism"):
            print(f"  gangs held together on the member by: {summary['gangMechanism']}")
    known: Mapping[str, Any] = summary or {}
    for attempt in known.get("attempts") or ():
        print(f"  attempt {attempt.get('attempt')} on {attempt.get('cluster')}: "
              f"{attempt.get('outcome')}: {attempt.get('reason')}")
    if known.get("excluded"):
        print(f"  excluded after those attempts: {', '.join(known['excluded'])}")
    if report.get("_decision") is not None:
        print("\nmembers now (live):")
        explain.print_table(report, wide=output == "wide")
    elif report.get("membersError"):
        print(f"\nmembers now: {report['membersError']}")


def _print_kueue(label: str, kueue: Mapping[str, Any]) -> None:
    """The Kueue path's answer: the stage, whose words, and what is listed."""
    waited = "" if kueue["waiting"] is None else f" for {_age(kueue['waiting'])}"
    queue = f"ClusterQueue {kueue['clusterQueue']}" if kueue["clusterQueue"] else \
        f"LocalQueue {kueue['queue'] or '?'}"
    print(f"{label}: {kueue['stage']}{waited} (Kueue Workload {kueue['name']}, {queue})")
    if kueue["stage"] == _WAITING_FOR_QUOTA:
        print(f"  Kueue: {kueue['message']}")
    elif kueue["message"]:
        said = kueue["dispatcher"]
        who = f"dispatcher ({said['reason']})" if said else "dispatcher"
        print(f"  {who}: {kueue['message']}" if kueue["stage"] in (
            _WAITING_FOR_WORKER, "Nominated") else f"  {kueue['message']}")
    if kueue["nominated"]:
        print(f"  nominated: {', '.join(kueue['nominated'])} (MultiKueue copies it there; "
              "the first to admit runs it)")
    if kueue["workers"] and kueue["stage"] == _WAITING_FOR_WORKER:
        print(f"  workers of check {kueue['check']}: {', '.join(kueue['workers'])}")


def _age(seconds: float | None) -> str:
    from dispatcher.output import age  # rich stays out of `dispatcher --help`
    return age(seconds)
