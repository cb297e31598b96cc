"""The hygiene items of issue 24 (finding 6), on real apiservers with the controller
in-process.

Covered: a catalog change (a definition applied, then deleted) logs ``catalog.changed``
and no ``task.exited`` warning (the one-shot catalog-follow task is meant to end); a
Dispatch that was ``Resolved=False`` (a pod template that cannot be a Pod) and is placed
once its owner fixed it says ``Resolved=True``: the condition is the current resolution's,
not the last failure's; a member removed while its copy watches stream crashes nothing
(issue 35). (The invalid MemberCluster spec: test_member_spec.py; the doubled
"annotation" wording: tests/unit/control/core/test_parking.py.)
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from structlog.testing import capture_logs

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH
from dispatcher.kube.resources import KARTAS, ResourceRef
from tests import builders
from tests.integration.harness import Harness, eventually, running
from tests.integration.test_live_definitions import (
    JOBSETS,
    accepted,
    apply,
    copy_on_members,
    definition,
    dispatch_of,
    jobset,
    kubectl,
    standin_crd,
)

pytestmark = pytest.mark.integration
JOBS = ResourceRef(group="batch", version="v1", kind="Job", plural="jobs", namespaced=True)


def _follows(h: Harness) -> list[Any]:
    return [t for t in h.controller._tasks if t.get_name() == "catalog-follow"]


async def test_a_catalog_change_logs_no_task_warning(dev_fleet: FleetState) -> None:
    group = f"hygiene{uuid.uuid4().hex[:6]}.dispatcher.test"
    name = f"hygiene-{uuid.uuid4().hex[:6]}"
    with capture_logs() as logs:
        async with running(dev_fleet) as h:
            await standin_crd(h, group=group, kind="HygieneJob", plural="hygienejobs")
            try:
                apply(dev_fleet, definition(name, kind="HygieneJob", group=group))
                await eventually(lambda: accepted(h, KARTAS, name), what="accepted")

                async def swapped(present: bool) -> bool:
                    found = h.controller.live.current.find(f"{group}/v1", "HygieneJob")
                    return (found is not None) is present and all(
                        t.done() for t in _follows(h))
                await eventually(lambda: swapped(True), what="the new kind in the catalog")
            finally:
                kubectl(dev_fleet, "delete", f"kartas/{name}", "--ignore-not-found",
                        check=False)
            await eventually(lambda: swapped(False), what="the kind gone again")
    assert sum(e["event"] == "catalog.changed" for e in logs) >= 2
    exited = [e for e in logs if e["event"] == "task.exited"]
    assert exited == []
    assert not [e for e in logs if e["event"] == "task.crashed"]


async def test_a_fixed_template_placed_later_is_resolved_true(dev_fleet: FleetState) -> None:
    async with running(dev_fleet) as h:
        await h.hub.request("POST", JOBSETS.collection(h.namespace),
                            body=jobset("fixme", h.namespace, command=["sh", 7]))

        async def condition(status: str) -> dict[str, Any] | None:
            record = await dispatch_of(h, "fixme")
            for c in ((record or {}).get("status") or {}).get("conditions") or ():
                if c["type"] == "Resolved" and c["status"] == status:
                    return c  # type: ignore[no-any-return]
            return None
        await eventually(lambda: condition("False"), what="Resolved=False")
        fixed = jobset("fixme", h.namespace, command=["sh", "-c", "true"])
        await h.hub.request("PATCH", JOBSETS.item("fixme", h.namespace),
                            body={"spec": fixed["spec"]}, content_type=JSON_MERGE_PATCH)
        await eventually(lambda: copy_on_members(h, JOBSETS, "fixme"), what="the copy")
        resolved = await eventually(lambda: condition("True"), what="Resolved=True")
        assert resolved["reason"] == "Resolved" and resolved["message"] == ""


async def test_removing_a_member_while_its_copy_watches_stream_crashes_nothing(
        dev_fleet: FleetState) -> None:
    """Issue 35: deleting MemberClusters once crashed the controller (``RuntimeError:
    Connection closed.`` from a copy watch reading on the member's closed client). A
    member removed while its copy watches stream (one copy on it): the controller runs
    on, no task crashes, and the next workload is dispatched to the member left."""
    with capture_logs() as logs:
        async with running(dev_fleet) as h:
            first = builders.job("on-2", namespace=h.namespace, gpus=0)
            first["metadata"]["annotations"] = {"dispatcher.io/cluster": "member-2"}
            await h.hub.request("POST", JOBS.collection(h.namespace), body=first)
            await eventually(lambda: _copy_on(h, "on-2", "member-2"), what="a copy there")
            # what a MemberCluster's deletion runs (``Membership.on_member_clusters``)
            await h.controller.fleet.fleet._membership.remove("member-2")  # type: ignore[attr-defined]
            await h.hub.request("POST", JOBS.collection(h.namespace),
                                body=builders.job("after", namespace=h.namespace, gpus=0))
            await eventually(lambda: _copy_on(h, "after", "member-1"),
                             what="the next Job on member-1")
    assert not [e for e in logs if e["event"] in ("task.crashed", "controller.task_crashed")]


async def _copy_on(h: Harness, name: str, member: str) -> bool:
    return member in await copy_on_members(h, JOBS, name)
