"""The status the hub object should hold, given its member copy's: what the mirror writes.

Mostly the copy's status as is. Two exceptions, both decided here on plain data:

- **The hub's controller owns the status** (a shared hub whose hold leaves the hub's
  controller writing it: a paused Deployment, a suspended PyTorchJob). Writing there would
  fight that controller, so the hub status is left alone (``None``); the member's status
  reaches the Dispatch only.
- **batch/v1 Job**: since Kubernetes 1.31 the apiserver validates every Job status write
  (``pkg/apis/batch/validation``), with or without managedBy. A member's status passes on
  the first copy, but not after a failover (a new copy: counters back to 0, a later or no
  ``startTime``), nor from a member older than 1.31 (no ``SuccessCriteriaMet`` /
  ``FailureTarget``). ``job_status`` makes the transition the hub accepts: counters never go
  down, ``startTime`` stays the first one, terminal conditions are never turned off and get
  their required companions, a finished Job has no active pods, ``completionTime`` only
  with ``Complete`` and never before ``startTime``. A hub Job that is already finished keeps
  its status (it is final on the hub), and a suspended one is not written (as Kueue's
  MultiKueue does: ``job_multikueue_adapter.go``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["hub_status", "job_status"]

_TERMINAL = ("Complete", "Failed")
_STICKY = ("Complete", "Failed", "FailureTarget", "SuccessCriteriaMet")


def _true(conditions: list[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    return next((c for c in conditions if c.get("type") == type_
                 and c.get("status") == "True"), None)


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def job_status(hub: Mapping[str, Any], member: Mapping[str, Any], *, suspended: bool
               ) -> dict[str, Any] | None:
    """The batch/v1 Job status to write on the hub (None: leave it; module docstring)."""
    hub_conditions = [dict(c) for c in hub.get("conditions") or () if isinstance(c, Mapping)]
    if suspended or any(_true(hub_conditions, t) for t in _TERMINAL):
        return None
    out = dict(member)
    conditions = [dict(c) for c in member.get("conditions") or () if isinstance(c, Mapping)]
    for type_ in _STICKY:  # once True on the hub, never turned off
        kept = _true(hub_conditions, type_)
        if kept is not None and _true(conditions, type_) is None:
            conditions = [c for c in conditions if c.get("type") != type_] + [kept]
    for final, companion in (("Complete", "SuccessCriteriaMet"), ("Failed", "FailureTarget")):
        done = _true(conditions, final)
        if done is not None and _true(conditions, companion) is None:  # a pre-1.31 member
            conditions = [c for c in conditions if c.get("type") != companion] + [
                {**done, "type": companion}]
    if (_true(conditions, "Complete") or _true(conditions, "SuccessCriteriaMet")) and (
            _true(conditions, "Failed") or _true(conditions, "FailureTarget")):
        return None  # cannot be said on the hub; the Dispatch carries the generic status
    if conditions or "conditions" in out:
        out["conditions"] = conditions
    for counter in ("succeeded", "failed"):
        if counter in hub or counter in member:
            out[counter] = max(_count(hub.get(counter)), _count(member.get(counter)))
    start = hub.get("startTime") or member.get("startTime")
    if start:
        out["startTime"] = start
    complete, failed = _true(conditions, "Complete"), _true(conditions, "Failed")
    if complete or failed:
        out["active"] = 0
        for gauge in ("ready", "terminating"):
            if gauge in out:
                out[gauge] = 0
        out.pop("uncountedTerminatedPods", None)
        if not start:
            out["startTime"] = start = (complete or failed or {}).get("lastTransitionTime")
    if complete is None:
        out.pop("completionTime", None)
    else:
        done_at = out.get("completionTime") or complete.get("lastTransitionTime")
        if start and done_at and str(done_at) < str(start):  # RFC 3339 UTC: text order
            done_at = start
        out["completionTime"] = done_at
    if _count(out.get("ready")) > _count(out.get("active")):
        out["ready"] = _count(out.get("active"))
    return out


def hub_status(workload: Mapping[str, Any], member: Mapping[str, Any], *,
               hub_owns_status: bool) -> dict[str, Any] | None:
    """The status to mirror onto ``workload`` from its copy's ``member`` status, or None
    to leave the hub object's status as it is."""
    if hub_owns_status:
        return None
    if workload.get("apiVersion") == "batch/v1" and workload.get("kind") == "Job":
        spec = workload.get("spec") or {}
        return job_status(workload.get("status") or {}, member,
                          suspended=spec.get("suspend") is True)
    return dict(member)
