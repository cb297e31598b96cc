"""What a member's Kueue says of a copy: its Workload's admission, as one state and reason.

Pure. On a Kueue member a copy runs only once Kueue admits it: Kueue creates a Workload for
the copy (label ``kueue.x-k8s.io/job-uid`` = the copy's uid) and keeps its conditions
(Kueue v0.17.0, ``apis/kueue/v1beta2/workload_types.go``): ``QuotaReserved`` (quota taken in
a ClusterQueue), ``Admitted`` (quota and every admission check), ``Evicted`` (reason
``Preempted``, ``PodsReadyTimeout``, ``AdmissionCheck``, ``ClusterQueueStopped``,
``Deactivated``; reset to False when admitted again), ``Preempted`` (``InClusterQueue``,
``InCohort...``), ``Requeued`` and ``Finished``. ``of`` folds them into the one state the
control loop acts on (``control.core.decide``): a copy waiting for quota is not running, an
evicted one may move under the failover policy, a finished one is never run again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from dispatcher.workloads.model import GenericStatus

__all__ = ["ADMITTED", "EVICTED", "FINISHED", "JOB_UID_LABEL", "PENDING", "QUOTA_RESERVED",
           "Admission", "State", "copy_uid", "of", "queued_generic"]

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""On a Kueue Workload: the uid of the job it admits (``constants.JobUIDLabel``)."""
State = Literal["Pending", "QuotaReserved", "Admitted", "Evicted", "Finished"]
PENDING: Final = "Pending"
QUOTA_RESERVED: Final = "QuotaReserved"
ADMITTED: Final = "Admitted"
EVICTED: Final = "Evicted"
FINISHED: Final = "Finished"


@dataclass(frozen=True, slots=True)
class Admission:
    """One copy's admission on its member: ``state``, Kueue's ``reason`` and ``message``
    for it (an eviction's names its cause: ``Preempted: InClusterQueue``), the
    ClusterQueue it holds quota in ('' while pending) and the Workload's name."""

    state: State
    reason: str = ""
    message: str = ""
    cluster_queue: str = ""
    workload: str = ""

    @property
    def admitted(self) -> bool:
        return self.state in (ADMITTED, FINISHED)

    @property
    def key(self) -> tuple[str, str]:
        """What a Dispatch condition records of it (written again when it changes)."""
        return self.state, self.reason

    def describe(self, member: str) -> str:
        """One sentence for a condition or an event."""
        where = f" in ClusterQueue {self.cluster_queue}" if self.cluster_queue else ""
        said = f": {self.message}" if self.message else ""
        return {
            PENDING: f"waiting for quota on {member}'s Kueue{said}",
            QUOTA_RESERVED: f"quota reserved on {member}{where}, admission checks pending",
            ADMITTED: f"admitted by {member}'s Kueue{where}",
            EVICTED: f"evicted by {member}'s Kueue ({self.reason}){said}",
            FINISHED: f"finished on {member}{where}",
        }[self.state]


_DONE = frozenset({GenericStatus.COMPLETED, GenericStatus.FAILED})


def queued_generic(generic: str, admission: Admission | None, *, queued: bool = False) -> str:
    """The copy's generic status, its admission considered: a copy its member's Kueue has
    not admitted (or evicted) is ``pending`` whatever its own status says (a suspended
    Job, pods still terminating), unless it finished. ``queued``: the copy is in a Kueue
    queue (its member runs Kueue, the copy carries the queue label): suspended before its
    Workload is seen means waiting too (Kueue's webhook suspended it)."""
    if admission is None:
        return GenericStatus.PENDING if queued and generic == GenericStatus.SUSPENDED \
            else generic
    if admission.admitted or generic in _DONE:
        return generic
    return GenericStatus.PENDING


def _conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = (workload.get("status") or {}).get("conditions") or ()
    return {str(c.get("type")): c for c in found if isinstance(c, Mapping)}


def _true(conditions: Mapping[str, Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    cond = conditions.get(kind)
    return cond if cond is not None and cond.get("status") == "True" else None


def copy_uid(workload: Mapping[str, Any]) -> str | None:
    """The uid of the copy a Workload admits (its job-uid label, else its controller)."""
    meta = workload.get("metadata") or {}
    uid = (meta.get("labels") or {}).get(JOB_UID_LABEL)
    if uid:
        return str(uid)
    owner = next((o for o in meta.get("ownerReferences") or ()
                  if isinstance(o, Mapping) and o.get("controller")), None)
    return str(owner["uid"]) if owner and owner.get("uid") else None


def of(workload: Mapping[str, Any]) -> Admission:
    """The admission a Workload says (see the module docstring for the order)."""
    conditions = _conditions(workload)
    name = str((workload.get("metadata") or {}).get("name") or "")
    admission = (workload.get("status") or {}).get("admission") or {}
    queue = str(admission.get("clusterQueue") or "")
    finished = _true(conditions, "Finished")
    if finished is not None:
        return Admission(FINISHED, str(finished.get("reason") or ""),
                         str(finished.get("message") or ""), queue, name)
    evicted = _true(conditions, "Evicted")
    if evicted is not None:
        reason = str(evicted.get("reason") or "")
        preempted = _true(conditions, "Preempted")
        if preempted is not None and preempted.get("reason"):
            reason = f"{reason}: {preempted['reason']}"
        return Admission(EVICTED, reason, str(evicted.get("message") or ""), queue, name)
    for state in (ADMITTED, QUOTA_RESERVED):
        cond = _true(conditions, state)
        if cond is not None:
            return Admission(state, str(cond.get("reason") or ""),
                             str(cond.get("message") or ""), queue, name)
    waiting = conditions.get("QuotaReserved") or {}
    return Admission(PENDING, str(waiting.get("reason") or "Pending"),
                     str(waiting.get("message") or ""), "", name)
