"""A hub Kueue Workload read for MultiKueue nomination (``workloads.kueueworkload``)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.control.core.record import parse_time
from dispatcher.workloads.kueueworkload import KueueWorkload, pod_sets_demand

CHECKS = frozenset({"multikueue"})


def workload(*, conditions: dict[str, str] | None = None, state: str = "Pending",
             **status: Any) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "job-train-1a2b3", "namespace": "team-a", "uid": "wl-1",
                         "resourceVersion": "7",
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "train", "uid": "j", "controller": True}]},
            "spec": {"queueName": "gpus", "podSets": [
                {"name": "main", "count": 2, "template": {"spec": {"containers": [
                    {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}},
                {"name": "aux", "count": 3, "minCount": 1, "template": {"spec": {
                    "containers": [{"name": "c"}]}}}]},
            "status": {"conditions": [{"type": t, "status": s} for t, s in
                                      (conditions or {"QuotaReserved": "True"}).items()],
                       "admissionChecks": [{"name": "multikueue", "state": state,
                                            "lastTransitionTime": "2026-12-01T10:00:00Z"}],
                       **status}}


def read(obj: dict[str, Any]) -> KueueWorkload:
    return KueueWorkload.of(obj, CHECKS, parse_time)


def test_a_workload_with_quota_and_its_check_pending_waits_for_a_nomination() -> None:
    wl = read(workload())
    assert wl.waiting() is None
    assert wl.owner == ("batch/v1", "Job", "train") and wl.queue == "gpus"
    assert wl.check == "multikueue" and wl.check_since == parse_time("2026-12-01T10:00:00Z")


@pytest.mark.parametrize(("obj", "why"), [
    (workload(conditions={"QuotaReserved": "False"}), "no quota reserved"),
    (workload(state="Ready", clusterName="member-1"), "running on member-1"),
    (workload(state="Retry"), "check is Retry"),
    (workload(conditions={"QuotaReserved": "True", "Finished": "True"}), "finished"),
])
def test_what_does_not_wait_says_why(obj: dict[str, Any], why: str) -> None:
    reason = read(obj).waiting()
    assert reason is not None and why in reason


def test_a_workload_of_another_check_is_not_multikueues() -> None:
    assert KueueWorkload.of(workload(), frozenset({"other"}), parse_time).waiting() == \
        "no MultiKueue admission check"


def test_nominations_are_read() -> None:
    assert read(workload(nominatedClusterNames=["member-2", "member-1"])).nominated == (
        "member-2", "member-1")


def test_pod_sets_are_one_gang_with_partial_admission_as_its_minimum() -> None:
    (gang,) = pod_sets_demand(workload()).gangs
    assert (gang.pods, gang.min_pods, gang.gpus) == (5, 3, 8)
    assert sorted((s.count, s.gpus) for s in gang.pod_shapes) == [(2, 4), (3, 0)]


def test_a_bad_pod_set_is_an_error_that_names_it() -> None:
    obj = workload()
    obj["spec"]["podSets"][1]["minCount"] = 9
    with pytest.raises(ValueError, match=r"spec.podSets\[1\].minCount"):
        pod_sets_demand(obj)
