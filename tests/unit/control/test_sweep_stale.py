"""The orphan sweep judges a copy only against a hub kind it watches, by exact identity.

Covers ``Controller._stale`` for a copy whose hub workload is not cached: its kind's hub
watch has not listed -> kept without asking the hub (never guess); a watch of another kind
whose key merely starts with this one's (``example.io/v1/JobTemplate`` for
``example.io/v1/Job``) does not count; once the kind's own watch has listed, a hub object
that is gone makes the copy stale. Uses a stub hub (discovery + GET). Not covered: the
sweep's deletes against real members (tests/integration/test_control_dispatch.py).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from dispatcher.control.caches import HubCache
from dispatcher.control.controller import Controller
from dispatcher.kube.errors import NotFound
from dispatcher.kube.resources import ResourceRef


def _ref(kind: str) -> ResourceRef:
    return ResourceRef(group="example.io", version="v1", kind=kind,
                       plural=f"{kind.lower()}s", namespaced=True)


class StubHub:
    """Discovery knows every kind; every GET is NotFound. Records what was asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.discovery = self

    async def resource(self, api_version: str, kind: str) -> ResourceRef:
        self.asked.append(f"discover {api_version}/{kind}")
        return _ref(kind)

    async def request(self, method: str, path: str, **_: Any) -> Any:
        self.asked.append(f"{method} {path}")
        raise NotFound(path)


COPY = {"apiVersion": "example.io/v1", "kind": "Job",
        "metadata": {"name": "train", "namespace": "team-a"}}


async def _stale(listed: list[str]) -> tuple[str | None, list[str]]:
    cache, hub = HubCache(), StubHub()
    for kind in listed:
        cache.relist(_ref(kind), "team-a", [])
    owner = SimpleNamespace(cache=cache, hub=hub, fleet=None)
    reason = await Controller._stale(owner, "uid-1", member="m1", obj=COPY)  # type: ignore[arg-type]
    return reason, hub.asked


async def test_a_kind_whose_watch_has_not_listed_is_never_judged() -> None:
    assert await _stale([]) == (None, [])


async def test_a_longer_kind_name_with_the_same_prefix_is_another_kind() -> None:
    reason, asked = await _stale(["JobTemplate"])
    assert (reason, asked) == (None, []), "JobTemplate's watch was taken for Job's"


async def test_a_listed_kind_whose_hub_object_is_gone_is_stale() -> None:
    reason, asked = await _stale(["JobTemplate", "Job"])
    assert reason == "hub object gone"
    assert asked == ["discover example.io/v1/Job",
                     "GET /apis/example.io/v1/namespaces/team-a/jobs/train"]
