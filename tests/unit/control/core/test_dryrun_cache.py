"""AdmittedPods: acceptances remembered per member, namespace and pod body, for a while."""

from __future__ import annotations

from dispatcher.control.core.dryrun import AdmittedPods

POD = {"apiVersion": "v1", "kind": "Pod", "spec": {"containers": [{"name": "a"}]}}


def test_an_admitted_pod_is_not_asked_again_until_the_ttl() -> None:
    cache = AdmittedPods(ttl_s=30)
    assert not cache.admitted("m1", "team-a", POD, now=0)
    cache.remember("m1", "team-a", POD, now=0)
    assert cache.admitted("m1", "team-a", dict(POD), now=29.9)
    assert not cache.admitted("m1", "team-a", POD, now=30.0)  # expired: ask again


def test_another_member_namespace_or_body_is_asked() -> None:
    cache = AdmittedPods()
    cache.remember("m1", "team-a", POD, now=0)
    privileged = {**POD, "spec": {"containers": [{"name": "a", "securityContext": {
        "privileged": True}}]}}
    assert not cache.admitted("m2", "team-a", POD, now=1)
    assert not cache.admitted("m1", "team-b", POD, now=1)
    assert not cache.admitted("m1", "team-a", privileged, now=1)


def test_the_cache_is_bounded_oldest_first() -> None:
    cache = AdmittedPods(size=2)
    for ns in ("a", "b", "c"):
        cache.remember("m1", ns, POD, now=0)
    assert not cache.admitted("m1", "a", POD, now=1)
    assert cache.admitted("m1", "b", POD, now=1) and cache.admitted("m1", "c", POD, now=1)


def test_the_dispatchers_own_stamps_do_not_make_a_pod_new() -> None:
    cache = AdmittedPods()
    stamped = {**POD, "metadata": {"labels": {"dispatcher.io/hub-uid": "u1", "app": "x"}}}
    other = {**POD, "metadata": {"labels": {"dispatcher.io/hub-uid": "u2", "app": "x"}}}
    cache.remember("m1", "team-a", stamped, now=0)
    assert cache.admitted("m1", "team-a", other, now=1)
    relabelled = {**POD, "metadata": {"labels": {"dispatcher.io/hub-uid": "u2", "app": "y"}}}
    assert not cache.admitted("m1", "team-a", relabelled, now=1)  # a label admission may read
