"""One tenant's object cannot turn an untrusted definition against the others (finding 4).

Real apiservers, the controller in-process with its shipped bounds. A hub definition
(Karta) whose cost grows with the size of an annotation, quadratically: free on ordinary
objects, far past the 2 s CPU bound on one with a 4 KB annotation. Tenant A writes that
object: it is quarantined, alone (its Dispatch says ``Resolved=False``, reason
``Quarantined``, which bound), while tenant B's object of the same kind, and tenant A's
ordinary one, are dispatched, and the definition stays ``Accepted=True``. When A removes
the annotation (a new resourceVersion, the same generation), the object is evaluated
again and dispatched.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.kube.client import JSON_MERGE_PATCH
from dispatcher.kube.resources import KARTAS, ResourceRef
from tests.integration.harness import eventually, running
from tests.integration.test_live_definitions import (
    accepted,
    apply,
    copy_on_members,
    create_when_served,
    definition,
    kubectl,
    resolved_false,
    standin_crd,
    xgboostjob,
)

pytestmark = pytest.mark.integration

# Quadratic in the length of the ``load`` annotation (~0.6 s of CPU at 1,000 characters,
# ~10 s at 4,000 on this kind of host; the shipped CPU bound is 2 s).
COST = ('reduce ((.metadata.annotations.load // "" | explode[]) as $a | '
        '(.metadata.annotations.load // "" | explode[]) as $b | 1) as $x (0; . + 1)')


@pytest.fixture
def karta(dev_fleet: FleetState) -> Iterator[str]:
    name = f"costly-{uuid.uuid4().hex[:6]}"
    yield name
    kubectl(dev_fleet, "delete", f"kartas/{name}", "--ignore-not-found", "--wait=false",
            check=False)


async def test_an_object_over_the_bounds_quarantines_only_itself(
        dev_fleet: FleetState, karta: str) -> None:
    group = f"costly{uuid.uuid4().hex[:6]}.dispatcher.test"
    async with running(dev_fleet, tenants=1) as h:
        tenant_a, tenant_b = h.namespace, h.others[0]
        await standin_crd(h, group=group, kind="CostlyJob", plural="costlyjobs")
        ref = ResourceRef(group=group, version="v1", kind="CostlyJob", plural="costlyjobs",
                          namespaced=True)
        apply(dev_fleet, definition(
            karta, kind="CostlyJob", group=group,
            replicas_path=f"({COST}) as $cost | .spec.xgbReplicaSpecs | .[] | "
                          f"(.replicas // 1)"))
        condition = await eventually(lambda: accepted(h, KARTAS, karta), what="Accepted")
        assert condition["status"] == "True", condition

        def costly(name: str, namespace: str, load: int = 0) -> dict[str, object]:
            body = xgboostjob(name, namespace, kind="CostlyJob", api_version=f"{group}/v1")
            if load:
                body["metadata"]["annotations"] = {"load": "x" * load}
            return body

        await create_when_served(h, ref, costly("big", tenant_a, load=4096))
        await h.hub.request("POST", ref.collection(tenant_a), body=costly("plain", tenant_a))
        await h.hub.request("POST", ref.collection(tenant_b), body=costly("theirs", tenant_b))

        reason = await eventually(lambda: resolved_false(h, "big"),
                                  what="big: Resolved=False", within=90)
        assert reason["reason"] == "Quarantined", reason
        message = reason["message"]
        assert "quarantined" in message and f"karta/{karta}" in message, message
        assert ("cpu bound" in message or "time bound" in message), message
        assert "until the object changes" in message, message

        # only that object: B's object of the same kind, and A's ordinary one, dispatch
        landed = await eventually(lambda: copy_on_members(h, ref, "theirs", tenant_b),
                                  what="tenant B's object dispatched", within=60)
        assert len(landed) == 1
        await eventually(lambda: copy_on_members(h, ref, "plain", tenant_a),
                         what="tenant A's ordinary object dispatched", within=60)
        condition = await accepted(h, KARTAS, karta)
        assert condition is not None and condition["status"] == "True", condition
        assert h.controller.live.evaluator.quarantined() == {}
        assert await copy_on_members(h, ref, "big", tenant_a) == []
        live = h.controller.live.current.find(f"{group}/v1", "CostlyJob")
        assert live is not None
        big = await h.hub.request("GET", ref.item("big", tenant_a))
        assert h.controller.live.evaluator.object_quarantine(live, big) is not None

        # changed (annotation removed: same generation, new resourceVersion): evaluated
        # again and dispatched
        await h.hub.request("PATCH", ref.item("big", tenant_a), content_type=JSON_MERGE_PATCH,
                            body={"metadata": {"annotations": {"load": None}}})
        await eventually(lambda: copy_on_members(h, ref, "big", tenant_a),
                         what="big dispatched once changed", within=60)
