"""``control.core.orphans``: which of our copies the sweep deletes, on plain data.

Covered: a cached workload's copy stays where its record says (or on the same cluster
under a second name) and goes when the record names another member; an uncached one is
judged only once exactly its kind's hub watch listed, and then by the hub object read.
"""

from __future__ import annotations

from dispatcher.control.core.orphans import KEEP, Judgement, after_lookup, judge
from dispatcher.control.core.record import DispatchRecord
from dispatcher.kube.resources import GroupVersionKind

KIND = GroupVersionKind("batch", "v1", "Job")


def record(cluster: str | None) -> DispatchRecord:
    return DispatchRecord(name="job-t", namespace="ns", workload_uid="u1", cluster=cluster)


def same(a: str, b: str) -> bool:
    return {a, b} <= {"m1", "m1-alias"}


def test_a_cached_workload_keeps_its_copy_where_the_record_says() -> None:
    for rec in (None, record(None), record("m1"), record("m1-alias")):
        assert judge(member="m1", cached=True, record=rec, same_cluster=same, kind=KIND,
                     listed_kinds=()) == KEEP


def test_a_copy_left_behind_by_a_failover_is_stale() -> None:
    assert judge(member="m1", cached=True, record=record("m2"), same_cluster=same,
                 kind=KIND, listed_kinds=()) == Judgement(stale="workload moved to m2")


def test_an_uncached_workload_is_judged_only_once_its_own_kind_listed() -> None:
    assert judge(member="m1", cached=False, record=None, same_cluster=same, kind=KIND,
                 listed_kinds={GroupVersionKind("batch", "v1", "JobTemplate")}) == KEEP
    assert judge(member="m1", cached=False, record=None, same_cluster=same, kind=KIND,
                 listed_kinds={KIND}) == Judgement(ask_hub=True)


def test_the_hub_object_decides_an_uncached_copy() -> None:
    assert after_lookup(None, "u1") == "hub object gone"
    assert after_lookup({"metadata": {"uid": "u2"}}, "u1") == "hub object replaced"
    assert after_lookup({"metadata": {"uid": "u1"}}, "u1") is None
