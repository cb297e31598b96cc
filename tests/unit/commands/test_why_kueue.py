"""``dispatcher why`` for a job Kueue queues on the hub (MultiKueue, the dispatcher as its
external dispatcher): the stage read from the hub Workload as Kueue v0.17.0 writes it, in
whose words, and the dispatcher's own Events preferred over anyone else's."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.commands.why import kueue_summary

NOW = 1_800_000_100.0  # 2027-01-15T08:01:40Z
T0 = "2027-01-15T08:00:00Z"  # 100 s before NOW
CHECKS = {"multikueue": ("member-1", "member-2")}


def _workload(*, quota: str | None = None, quota_message: str = "", check: str = "Pending",
              nominated: tuple[str, ...] = (), cluster: str | None = None,
              finished: bool = False) -> dict[str, Any]:
    conditions = []
    if quota is not None:
        conditions.append({"type": "QuotaReserved", "status": quota, "reason": "Pending"
                           if quota == "False" else "QuotaReserved",
                           "message": quota_message, "lastTransitionTime": T0})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded",
                           "message": "Job finished successfully",
                           "lastTransitionTime": T0})
    status: dict[str, Any] = {
        "conditions": conditions,
        "admissionChecks": [{"name": "multikueue", "state": check, "message": "",
                             "lastTransitionTime": T0}]}
    if quota == "True":
        status["admission"] = {"clusterQueue": "gpus", "podSetAssignments": []}
    if nominated:
        status["nominatedClusterNames"] = list(nominated)
    if cluster:
        status["clusterName"] = cluster
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": "job-train-5f2c1", "namespace": "team-a", "uid": "wl-1",
                         "creationTimestamp": T0,
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job",
                                              "name": "train", "uid": "job-1",
                                              "controller": True}]},
            "spec": {"queueName": "gpus", "podSets": []}, "status": status}


def _event(reason: str, message: str, at: str, component: str = "dispatcher"
           ) -> dict[str, Any]:
    return {"reason": reason, "message": message, "lastTimestamp": at,
            "reportingComponent": component, "source": {"component": component}}


def test_over_the_hubs_quota_it_waits_in_kueue_in_kueues_words() -> None:
    said = ("couldn't assign flavors to pod set main: insufficient unused quota for "
            "nvidia.com/gpu in flavor h100, 8 more needed")
    got = kueue_summary(_workload(quota="False", quota_message=said), CHECKS, [], now=NOW)
    assert (got["stage"], got["message"], got["waiting"]) == ("WaitingForQuota", said, 100.0)
    assert got["clusterQueue"] is None and got["queue"] == "gpus"
    fresh = kueue_summary(_workload(), CHECKS, [], now=NOW)  # Kueue not there yet
    assert fresh["stage"] == "WaitingForQuota" and "not looked at" in fresh["message"]


def test_waiting_for_a_worker_gives_the_dispatchers_latest_word_and_the_workers() -> None:
    events = [_event("NoWorkerFits", "no worker fits now: member-1: 3 GPUs free",
                     "2027-01-15T08:00:30Z"),
              _event("NoWorkerFits", "no worker fits now: member-1: 0 GPUs free",
                     "2027-01-15T08:01:00Z"),
              _event("NoWorkerFits", "forged by someone else", "2027-01-15T08:01:30Z",
                     component="tenant"),
              _event("Pending", "unrelated", "2027-01-15T08:01:35Z")]
    got = kueue_summary(_workload(quota="True"), CHECKS, events, now=NOW)
    assert got["stage"] == "WaitingForWorker" and got["clusterQueue"] == "gpus"
    assert got["message"] == "no worker fits now: member-1: 0 GPUs free"
    assert got["dispatcher"] == {"reason": "NoWorkerFits", "message": got["message"],
                                 "at": "2027-01-15T08:01:00Z"}
    assert got["workers"] == ["member-1", "member-2"] and got["waiting"] == 100.0
    silent = kueue_summary(_workload(quota="True"), CHECKS, [], now=NOW)
    assert "has not decided yet" in silent["message"] and silent["dispatcher"] is None


@pytest.mark.parametrize(("workload", "stage", "shown"), [
    (_workload(quota="True", nominated=("member-2",)), "Nominated", ["member-2"]),
    (_workload(quota="True", check="Ready", cluster="member-2"), "Running", []),
    (_workload(quota="True", check="Retry"), "CheckRetry", []),
    (_workload(quota="True", cluster="member-1", finished=True), "Finished", []),
])
def test_the_other_stages(workload: dict[str, Any], stage: str, shown: list[str]) -> None:
    got = kueue_summary(workload, CHECKS, [_event("Nominated", "nominated member-2: fits",
                                                  "2027-01-15T08:01:00Z")], now=NOW)
    assert got["stage"] == stage and got["nominated"] == shown
    assert (got["waiting"] is None) == (stage in ("Running", "Finished"))
    if stage == "Running":
        assert got["cluster"] == "member-2" and got["message"] == "admitted on member-2"


def test_a_workload_with_no_multikueue_check_says_so() -> None:
    got = kueue_summary(_workload(quota="True"), {}, [], now=NOW)
    assert got["stage"] == "NotMultiKueue" and got["workers"] == []
