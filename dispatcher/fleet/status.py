"""MemberCluster status: rendered from live state, written only when it says something new.

Pure. ``member_status`` turns a connection's health, capacity, version and served kinds into
the ``status`` of the CRD (deploy/base/crds/dispatcher.io_memberclusters.yaml); ``conditions``
keeps ``lastTransitionTime`` when a condition's status did not change; ``needs_write``
decides whether a write is worth it (content changed, or the ``lastSeen`` heartbeat is due)
so that 100 members never flood the hub. ``rows`` renders MemberClusters for
``dispatcher clusters``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.health import Health
from dispatcher.fleet.kubeconfigs import INSECURE
from dispatcher.fleet.queueing import parse
from dispatcher.kube import gangapis
from dispatcher.kube.resources import GroupVersionKind

__all__ = ["BASE_COLUMNS", "WIDE_COLUMNS", "capacity_status", "conditions", "format_time",
           "member_status", "needs_write", "parse_time", "row"]

BASE_COLUMNS = ("name", "ready", "nodes", "gpus", "free", "largest-block", "products",
                "kinds", "gang", "last-seen")
WIDE_COLUMNS = (*BASE_COLUMNS, "version", "queueing", "reason")


def format_time(moment: datetime) -> str:
    """RFC 3339 in UTC with second precision, as Kubernetes writes times."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime | None:
    """Inverse of ``format_time`` (None for anything unparsable)."""
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except (TypeError, ValueError):
        return None


def capacity_status(capacity: ClusterCapacity) -> dict[str, Any]:
    """``status.capacity``: node counts, GPU roll-ups, per product with its largest block."""
    summary = capacity.summary()
    largest: dict[str | None, int] = {}
    for cls in capacity.classes():
        if cls.free_nodes:
            largest[cls.product] = max(largest.get(cls.product, 0), *cls.free_nodes)
    return {
        "nodes": summary.nodes,
        "readyNodes": summary.ready_nodes,
        "cordonedNodes": summary.cordoned_nodes,
        "gpus": {"total": summary.capacity, "allocatable": summary.allocatable,
                 "used": summary.used, "reserved": summary.reserved, "free": summary.free,
                 "largestFreeBlock": summary.largest_free_block},
        "products": [{"product": p.product or "", "nodes": p.nodes,
                      "allocatable": p.allocatable, "free": p.free,
                      "largestFreeBlock": largest.get(p.product, 0)}
                     for p in summary.products],
    }


def _status_word(value: bool | None) -> str:
    return "Unknown" if value is None else ("True" if value else "False")


def conditions(health: Health, *, previous: Iterable[Mapping[str, Any]], now: datetime,
               insecure: str = "") -> list[dict[str, Any]]:
    """``Reachable`` and ``Ready`` (and ``TLSVerified=False`` while the member is reached
    without verifying its identity: ``insecure`` is the reason, a key of
    ``kubeconfigs.INSECURE``); a condition keeps its transition time while unchanged."""
    before = {c.get("type"): c for c in previous if isinstance(c, Mapping)}
    wanted = [("Reachable", _status_word(health.reachable), str(health.reachable_reason),
               "the member's apiserver answers" if health.reachable else health.message),
              ("Ready", _status_word(health.ready), str(health.reason), health.message)]
    if insecure:
        wanted.append(("TLSVerified", "False", insecure,
                       f"the kubeconfig {INSECURE.get(insecure, insecure)} "
                       "(allowed by fleet.allowInsecureTLS)"))
    out = []
    for kind, status, reason, message in wanted:
        old = before.get(kind) or {}
        since = old.get("lastTransitionTime") if old.get("status") == status else None
        out.append({"type": kind, "status": status, "reason": reason, "message": message,
                    "lastTransitionTime": since or format_time(now)})
    return out


