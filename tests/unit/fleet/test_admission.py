"""A Kueue Workload's conditions folded into one admission state (Kueue v0.17.0's names):
finished over evicted over admitted over quota reserved over pending; the copy it admits;
a copy not admitted reads pending."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.fleet.admission import Admission, copy_uid, of, queued_generic


def workload(*conditions: tuple[str, str, str], queue: str = "",
             labels: dict[str, str] | None = None,
             owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"conditions": [
        {"type": t, "status": s, "reason": r, "message": f"{t} said"}
        for t, s, r in conditions]}
    if queue:
        status["admission"] = {"clusterQueue": queue}
    return {"metadata": {"name": "job-train-1a2b3", "labels": labels or {},
                         "ownerReferences": owners or []}, "status": status}


@pytest.mark.parametrize(("conditions", "state", "reason"), [
    ((), "Pending", "Pending"),
    ((("QuotaReserved", "False", "Pending"),), "Pending", "Pending"),
    ((("QuotaReserved", "True", "QuotaReserved"),), "QuotaReserved", "QuotaReserved"),
    ((("QuotaReserved", "True", "QuotaReserved"), ("Admitted", "True", "Admitted")),
     "Admitted", "Admitted"),
    ((("QuotaReserved", "False", "Pending"), ("Evicted", "True", "Preempted"),
      ("Preempted", "True", "InClusterQueue")), "Evicted", "Preempted: InClusterQueue"),
    ((("Evicted", "True", "PodsReadyTimeout"),), "Evicted", "PodsReadyTimeout"),
    # admitted again after an eviction: Kueue resets Evicted to False
    ((("Admitted", "True", "Admitted"), ("Evicted", "False", "QuotaReserved")), "Admitted",
     "Admitted"),
    ((("Admitted", "True", "Admitted"), ("Finished", "True", "Succeeded")), "Finished",
     "Succeeded"),
])
def test_the_state_a_workload_says(conditions: tuple[tuple[str, str, str], ...], state: str,
                                   reason: str) -> None:
    found = of(workload(*conditions, queue="team-a"))
    assert (found.state, found.reason) == (state, reason)
    assert found.workload == "job-train-1a2b3"


def test_the_copy_it_admits_is_its_job_uid_label_else_its_controller() -> None:
    assert copy_uid(workload(labels={"kueue.x-k8s.io/job-uid": "c1"})) == "c1"
    owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "c2",
             "controller": True}
    assert copy_uid(workload(owners=[owner])) == "c2"
    assert copy_uid(workload()) is None


def test_a_copy_not_admitted_is_pending_unless_finished() -> None:
    waiting, admitted = Admission("Pending"), Admission("Admitted")
    assert queued_generic("suspended", waiting) == "pending"
    assert queued_generic("running", Admission("Evicted", "Preempted")) == "pending"
    assert queued_generic("completed", waiting) == "completed"
    assert queued_generic("running", admitted) == "running"
    assert queued_generic("running", None) == "running"
    # in a Kueue queue, before its Workload is seen: Kueue's webhook suspended it
    assert queued_generic("suspended", None, queued=True) == "pending"
    assert queued_generic("suspended", None) == "suspended"


def test_descriptions_name_the_member_and_the_queue() -> None:
    assert Admission("Admitted", cluster_queue="team-a").describe("m1") == (
        "admitted by m1's Kueue in ClusterQueue team-a")
    assert Admission("Pending", message="insufficient quota").describe("m1") == (
        "waiting for quota on m1's Kueue: insufficient quota")
