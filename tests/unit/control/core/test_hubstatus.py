"""The status the mirror writes on the hub (``control.core.hubstatus``): a Job's transitions the
1.35 apiserver accepts. The same sequences are written to a real apiserver in
``tests/integration/test_hub_status.py``; here the rules on plain data.

Covered: first copy as is, failover (counters, startTime), a pre-1.31 member (companion
conditions, completionTime), a finished or suspended hub Job left alone, ready <= active, a
pause-held kind left to the hub's controller, other kinds copied.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.control.core.hubstatus import hub_status, job_status

T0, T1, T2 = "2026-12-01T10:00:00Z", "2026-12-01T10:05:00Z", "2026-12-01T10:09:00Z"


def cond(type_: str, at: str = T2) -> dict[str, Any]:
    return {"type": type_, "status": "True", "lastTransitionTime": at,
            "lastProbeTime": at, "reason": type_, "message": ""}


RUNNING = {"startTime": T0, "active": 2, "ready": 2, "succeeded": 1}
DONE_131 = {"startTime": T1, "succeeded": 2, "active": 0, "ready": 0, "completionTime": T2,
            "conditions": [cond("SuccessCriteriaMet"), cond("Complete")]}


def test_the_first_copy_is_taken_as_is() -> None:
    assert job_status({}, RUNNING, suspended=False) == RUNNING


def test_failover_keeps_the_first_start_and_the_counters() -> None:
    fresh = {"active": 1}  # the new copy, not started yet
    out = job_status(RUNNING, fresh, suspended=False)
    assert out == {"active": 1, "startTime": T0, "succeeded": 1}
    done = job_status(RUNNING, DONE_131, suspended=False)
    assert done is not None
    assert done["startTime"] == T0 and done["completionTime"] == T2 and done["succeeded"] == 2


def test_a_pre_131_member_gets_the_companion_conditions() -> None:
    old = {"startTime": T1, "succeeded": 2, "conditions": [cond("Complete")]}
    out = job_status({}, old, suspended=False)
    assert out is not None
    assert {c["type"] for c in out["conditions"]} == {"Complete", "SuccessCriteriaMet"}
    assert out["completionTime"] == T2 and out["active"] == 0
    failed = job_status({}, {"startTime": T1, "failed": 3, "active": 2, "ready": 1,
                             "conditions": [cond("Failed")]}, suspended=False)
    assert failed is not None
    assert {c["type"] for c in failed["conditions"]} == {"Failed", "FailureTarget"}
    assert failed["active"] == 0 and failed["ready"] == 0 and "completionTime" not in failed


def test_completion_is_never_before_the_start() -> None:
    early = {**DONE_131, "completionTime": "2026-12-01T09:00:00Z"}
    out = job_status({"startTime": T0}, early, suspended=False)
    assert out is not None and out["completionTime"] == T0


def test_a_finished_or_suspended_hub_job_is_left_alone() -> None:
    assert job_status(DONE_131, RUNNING, suspended=False) is None
    assert job_status({}, RUNNING, suspended=True) is None


def test_true_terminal_conditions_are_never_turned_off() -> None:
    hub = {"startTime": T0, "conditions": [cond("FailureTarget")]}
    out = job_status(hub, {"startTime": T0, "active": 1}, suspended=False)
    assert out is not None and [c["type"] for c in out["conditions"]] == ["FailureTarget"]
    assert job_status(hub, DONE_131, suspended=False) is None  # Complete excludes it


@given(st.integers(0, 5), st.integers(0, 5))
def test_ready_never_exceeds_active(active: int, ready: int) -> None:
    out = job_status({}, {"startTime": T0, "active": active, "ready": ready}, suspended=False)
    assert out is not None and out["ready"] <= out["active"]


def test_a_pause_held_kind_is_left_to_the_hub_and_others_copied() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "status": {"replicas": 0}}
    assert hub_status(deployment, {"replicas": 2}, hub_owns_status=True) is None
    assert hub_status(deployment, {"replicas": 2}, hub_owns_status=False) == {"replicas": 2}
    hub_job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"suspend": True}}
    assert hub_status(hub_job, RUNNING, hub_owns_status=False) is None
