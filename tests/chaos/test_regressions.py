"""Bugs the chaos rounds found, pinned as small tests that need no fleet.

1. A member coming back answers 429/503 on some kinds for a moment. Each failing copy watch
   marked *every* kind of that member unsynced, but only the failing watch re-lists, so
   copies of the healthy kinds read as "not known yet" for good: a hub deletion waited
   forever for its finalizer (round 1, seed 20261129001, member-restart).
2. and 3. See the tests below (a request on a client the fleet closed meanwhile).
"""

from __future__ import annotations

import pytest

from dispatcher.control.caches import CopyCache
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Unreachable
from dispatcher.kube.resources import GroupVersionKind


def test_a_broken_copy_watch_unsyncs_only_its_own_kind() -> None:
    copies = CopyCache()
    jobsets = GroupVersionKind.of("jobset.x-k8s.io/v1alpha2", "JobSet")
    nims = GroupVersionKind.of("apps.nvidia.com/v1alpha1", "NIMService")
    copies.relist("member-2", jobsets, {})
    copies.relist("member-2", nims, {})
    copies.relist("member-1", nims, {})
    copies.unsync("member-2", jobsets)
    assert copies.synced == {("member-2", nims), ("member-1", nims)}
    copies.unsync("member-2")  # the member itself is gone: everything of it
    assert copies.synced == {("member-1", nims)}


async def test_a_request_on_a_closed_client_is_an_outage_not_a_crash() -> None:
    """2. A member that stalls (SIGSTOP) while a new leader connects: the fleet closes the
    client, the copy watcher still holding it got aiohttp's RuntimeError('Session is
    closed'), its task crashed for good and the member's copies stayed unknown (Dispatch
    Unknown, deletions stuck). Round 19, seed 20261129019, slow-member + kill -9."""
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                  "users": [{"name": "u", "user": {"token": "t"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    client = await KubeClient.from_kubeconfig(kubeconfig, name="member-2")
    await client.close()
    with pytest.raises(Unreachable, match="client closed"):
        await client.request("GET", "/version")
    with pytest.raises(Unreachable):
        await client.discovery.resource("jobset.x-k8s.io/v1alpha2", "JobSet")


async def test_a_close_in_the_middle_of_a_request_is_an_outage_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """3. The same race, one step later: the close lands while aiohttp is inside the
    request and it fails an internal ``assert`` (copy watch of Job crashed with
    AssertionError; report run, member-2 answering 503 while a new leader connected)."""
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                  "users": [{"name": "u", "user": {"token": "t"}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}
    client = await KubeClient.from_kubeconfig(kubeconfig, name="member-2")

    async def closing_midway(*args: object, **kwargs: object) -> None:
        await client.close()
        raise AssertionError

    # The request itself (``KubeClient._call``: the session's request) is where the close
    # lands.
    monkeypatch.setattr(client, "_call", closing_midway)
    with pytest.raises(Unreachable, match="client closed"):
        await client.request("GET", "/version")
    monkeypatch.undo()
    other = await KubeClient.from_kubeconfig(kubeconfig, name="member-1")

    async def failing(*args: object, **kwargs: object) -> None:
        raise AssertionError("a real bug, not a close")

    monkeypatch.setattr(other, "_call", failing)
    with pytest.raises(AssertionError):
        await other.request("GET", "/version")
    await other.close()  # an unclosed session warns at collection, in whatever test runs
    await other.close()
