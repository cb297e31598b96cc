"""Bugs the chaos rounds found, pinned as small tests that need no fleet.

1. A member coming back answers 429/503 on some kinds for a moment. Each failing copy watch
   marked *every* kind of that member unsynced, but only the failing watch re-lists, so
   copies of the healthy kinds read as "not known yet" for good: a hub deletion waited
   forever for its finalizer (round 1, seed 20261129001, member-restart).
"""

from __future__ import annotations

from dispatcher.control.caches import CopyCache, kind_key


def test_a_broken_copy_watch_unsyncs_only_its_own_kind() -> None:
    copies = CopyCache()
    jobsets = kind_key("jobset.x-k8s.io/v1alpha2", "JobSet")
    nims = kind_key("apps.nvidia.com/v1alpha1", "NIMService")
    copies.relist("member-2", jobsets, {})
    copies.relist("member-2", nims, {})
    copies.relist("member-1", nims, {})
    copies.unsync("member-2", jobsets)
    assert copies.synced == {("member-2", nims), ("member-1", nims)}
    copies.unsync("member-2")  # the member itself is gone: everything of it
    assert copies.synced == {("member-1", nims)}
