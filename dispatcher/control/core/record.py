"""The Dispatch record: read it into a frozen value, write it as bodies and status patches.

The Dispatch object (``dispatcher.io/v1alpha1``, one per hub workload, owned by it) is the
controller's durable memory: the decision and reservation are written here *before* the
member is touched, so a restarted controller finds every decision and never places twice.
It carries the finalizer (``names.FINALIZER``) from its create on: once the hub object is
gone, the record stays until the copy is removed (the Kueue and Karmada pattern: the hub
workload itself is never written to hold it).
The first decision rides on the create (``spec.decision``, with ``spec.demand``: a CRD
ignores ``status`` on create) and is copied into ``status`` by the ``Submitted`` write;
later ones (after a requeue) are status patches. ``decision_of`` says which one holds.
``read`` turns the raw object into a ``DispatchRecord`` for ``decide``; the ``*_status``
functions build merge patches for the status subresource (the shell writes them once).
Pure: times are passed in as Unix seconds and rendered as RFC 3339.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from dispatcher.control.core.names import FINALIZER, PendingReason, Phase
from dispatcher.fleet.reservations import Reservation
from dispatcher.placement.model import Decision, GangDomain
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.trace import gangs_json

__all__ = [
    "MEMBER_CONDITIONS",
    "DispatchRecord",
    "condition",
    "decision_of",
    "demand_status",
    "dispatch_body",
    "dispatch_name",
    "dispatch_names",
    "failed_status",
    "first_placement",
    "format_time",
    "leaves_member",
    "parse_time",
    "pending_status",
    "placed_status",
    "read",
    "requeued_status",
    "settled_status",
    "submitted_status",
]

API_VERSION = "dispatcher.io/v1alpha1"
_NAME_LIMIT = 253


def format_time(ts: float) -> str:
    """Unix seconds -> RFC 3339 UTC with microseconds (``...Z``)."""
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: Any) -> float | None:
    """RFC 3339 (``Z`` or offset, with or without fraction) -> Unix seconds; None if absent."""
    if not isinstance(text, str) or not text:
        return None
    return _parsed_time(text)


@lru_cache(maxsize=4096)
def _parsed_time(text: str) -> float | None:
    # every decision step reads the same few timestamps of each object again
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


@dataclass(frozen=True, kw_only=True)
class DispatchRecord:
    """What the Dispatch object says, as ``decide`` needs it.

    ``cluster`` is None while Pending; ``excluded`` are members earlier attempts gave up on;
    ``attempt`` counts placements (1 for the first); ``failure`` is set once the dispatcher
    gave up (terminal).
    """

    name: str
    namespace: str
    workload_uid: str
    workload_ref: tuple[str, str, str] = ("", "", "")  # its apiVersion, kind, name
    deleting: bool = False  # the record itself is being deleted (GC of its owner, a user)
    held: bool = False  # it carries our finalizer (an older controller's records do not)
    phase: str = ""
    cluster: str | None = None
    attempt: int = 0
    decided_at: float | None = None
    submitted_at: float | None = None
    reservation: Reservation | None = None
    generic_status: str | None = None
    excluded: tuple[str, ...] = ()
    history: tuple[Mapping[str, Any], ...] = ()
    failure: str | None = None
    pending_message: str = ""
    pending_reason: str = ""  # the Placed=False condition's reason (a PendingReason)
    # what that message means and when it was last written (``status.pending``): its
    # numbers are rewritten at most every queue.pendingRefresh (``control.core.pending``)
    pending_key: str = ""
    pending_written_at: float | None = None
    summary: str = ""  # the placement decision's summary
    last_seen: float | None = None
    synced_generation: int = 0  # hub metadata.generation last written to the copy
    mirror_refused: bool = False  # the hub refused the last status mirror (StatusMirrored)
    started_at: float | None = None  # first seen got going (decide.got_going): never stuck after
    gpus: int | None = None  # the demand's GPUs (status, else the one made at create)
    gang_stalled: bool = False  # GangStalled=True: the member's gang holds every pod
    not_held: bool = False  # Held=False: said that the hub object is not held any more
    admission: tuple[str, str] | None = None  # MemberAdmitted's (reason: Kueue state, message)
    domains: tuple[GangDomain, ...] = ()  # the topology domain per gang (the copy keeps to it)
    # The first decision, demand and definition, made at create (``spec``) and not yet in
    # status: the ``Submitted`` write copies them there (``settled_status``).
    unsettled: Mapping[str, Any] | None = None


def _attempt(decision: Any) -> int:
    if not isinstance(decision, Mapping):
        return 0
    try:
        return int(decision.get("attempt") or 0)
    except (TypeError, ValueError):
        return 0


def decision_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The decision in force: ``status.decision`` once it is as recent as the one made at
    create (``spec.decision``), else that one. A merge-patch leftover in status without an
    attempt (``{"reservation": null}``) never hides the spec's."""
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    current, first = status.get("decision"), spec.get("decision")
    if isinstance(first, Mapping) and _attempt(current) < _attempt(first):
        return first
    return current if isinstance(current, Mapping) else {}


