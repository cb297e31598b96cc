"""HubCache: watch events store newer versions; only news wakes a worker."""

from __future__ import annotations

from typing import Any

from dispatcher.control.caches import HubCache
from dispatcher.kube.resources import ResourceRef

JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)


def job(rv: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": "a", "namespace": "t", "uid": "u1", "resourceVersion": rv}}


def record(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "job-a", "namespace": "t", "uid": "d1", "resourceVersion": rv},
            "spec": {"workload": {"uid": "u1"}}}


def test_the_echo_of_our_own_write_is_not_news() -> None:
    cache = HubCache()
    assert cache.observe(JOBS, job("5"))            # first sight
    cache.put(JOBS, job("7"), force=True)          # our write's response
    assert not cache.observe(JOBS, job("7"))       # its echo
    assert not cache.observe(JOBS, job("6"))       # an older event
    item = cache.workload("u1")
    assert item is not None and item.obj["metadata"]["resourceVersion"] == "7"
    assert cache.observe(JOBS, job("8"))           # someone else's change


def test_record_echoes_are_not_news_either() -> None:
    cache = HubCache()
    assert cache.observe_record(record("3")) == "u1"
    cache.put_record(record("4"), force=True)
    assert cache.observe_record(record("4")) == ""
    assert cache.observe_record(record("3")) == ""
    assert cache.observe_record(record("9")) == "u1"
    assert (cache.record("u1") or {})["metadata"]["resourceVersion"] == "9"


def test_a_copy_echo_is_held_and_a_newer_version_is_not() -> None:
    from dispatcher.control.caches import CopyCache, MemberCopy

    copies = CopyCache()
    created = job("12")
    assert not copies.holds("m1", "u1", created)
    copies.put("m1", "u1", MemberCopy(obj=created, generic="pending", statuses=("pending",),
                                      seen_at=0.0))
    assert copies.holds("m1", "u1", job("12")) and copies.holds("m1", "u1", job("11"))
    assert not copies.holds("m1", "u1", job("13"))
    assert not copies.holds("m2", "u1", job("12"))


def test_cached_objects_carry_no_managed_fields() -> None:
    """A write's response keeps its managedFields; the cache does not (a watch never brings
    them: kube.watch drops them on the way in), so every object looks the same."""
    cache = HubCache()
    managed = [{"manager": "kubectl-create", "fieldsV1": {"f:spec": {}}}]
    written = job("7")
    written["metadata"]["managedFields"] = managed
    cache.put(JOBS, written, force=True)
    item = cache.workload("u1")
    assert item is not None and "managedFields" not in item.obj["metadata"]
    assert item.obj["metadata"]["resourceVersion"] == "7"
    assert written["metadata"]["managedFields"] == managed  # the response itself untouched
    dispatch = record("3")
    dispatch["metadata"]["managedFields"] = managed
    cache.put_record(dispatch, force=True)
    assert all("managedFields" not in r["metadata"] for r in cache.records())


def test_a_record_is_read_once_per_stored_object() -> None:
    cache = HubCache()
    body = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "Dispatch",
            "metadata": {"name": "job-a", "namespace": "team-a", "uid": "r1",
                         "resourceVersion": "5"},
            "spec": {"workload": {"uid": "w1", "kind": "Job", "name": "a"}},
            "status": {"phase": "Pending"}}
    cache.put_record(body)
    first = cache.record_value("w1")
    assert first is not None and first.phase == "Pending"
    assert cache.record_value("w1") is first
    cache.put_record({**body, "metadata": {**body["metadata"], "resourceVersion": "6"},
                      "status": {"phase": "Submitted"}})
    second = cache.record_value("w1")
    assert second is not None and second.phase == "Submitted"
    cache.drop_record(body)
    assert cache.record_value("w1") is None
