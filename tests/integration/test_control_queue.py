"""The fair queue on real apiservers: one tenant's impossible workload, junk priority and
backlog never hold another tenant's workloads.

Two watched hub namespaces, a controller whose backfill limit is 0 (any workload waiting
for capacity would hold back every later one of its namespace at once, the harshest
setting). Tenant A submits a JobSet of 1,000 x 8 GPUs with priority 1000000000 (more than
every member), one with a junk priority, and small ones; tenant B submits small ones.
Checked: the impossible one is Pending with reason Unplaceable and the reason, the junk
one InvalidAnnotation (and dispatches once fixed), and every small one of both tenants is
dispatched. Left out: figures (benchmarks, ``dispatcher simulate``).
"""

from __future__ import annotations

import asyncio
from types import MappingProxyType
from typing import Any

import pytest

from dispatcher.control.core.priority import PriorityPolicy
from dispatcher.control.core.record import decision_of
from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH
from dispatcher.kube.resources import DISPATCHES
from tests.builders import jobset
from tests.integration.harness import Harness, eventually, get_or_none, running
from tests.integration.test_control_dispatch import JOBSETS

pytestmark = pytest.mark.integration

SMALL = 8  # per tenant: 16 x 1 GPU fit the fleet several times over


async def placed_condition(h: Harness, namespace: str, name: str) -> dict[str, Any] | None:
    record = await get_or_none(h.hub, DISPATCHES.item(f"jobset-{name}", namespace))
    conditions = ((record or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Placed"), None)


async def dispatched(h: Harness, namespace: str, names: list[str]) -> list[str]:
    """Names among ``names`` whose Dispatch records a member."""
    done = []
    for name in names:
        record = await get_or_none(h.hub, DISPATCHES.item(f"jobset-{name}", namespace))
        if record is not None and decision_of(record).get("cluster"):
            done.append(name)
    return done


async def test_one_tenant_never_stalls_another(dev_fleet: FleetState) -> None:
    policy = PriorityPolicy(max_by_namespace=MappingProxyType({}))
    async with running(dev_fleet, tenants=1,
                       changes={"backfill_limit": 0, "priority": policy}) as h:
        team_a, team_b = h.namespace, h.others[0]
        await h.hub.request("POST", JOBSETS.collection(team_a), body=jobset(
            "escape", namespace=team_a, replicas=1000, gpus=8,
            annotations={"dispatcher.io/priority": "1000000000"}))
        await h.hub.request("POST", JOBSETS.collection(team_a), body=jobset(
            "junk", namespace=team_a, replicas=1, gpus=1,
            annotations={"dispatcher.io/priority": "9" * 4000}))
        smalls = [f"small-{i}" for i in range(SMALL)]
        posts = [h.hub.request("POST", JOBSETS.collection(ns),
                               body=jobset(name, namespace=ns, replicas=1, gpus=1))
                 for ns in (team_a, team_b) for name in smalls]
        await asyncio.gather(*posts)

        async def all_dispatched() -> bool:
            return (await dispatched(h, team_b, smalls) == smalls
                    and await dispatched(h, team_a, smalls) == smalls)

        await eventually(all_dispatched, what="every small workload of both tenants")

        async def unplaceable() -> dict[str, Any] | None:
            condition = await placed_condition(h, team_a, "escape")
            return condition if (condition or {}).get("reason") == "Unplaceable" else None

        condition = await eventually(unplaceable, what="escape Unplaceable")
        assert "even with every GPU free" in condition["message"]
        assert "member-1" in condition["message"] and "member-2" in condition["message"]
        assert h.controller.queue.gate(
            next(e for e, _ in h.controller.queue.parked() if e.name.endswith("/escape"))
        ) is None

        async def invalid() -> dict[str, Any] | None:
            condition = await placed_condition(h, team_a, "junk")
            return condition if (condition or {}).get("reason") == "InvalidAnnotation" \
                else None

        condition = await eventually(invalid, what="junk InvalidAnnotation")
        assert "not dispatched until it is fixed" in condition["message"]
        assert len(condition["message"]) < 500
        await h.hub.request("PATCH", JOBSETS.item("junk", team_a),
                            body={"metadata": {"annotations": {"dispatcher.io/priority": "5"}}},
                            content_type=JSON_MERGE_PATCH)
        await eventually(lambda: dispatched(h, team_a, ["junk"]), what="junk fixed")