def read(obj: Mapping[str, Any]) -> DispatchRecord:
    """The record of a raw Dispatch object (tolerant: missing fields read as defaults)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ref = spec.get("workload") or {}
    decision = decision_of(obj)
    unsettled = None
    if decision is spec.get("decision"):
        unsettled = {"decision": dict(decision), "demand": spec.get("demand"),
                     "definition": spec.get("definition")}
    reservation = None
    if decision.get("reservation"):
        try:
            reservation = Reservation.from_dict(decision["reservation"])
        except ValueError:
            reservation = None
    domains: list[GangDomain] = []
    for item in decision.get("domains") or ():
        try:
            domains.append(GangDomain.from_dict(item))
        except (ValueError, AttributeError):
            continue  # not ours to guess: a malformed entry pins nothing
    pending = next((c for c in status.get("conditions") or ()
                    if c.get("type") == "Placed" and c.get("status") == "False"), None)
    remote = status.get("remote") or {}
    written = status.get("pending")
    if not isinstance(written, Mapping):
        written = {}
    return DispatchRecord(
        name=str(meta.get("name", "")), namespace=str(meta.get("namespace", "")),
        workload_uid=str(ref.get("uid", "")),
        workload_ref=(str(ref.get("apiVersion", "")), str(ref.get("kind", "")),
                      str(ref.get("name", ""))),
        deleting=bool(meta.get("deletionTimestamp")),
        held=FINALIZER in (meta.get("finalizers") or ()),
        phase=str(status.get("phase") or ""),
        cluster=decision.get("cluster") or None,
        attempt=int(decision.get("attempt") or len(status.get("attempts") or ())),
        decided_at=parse_time(decision.get("time")),
        submitted_at=parse_time(remote.get("submittedAt")),
        started_at=parse_time(remote.get("startedAt")),
        reservation=reservation,
        generic_status=status.get("genericStatus") or None,
        excluded=tuple(status.get("excluded") or ()),
        history=tuple(status.get("attempts") or ()),
        failure=status.get("failure") or None,
        pending_message=str((pending or {}).get("message", "")),
        pending_reason=str((pending or {}).get("reason", "")),
        pending_key=str(written.get("key") or ""),
        pending_written_at=parse_time(written.get("writtenAt")),
        summary=str(decision.get("summary") or ""),
        last_seen=parse_time(remote.get("lastSeen")),
        synced_generation=int(remote.get("hubGeneration") or 0),
        domains=tuple(domains),
        mirror_refused=any(c.get("type") == "StatusMirrored" and c.get("status") == "False"
                           for c in status.get("conditions") or ()),
        gpus=_demand_gpus(status.get("demand"), spec.get("demand")),
        gang_stalled=any(c.get("type") == "GangStalled" and c.get("status") == "True"
                         for c in status.get("conditions") or ()),
        not_held=any(c.get("type") == "Held" and c.get("status") == "False"
                     for c in status.get("conditions") or ()),
        admission=next(((str(c.get("reason") or ""), str(c.get("message") or ""))
                        for c in status.get("conditions") or ()
                        if c.get("type") == "MemberAdmitted"), None),
        unsettled=unsettled,
    )


def _demand_gpus(*demands: Any) -> int | None:
    """The GPUs of the first demand that says them (status's, then spec's)."""
    for demand in demands:
        if isinstance(demand, Mapping) and isinstance(demand.get("gpus"), int):
            return int(demand["gpus"])
    return None


def dispatch_name(workload: Mapping[str, Any], *, qualified: bool = False) -> str:
    """The Dispatch of a workload: ``<kind>-<name>`` (kinds may share names in a namespace);
    ``qualified``: ``<kind>.<group>-<name>``, for a workload whose plain name is held by the
    record of a same-named kind of another API group.

    Longer than a name may be (253), it is cut and ends in a hash of the whole, so two
    workloads whose names share a long prefix never share a Dispatch."""
    kind = str(workload.get("kind", "")).lower()
    if qualified:
        group = str(workload.get("apiVersion", "")).rpartition("/")[0] or "core"
        kind = f"{kind}.{group}"
    full = f"{kind}-{workload['metadata']['name']}"
    if len(full) <= _NAME_LIMIT:
        return full
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{full[:_NAME_LIMIT - 11].rstrip('-.')}-{digest}"


def dispatch_names(workload: Mapping[str, Any]) -> tuple[str, str]:
    """The names a workload's Dispatch may have, in the order they are tried: the plain one,
    then the qualified one (taken when a same-named kind of another group holds the plain
    one)."""
    return dispatch_name(workload), dispatch_name(workload, qualified=True)


def dispatch_body(*, workload: Mapping[str, Any], name: str, hub_mode: str = "dedicated",
                  placed: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A new Dispatch for ``workload``: same namespace, owned by it (garbage-collected with
    it) and holding our finalizer (it outlives the hub object until the copy is gone),
    saying which hub topology it was dispatched under (``kubectl get dispatches -o
    wide``); ``placed`` (``first_placement``) is the decision made before the create, so
    the create is also the crash-safety write."""
    meta = workload["metadata"]
    ref = {"apiVersion": workload["apiVersion"], "kind": workload["kind"],
           "name": meta["name"], "uid": meta["uid"]}
    return {
        "apiVersion": API_VERSION, "kind": "Dispatch",
        "metadata": {"name": name, "namespace": meta.get("namespace") or "default",
                     "finalizers": [FINALIZER],
                     "ownerReferences": [{**ref, "controller": True,
                                          "blockOwnerDeletion": False}]},
        "spec": {"workload": ref, "hubMode": hub_mode, **(placed or {})},
    }