def member_status(*, health: Health, capacity: ClusterCapacity | None, version: str | None,
                  kinds: Iterable[GroupVersionKind] | None,
                  previous: Mapping[str, Any], now: datetime,
                  insecure: str = "", gang: tuple[str, str | None] | None = None,
                  queueing: tuple[str, bool | None] | None = None) -> dict[str, Any]:
    """The full ``status`` to write; fields not known yet are left out (kept as they were).

    ``gang`` is (the gang mechanism copies are built for, the one discovered or None):
    ``status.gangScheduling {mechanism, discovered, note}`` (``note``: why a member whose
    Kubernetes has the built-in gang API gets none, ``kube.gangapis.note``). ``queueing``
    is (the queueing system copies are queued for, whether the member serves Kueue or None):
    ``status.queueing {system, kueueServed}``.

    ``capacity`` None (never synced) leaves the last written capacity in place, so a member
    that is down still shows its last known size, marked by ``Ready=False``.
    """
    status: dict[str, Any] = {
        "conditions": conditions(health, previous=previous.get("conditions") or (), now=now,
                                 insecure=insecure)}
    if health.last_seen is not None:
        status["lastSeen"] = format_time(health.last_seen)
    if version:
        status["kubernetesVersion"] = version
    if kinds is not None:
        status["workloadKinds"] = [{"apiVersion": k.api_version, "kind": k.kind}
                                   for k in sorted(kinds, key=GroupVersionKind.sort_key)]
    if capacity is not None:
        status["capacity"] = capacity_status(capacity)
    if gang is not None and gang[1] is not None:
        status["gangScheduling"] = {"mechanism": gang[0], "discovered": gang[1]}
        found = next((m for m in gangapis.MECHANISMS if m == gang[1]), None)
        why = gangapis.note(version, found)
        if why:
            status["gangScheduling"]["note"] = why
    if queueing is not None and queueing[1] is not None:
        status["queueing"] = {"system": queueing[0], "kueueServed": queueing[1]}
    return status


def _queueing_cell(obj: Mapping[str, Any]) -> str | None:
    """The queueing column: the system in effect (status) with the declared queue (spec),
    e.g. ``kueue:team-a``."""
    system = ((obj.get("status") or {}).get("queueing") or {}).get("system")
    if system is None:
        return None
    spec = dict((obj.get("spec") or {}).get("queueing") or {})
    try:
        declared = parse(spec, where="spec.queueing")
    except ValueError:
        return str(system)
    return replace(declared, system=system).describe()


def _without_last_seen(status: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in status.items() if k != "lastSeen"}


def needs_write(desired: Mapping[str, Any], *, written: Mapping[str, Any] | None,
                written_at: datetime | None, now: datetime, min_interval: timedelta,
                heartbeat: timedelta) -> bool:
    """Whether to write ``desired`` now: something changed (but not more often than
    ``min_interval``), or ``lastSeen`` moved and the heartbeat is due."""
    if written is None or written_at is None:
        return True
    if now - written_at < min_interval:
        return False
    if _without_last_seen(desired) != _without_last_seen(written):
        return True
    return desired.get("lastSeen") != written.get("lastSeen") and now - written_at >= heartbeat


def _age(since: datetime | None, now: datetime) -> str:
    if since is None:
        return "<unknown>"
    seconds = max(int((now - since).total_seconds()), 0)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == kind:
            return condition
    return {}


def _gang_cell(gang: Mapping[str, Any]) -> str | None:
    """The mechanism, marked ``(API off)`` when the member's Kubernetes has a built-in gang
    API it does not serve (``status.gangScheduling.note`` says which and how to enable)."""
    mechanism = gang.get("mechanism")
    return f"{mechanism} (API off)" if mechanism and gang.get("note") else mechanism


def row(obj: Mapping[str, Any], *, now: datetime, wide: bool = False) -> list[Any]:
    """One ``dispatcher clusters`` table row for a MemberCluster dict (see BASE_COLUMNS)."""
    status = obj.get("status") or {}
    ready = _condition(status, "Ready")
    capacity = status.get("capacity") or {}
    gpus = capacity.get("gpus") or {}
    products = ",".join(f"{p.get('product') or '-'}:{p.get('free', 0)}/{p.get('allocatable', 0)}"
                        for p in capacity.get("products") or ()
                        if p.get("product") or p.get("allocatable"))  # skip CPU-only nodes
    kinds: Sequence[Any] = status.get("workloadKinds") or ()
    ready_word = ready.get("status", "Unknown")
    if (obj.get("spec") or {}).get("cordoned"):
        ready_word = f"{ready_word},Cordoned"
    cells: list[Any] = [
        (obj.get("metadata") or {}).get("name"), ready_word, capacity.get("nodes"),
        gpus.get("allocatable"), gpus.get("free"), gpus.get("largestFreeBlock"),
        products or None, len(kinds) if "workloadKinds" in status else None,
        _gang_cell(status.get("gangScheduling") or {}),
        _age(parse_time(str(status.get("lastSeen", ""))), now) if "lastSeen" in status
        else None,
    ]
    if wide:
        cells += [status.get("kubernetesVersion"), _queueing_cell(obj), ready.get("reason")]
    return cells
