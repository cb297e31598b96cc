"""The ``workload.resolved`` log line: what the controller logs per workload, and its replay.

The controller writes one JSON line per resolved hub workload; ``dispatcher simulate --trace
FILE`` replays a file of them, so a real hub's history can be tried against another fleet or
policy. The format, one JSON object per line (other events and non-JSON lines are skipped)::

    {"event": "workload.resolved",          # required, exactly this
     "ts": "2026-11-29T20:31:02.123456Z",   # required: RFC 3339 (UTC) or Unix seconds
     "uid": "6f0c...",                      # required: the hub object's metadata.uid
     "namespace": "team-a", "name": "train",
     "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
     "definition": "jobset",                # the catalog definition that resolved it
     "pods": 3, "gpus": 12,                 # totals, as in `dispatcher inspect -o json`
     "gangs": [{"name": "train", "pods": 3, "minPods": 3, "gpus": 12,
                "independent": false,               # optional: true = one-pod units
                "podShapes": [{"count": 3, "gpus": 4,
                               "gpuProduct": "NVIDIA-H100-80GB-HBM3",
                               "cpu": "16", "memory": "128Gi",
                               "nodeSelector": {"pool": "a"},          # optional
                               "tolerations": [{"key": "dedicated",    # optional
                                                "operator": "Equal", "value": "x",
                                                "effect": "NoSchedule"}]}]}],
     "priority": 0,                         # optional (priorityClass value), default 0
     "manifest": {...}}                     # optional: the hub object as submitted

``gangs`` is exactly the ``gangs`` list of the inspect JSON (DESIGN.md), with two optional
pod-shape keys (``nodeSelector`` without the product label, ``tolerations``) so a replay
places pods with the same constraints. The first of these later lines (same ``uid``) ends a
workload's run in a replay: ``{"event": "status.mirrored", "uid": ..., "status":
"completed"}`` (or ``"failed"``; the controller logs it when the member's copy reaches that
generic status), ``{"event": "workload.finished", "uid": ...}`` and ``{"event":
"workload.deleted", "uid": ...}``, each with its ``ts``. A workload with none runs until the
replay ends (a service, or a job still running when the log was taken).

``resolved_event`` builds the line from a ``Demand``, so the controller and the replay cannot
drift apart; ``read_trace`` parses a file back into arrivals.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from dispatcher.workloads.demand import (
    Demand,
    Gang,
    PodShape,
    TaintEffect,
    Toleration,
    TopologyConstraint,
)
from dispatcher.workloads.model import GenericStatus

__all__ = [
    "EVENT_DELETED",
    "EVENT_FINISHED",
    "EVENT_MIRRORED",
    "EVENT_RESOLVED",
    "TraceError",
    "TraceWorkload",
    "demand_from_gangs",
    "gangs_json",
    "read_trace",
    "resolved_event",
]

EVENT_RESOLVED = "workload.resolved"
EVENT_FINISHED = "workload.finished"
EVENT_DELETED = "workload.deleted"
EVENT_MIRRORED = "status.mirrored"
_FINAL_STATUSES = frozenset({GenericStatus.COMPLETED, GenericStatus.FAILED})

_OPERATORS: dict[str, Literal["Exists", "Equal"]] = {"Exists": "Exists", "Equal": "Equal"}
_EFFECTS: dict[str, TaintEffect] = {"": "", "NoSchedule": "NoSchedule",
                                    "PreferNoSchedule": "PreferNoSchedule",
                                    "NoExecute": "NoExecute"}


class TraceError(ValueError):
    """A trace line is invalid; the message names the file, the line and the key."""


@dataclass(frozen=True, kw_only=True)
class TraceWorkload:
    """One replayed workload: arrival and end in seconds from the first line (end None: open)."""

    uid: str
    namespace: str
    name: str
    api_version: str
    kind: str
    definition: str
    demand: Demand
    at: float
    end: float | None = None
    priority: int = 0
    manifest: Mapping[str, Any] | None = None


def gangs_json(demand: Demand) -> list[dict[str, Any]]:
    """The inspect-JSON ``gangs`` list of a demand (with the optional replay keys)."""
    gangs = []
    for gang in demand.gangs:
        shapes = []
        for shape in gang.pod_shapes:
            item: dict[str, Any] = {"count": shape.count, "gpus": shape.gpus,
                                    "gpuProduct": shape.gpu_product,
                                    "cpu": shape.cpu, "memory": shape.memory}
            if shape.node_selector:
                item["nodeSelector"] = dict(shape.node_selector)
            if shape.tolerations:
                item["tolerations"] = [{"key": t.key, "operator": t.operator, "value": t.value,
                                        "effect": t.effect} for t in shape.tolerations]
            shapes.append(item)
        entry: dict[str, Any] = {"name": gang.name, "pods": gang.pods,
                                 "minPods": gang.min_pods, "gpus": gang.gpus,
                                 "independent": gang.independent, "podShapes": shapes}
        if gang.topology is not None:
            entry["topology"] = {"level": gang.topology.level,
                                 "required": gang.topology.required}
        gangs.append(entry)
    return gangs


def resolved_event(*, ts: str, uid: str, namespace: str, name: str, api_version: str,
                   kind: str, definition: str, demand: Demand, priority: int = 0,
                   manifest: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The ``workload.resolved`` log line as a dict (the controller logs it as JSON)."""
    event: dict[str, Any] = {
        "event": EVENT_RESOLVED, "ts": ts, "uid": uid, "namespace": namespace, "name": name,
        "apiVersion": api_version, "kind": kind, "definition": definition,
        "pods": demand.pods, "gpus": demand.gpus, "gangs": gangs_json(demand)}
    if priority:
        event["priority"] = priority
    if manifest is not None:
        event["manifest"] = dict(manifest)
    return event


