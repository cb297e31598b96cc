"""The pod-spec fields that decide how a member schedules a pod, as a workload sets them.

A pod template is the tenant's, but a few of its fields are the member's scheduling
policy rather than a description of the work (docs/security.md, finding 5):

- ``nodeName`` binds the pod to a node directly: the scheduler never sees it, so
  ``NoSchedule`` taints, node affinity and the member's capacity are skipped, and the
  dispatcher's own placement (which chose nodes and reserved their GPUs) is bypassed;
- ``priorityClassName`` sets the pod's priority and preemption on the member
  (``system-node-critical`` is 2000001000: it preempts anything);
- ``priority`` is the integer the member's Priority admission computes from the class: a
  template never needs it (a mismatch is refused by the member, a match says nothing);
- ``schedulerName`` hands the pod to another scheduler, whose rules (taints, quotas,
  gangs) may not be the ones the member's operator set or the dispatcher placed for.

These are found here, per pod spec, so a pure policy (``control.core.podpolicy``) can refuse
them before anything is placed. Everything else stays the tenant's: tolerations, node
selectors and affinity are honoured by the member's scheduler (and by the dispatcher's
placement), so they cannot reach a node the scheduler would not give; ``preemptionPolicy``
is checked against the class by the member's Priority admission (a value that differs is
refused there), so it can only say what the class already allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_SCHEDULER", "NODE_NAME", "PRIORITY", "PRIORITY_CLASS", "SCHEDULER",
           "SCHEDULING_FIELDS", "PodField", "scheduling_fields"]

NODE_NAME = "nodeName"
PRIORITY = "priority"
PRIORITY_CLASS = "priorityClassName"
SCHEDULER = "schedulerName"
SCHEDULING_FIELDS = (NODE_NAME, PRIORITY, PRIORITY_CLASS, SCHEDULER)
"""Pod-spec keys that are the member's scheduling policy (module docstring)."""
DEFAULT_SCHEDULER = "default-scheduler"
"""The member's own scheduler: what an unset ``schedulerName`` is defaulted to."""


@dataclass(frozen=True, kw_only=True)
class PodField:
    """One scheduling field a pod template sets: where (the JSON path in the workload
    object, e.g. ``spec.template.spec.nodeName``), which, and to what."""

    path: str
    field: str
    value: Any


def scheduling_fields(spec: Any) -> tuple[tuple[str, Any], ...]:
    """The scheduling fields ``spec`` (a pod spec) sets, in ``SCHEDULING_FIELDS`` order.

    Unset means absent, null or the empty string (the apiserver treats ``""`` as unset),
    and ``schedulerName: default-scheduler``, which is what the hub's apiserver writes into
    every built-in pod template (a Job's) when none is given: the member's own scheduler,
    nothing to judge, and no JSON path to look up on every Job. Any other value counts,
    whatever its type: the policy judges it, the member's validation refuses a wrong type.
    """
    if not isinstance(spec, dict | Mapping):
        return ()
    return tuple((key, spec[key]) for key in SCHEDULING_FIELDS
                 if spec.get(key) is not None and spec.get(key) != ""
                 and not (key == SCHEDULER and spec.get(key) == DEFAULT_SCHEDULER))
