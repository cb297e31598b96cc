"""The shell around the Pod Security checks a member's minor lacks: the hub namespace's
level is read only for such a member, once per ``ttl_s`` per namespace, the floor joined
(``control.planner.CopyPlanner._wanted``, ``control.namespaces.MemberNamespaces.required``).
The checks themselves: ``tests/unit/kube/test_podsecurity.py``, and the refusal of the
copy: ``tests/unit/control/core/test_copyplan.py``."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from dispatcher.control.core.copies import Rejection
from dispatcher.control.namespaces import MemberNamespaces
from dispatcher.control.planner import CopyPlanner
from dispatcher.control.settings import ControlSettings
from dispatcher.fleet.snapshot import MemberSnapshot
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Forbidden
from dispatcher.kube.podsecurity import Policy
from tests.unit.placement.builders import cluster

ENFORCE = "pod-security.kubernetes.io/enforce"


class Hub:
    """The hub's namespace reads, counted; ``refuse`` answers 403."""

    def __init__(self, labels: dict[str, str], *, refuse: bool = False) -> None:
        self.labels, self.refuse, self.reads = labels, refuse, 0

    async def request(self, method: str, path: str, **_: Any) -> dict[str, Any]:
        self.reads += 1
        if self.refuse:
            raise Forbidden("namespaces is forbidden", status=403, reason="Forbidden")
        return {"metadata": {"name": path.rsplit("/", 1)[-1], "labels": self.labels}}


def test_the_hub_level_is_read_once_per_ttl_and_joined_with_the_floor() -> None:
    clock = [0.0]
    hub = Hub({ENFORCE: "restricted", f"{ENFORCE}-version": "v1.30"})
    spaces = MemberNamespaces(settings=ControlSettings(), hub=cast(KubeClient, hub),
                              monotonic=lambda: clock[0], ttl_s=30.0)

    async def run() -> list[Policy | Rejection]:
        out = [await spaces.required("m1", "team-a"), await spaces.required("m2", "team-a")]
        clock[0] = 31.0
        out.append(await spaces.required("m1", "team-a"))
        return out

    got = asyncio.run(run())
    assert got == [Policy("restricted")] * 3  # the baseline:latest floor outranks v1.30
    assert hub.reads == 2
    refused = MemberNamespaces(settings=ControlSettings(),
                               hub=cast(KubeClient, Hub({}, refuse=True)),
                               monotonic=lambda: 0.0)
    answer = asyncio.run(refused.required("m1", "team-a"))
    assert isinstance(answer, Rejection) and answer.reason == "HubNamespaceUnreadable"


def test_the_planner_asks_only_for_a_member_whose_minor_lacks_a_check() -> None:
    asked: list[tuple[str, str]] = []

    async def wanted(member: str, namespace: str) -> Policy:
        asked.append((member, namespace))
        return Policy("baseline")

    planner = CopyPlanner(settings=ControlSettings(), live=cast(Any, None),
                          resolutions=cast(Any, None), fleet=cast(Any, None),
                          copies=cast(Any, None), pod_security=wanted)

    def at(version: str | None) -> MemberSnapshot:
        return MemberSnapshot(name="m", capacity=cluster({"name": "n0", "gpus": 8}),
                              kubernetes_version=version)

    async def run() -> list[Policy | Rejection | None]:
        return [await planner._wanted("old", "ns", at("v1.33.5")),
                await planner._wanted("new", "ns", at("v1.34.0")),
                await planner._wanted("unknown", "ns", at(None)),
                await planner._wanted("gone", "ns", None)]

    assert asyncio.run(run()) == [Policy("baseline"), None, None, None]
    assert asked == [("old", "ns")]