def condition(*, type_: str, status: bool, reason: str, message: str, now: float
              ) -> dict[str, Any]:
    """One status condition (Kubernetes shape)."""
    return {"type": type_, "status": "True" if status else "False", "reason": reason,
            "message": message[:1000], "lastTransitionTime": format_time(now)}


def demand_status(*, demand: Demand, definition: str) -> dict[str, Any]:
    """``status.demand`` and ``status.definition``."""
    return {"definition": definition,
            "demand": {"pods": demand.pods, "gpus": demand.gpus, "gangs": gangs_json(demand)}}


def pending_status(*, message: str, reason: PendingReason, now: float, attempt: int = 0,
                   key: str = "") -> dict[str, Any]:
    """Status patch: no member can take it now; ``message`` is the decision summary;
    ``attempt`` the placements so far; ``key`` what the message means
    (``control.core.pending.meaning_key``), kept with the time of this write in
    ``status.pending`` (its numbers are as of ``writtenAt``). The decision is cleared to
    ``{"attempt": N}``, never removed: without one in status, the first decision
    (``spec.decision``) would hold again.

    When the reason is that the workload cannot be resolved (no or a failing definition,
    a pod template that cannot be a valid Pod: ``PendingReason.unresolved``),
    ``Resolved=False`` says so with the same reason and message; else ``Resolved=True``."""
    resolved = not reason.unresolved
    return {"phase": Phase.PENDING.value,
            "decision": {"cluster": None, "reservation": None, "attempt": attempt},
            "pending": {"key": key, "writtenAt": format_time(now)},
            "conditions": [condition(type_="Placed", status=False, reason=reason,
                                     message=message, now=now),
                           condition(type_="Resolved", status=resolved,
                                     reason="Resolved" if resolved else reason,
                                     message="" if resolved else message, now=now)]}


def _decision(decision: Decision, reservation: Reservation | None, attempt: int,
              now: float) -> dict[str, Any]:
    chosen = decision.chosen or ""
    return {"cluster": chosen, "attempt": attempt, "time": format_time(now),
            "policy": decision.policy, "score": decision.verdict(chosen).score,
            "summary": decision.summary[:1000],
            "domains": [d.to_dict() for d in decision.domains] or None,
            "reservation": reservation.to_dict() if reservation else None}


def _placed_conditions(summary: str, now: float) -> list[dict[str, Any]]:
    # A placed workload was resolved, whatever an earlier attempt said (a definition
    # quarantined then, the fallback now): the condition is the current resolution's.
    return [condition(type_="Placed", status=True, reason="Placed", message=summary, now=now),
            condition(type_="Resolved", status=True, reason="Resolved", message="", now=now)]