def _fail(where: str, key: str, message: str) -> TraceError:
    return TraceError(f"{where}: {key}: {message}")


def _int(value: Any, *, where: str, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(where, key, f"expected an integer >= 0, got {value!r}")
    return value


def _tolerations(raw: Any, *, where: str, key: str) -> tuple[Toleration, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise _fail(where, key, f"expected a list, got {raw!r}")
    result = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise _fail(where, f"{key}[{i}]", f"expected a mapping, got {item!r}")
        operator = item.get("operator") or "Equal"
        effect = item.get("effect") or ""
        if operator not in _OPERATORS or effect not in _EFFECTS:
            raise _fail(where, f"{key}[{i}]", f"invalid toleration {item!r}")
        result.append(Toleration(key=str(item.get("key") or ""), operator=_OPERATORS[operator],
                                 value=str(item.get("value") or ""), effect=_EFFECTS[effect]))
    return tuple(result)


def demand_from_gangs(gangs: Any, *, where: str = "<gangs>") -> Demand:
    """A ``Demand`` from an inspect-JSON ``gangs`` list; errors name the key."""
    if not isinstance(gangs, list) or not gangs:
        raise _fail(where, "gangs", f"expected a non-empty list, got {gangs!r}")
    result = []
    for i, gang in enumerate(gangs):
        key = f"gangs[{i}]"
        if not isinstance(gang, dict):
            raise _fail(where, key, f"expected a mapping, got {gang!r}")
        shapes_raw = gang.get("podShapes")
        if not isinstance(shapes_raw, list) or not shapes_raw:
            raise _fail(where, f"{key}.podShapes", "expected a non-empty list")
        shapes = []
        for j, shape in enumerate(shapes_raw):
            skey = f"{key}.podShapes[{j}]"
            if not isinstance(shape, dict):
                raise _fail(where, skey, f"expected a mapping, got {shape!r}")
            selector = shape.get("nodeSelector") or {}
            if not isinstance(selector, dict):
                raise _fail(where, f"{skey}.nodeSelector", f"expected a mapping, got {selector!r}")
            product = shape.get("gpuProduct")
            shapes.append(PodShape(
                count=_int(shape.get("count"), where=where, key=f"{skey}.count"),
                gpus=_int(shape.get("gpus", 0), where=where, key=f"{skey}.gpus"),
                gpu_product=None if product is None else str(product),
                cpu=None if shape.get("cpu") is None else str(shape["cpu"]),
                memory=None if shape.get("memory") is None else str(shape["memory"]),
                node_selector={str(k): str(v) for k, v in selector.items()},
                tolerations=_tolerations(shape.get("tolerations"), where=where,
                                         key=f"{skey}.tolerations")))
        pods = sum(shape.count for shape in shapes)
        declared = gang.get("pods", pods)
        if declared != pods:
            raise _fail(where, f"{key}.pods", f"{declared!r} but its podShapes count {pods}")
        independent = gang.get("independent", False)
        if not isinstance(independent, bool):
            raise _fail(where, f"{key}.independent", f"expected true or false, got "
                                                     f"{independent!r}")
        topology = gang.get("topology")
        if topology is not None and (not isinstance(topology, dict)
                                     or not isinstance(topology.get("level"), str)):
            raise _fail(where, f"{key}.topology", f"expected {{level, required}}, got "
                                                  f"{topology!r}")
        result.append(Gang(name=str(gang.get("name") or f"gang-{i}"), pods=pods,
                           min_pods=_int(gang.get("minPods", pods), where=where,
                                         key=f"{key}.minPods"),
                           pod_shapes=tuple(shapes), independent=independent,
                           topology=None if topology is None else TopologyConstraint(
                               level=topology["level"],
                               required=topology.get("required", True) is not False,
                               source="trace")))
    return Demand(gangs=tuple(result))


def _timestamp(value: Any, *, where: str) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    raise _fail(where, "ts", f"expected RFC 3339 time or Unix seconds, got {value!r}")


def read_trace(lines: Iterable[str], *, source: str = "<trace>") -> list[TraceWorkload]:
    """Arrivals from a JSON-lines log, times relative to the first ``workload.resolved``.

    Lines that are not JSON objects, or carry other events, are skipped: a controller log can
    be replayed as it is. A uid resolved twice (the controller re-resolves on update) keeps
    its first arrival.
    """
    resolved: dict[str, tuple[float, dict[str, Any], str]] = {}
    ends: dict[str, float] = {}
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text.startswith("{"):
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError:
            continue
        if not isinstance(record, dict):
            continue
        where = f"{source}:{number}"
        event = record.get("event")
        if event == EVENT_MIRRORED and record.get("status") not in _FINAL_STATUSES:
            continue
        if event not in (EVENT_RESOLVED, EVENT_FINISHED, EVENT_DELETED, EVENT_MIRRORED):
            continue
        uid = record.get("uid")
        if not isinstance(uid, str) or not uid:
            raise _fail(where, "uid", f"expected a non-empty string, got {uid!r}")
        ts = _timestamp(record.get("ts"), where=where)
        if event == EVENT_RESOLVED:
            resolved.setdefault(uid, (ts, record, where))
        else:
            ends.setdefault(uid, ts)
    if not resolved:
        return []
    origin = min(ts for ts, _, _ in resolved.values())
    workloads = []
    for uid, (ts, record, where) in resolved.items():
        for key in ("kind", "apiVersion", "name"):
            if not isinstance(record.get(key), str):
                raise _fail(where, key, f"expected a string, got {record.get(key)!r}")
        end = ends.get(uid)
        priority = record.get("priority", 0)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise _fail(where, "priority", f"expected an integer, got {priority!r}")
        workloads.append(TraceWorkload(
            uid=uid, namespace=str(record.get("namespace") or "default"),
            name=record["name"], api_version=record["apiVersion"], kind=record["kind"],
            definition=str(record.get("definition") or ""),
            demand=demand_from_gangs(record.get("gangs"), where=where),
            at=ts - origin, end=None if end is None or end < ts else end - origin,
            priority=priority,
            manifest=record["manifest"] if isinstance(record.get("manifest"), dict) else None))
    workloads.sort(key=lambda w: (w.at, w.uid))
    return workloads