def placed_status(*, decision: Decision, reservation: Reservation | None, attempt: int,
                  now: float) -> dict[str, Any]:
    """Status patch: the decision and its reservation, written before the member is
    touched; ``Resolved=True`` (placing needs a resolution). For a re-placement: the first
    decision rides on the create (``first_placement``)."""
    return {
        "phase": Phase.PLACED.value,
        "decision": _decision(decision, reservation, attempt, now),
        "remote": None, "genericStatus": None, "statuses": None,
        "pending": None,  # what a Pending message meant, and when: no longer waiting
        "conditions": _placed_conditions(decision.summary, now),
    }


def first_placement(*, decision: Decision, reservation: Reservation | None, now: float,
                    demand: Mapping[str, Any]) -> dict[str, Any]:
    """The ``spec`` fields of a Dispatch created with its first decision: the decision
    (attempt 1) and reservation, and ``demand``/``definition`` (``demand_status``)."""
    return {"decision": _decision(decision, reservation, 1, now),
            **{key: demand[key] for key in ("demand", "definition") if key in demand}}


def settled_status(record: DispatchRecord, now: float) -> dict[str, Any]:
    """What the first status write adds when the decision is only in ``spec``: the
    decision, demand and definition, and ``Placed``/``Resolved`` (the record then reads
    as if it had been placed by a status patch). Empty when status has it already."""
    if record.unsettled is None:
        return {}
    found = {key: value for key, value in record.unsettled.items() if value is not None}
    return {**found, "conditions": _placed_conditions(record.summary, now)}


def submitted_status(*, cluster: str, remote_uid: str, now: float, adopted: bool,
                     generation: int = 0) -> dict[str, Any]:
    """Status patch: the copy exists on the member (created now, or found and adopted);
    ``generation`` is the hub object's generation the copy was written from."""
    return {"phase": Phase.SUBMITTED.value,
            "remote": {"cluster": cluster, "uid": remote_uid, "submittedAt": format_time(now),
                       "lastSeen": format_time(now), "hubGeneration": generation or None},
            "conditions": [condition(type_="Submitted", status=True,
                                     reason="Adopted" if adopted else "Created",
                                     message=f"copy on {cluster}", now=now)]}


def requeued_status(*, record: DispatchRecord, reason: str, outcome: str, now: float
                    ) -> dict[str, Any]:
    """Status patch: give up on the current member, remember why, go back to Pending."""
    history = [*record.history, {"cluster": record.cluster or "", "attempt": record.attempt,
                                 "time": format_time(now), "outcome": outcome,
                                 "reason": reason[:500]}]
    excluded = sorted({*record.excluded, *([record.cluster] if record.cluster else [])})
    return {"phase": Phase.PENDING.value, "decision": {"cluster": None, "reservation": None,
                                                       "domains": None,
                                                       "attempt": record.attempt},
            "remote": None, "genericStatus": None, "statuses": None,
            "excluded": excluded, "attempts": history,
            "conditions": [condition(type_="Placed", status=False, reason="Requeued",
                                     message=reason, now=now)]}


def failed_status(*, record: DispatchRecord, reason: str, now: float) -> dict[str, Any]:
    """Status patch: the dispatcher gave up (terminal), with the reason."""
    patch = requeued_status(record=record, reason=reason, outcome="gave-up", now=now)
    patch["phase"] = Phase.FAILED.value
    patch["failure"] = reason[:1000]
    patch["conditions"] = [condition(type_="Placed", status=False, reason="GaveUp",
                                     message=reason, now=now)]
    return patch


MEMBER_CONDITIONS = frozenset({"MemberReachable", "GangStalled", "Held", "StatusMirrored",
                               "MemberAdmitted"})
"""Conditions about the copy on the chosen member: they end when the workload leaves it."""


def leaves_member(status: Mapping[str, Any]) -> bool:
    """Whether a status patch takes the workload off its member (requeued or failed: its
    decision names no member)."""
    decision = status.get("decision")
    return isinstance(decision, Mapping) and "cluster" in decision \
        and decision["cluster"] is None


def merge_conditions(old: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]], *,
                     drop: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """``old`` with ``new`` replacing same-typed entries (keeping the transition time when
    status did not change) and the ``drop`` types gone: a merge patch replaces lists
    wholesale, so send the full list."""
    by_type = {str(c.get("type")): dict(c) for c in old if str(c.get("type")) not in drop}
    for item in new:
        previous = by_type.get(str(item["type"]))
        merged = dict(item)
        if previous and previous.get("status") == item["status"]:
            merged["lastTransitionTime"] = previous.get("lastTransitionTime",
                                                         item["lastTransitionTime"])
        by_type[str(item["type"])] = merged
    return list(by_type.values())
