"""Members that queue (``fleet.queueing``), on real apiservers: a copy lands in the queue its
member declares, and a member that runs no queueing system never gets the hub's queue label.

The dev fleet's members run no Kueue: each is declared here (``queueing`` of a static
member), the copy's labels are read on the member, and the MemberCluster CRD, as the hub
serves it, takes ``spec.queueing`` and refuses a system it does not know.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.devfleet.controlplane import FleetState
from dispatcher.fleet.queueing import KUEUE, NONE, QUEUE_LABEL, Queueing
from dispatcher.kube import resources
from dispatcher.kube.client import KubeClient
from dispatcher.kube.errors import Invalid
from tests.builders import jobset
from tests.integration.harness import eventually, get_or_none, running
from tests.integration.test_real_operators import JOBSETS

pytestmark = pytest.mark.integration


async def test_a_copy_carries_the_queue_its_member_declares(dev_fleet: FleetState) -> None:
    declared = {"member-1": Queueing(system=KUEUE, local_queue="team-gpu"),
                "member-2": Queueing(system=NONE)}
    async with running(dev_fleet, queueing=declared) as h:
        for member in declared:
            body = jobset(f"q-{member}", namespace=h.namespace, gpus=0,
                          annotations={"dispatcher.io/cluster": member})
            body["metadata"]["labels"] = {QUEUE_LABEL: "hub-queue", "team": "a"}
            await h.hub.request("POST", JOBSETS.collection(h.namespace), body=body)

        async def copy_on(member: str) -> dict[str, Any] | None:
            return await get_or_none(h.members[member],
                                     JOBSETS.item(f"q-{member}", h.namespace))

        queued = await eventually(lambda: copy_on("member-1"), what="the copy on member-1")
        assert queued["metadata"]["labels"][QUEUE_LABEL] == "team-gpu"
        plain = await eventually(lambda: copy_on("member-2"), what="the copy on member-2")
        assert QUEUE_LABEL not in plain["metadata"]["labels"]
        assert plain["metadata"]["labels"]["team"] == "a"
        snapshot = h.controller.reconciler.fleet.snapshot("member-1")
        assert snapshot is not None and snapshot.queueing.describe() == "kueue:team-gpu"


async def test_the_membercluster_crd_takes_queueing_and_refuses_an_unknown_system(
        dev_fleet: FleetState) -> None:
    config = yaml.safe_load(Path(dev_fleet.cluster("hub").kubeconfig).read_text())
    async with await KubeClient.from_kubeconfig(config, name="hub") as hub:
        name = f"queueing-{uuid.uuid4().hex[:6]}"
        body = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "MemberCluster",
                "metadata": {"name": name},
                "spec": {"kubeconfigSecretRef": {"namespace": "dispatcher-system",
                                                 "name": "absent"}, "queueing": {
                    "localQueues": {"team-a": "team-a-gpu"}, "localQueue": "shared"}}}
        created = await hub.request("POST", resources.MEMBER_CLUSTERS.collection(), body=body)
        try:
            assert created["spec"]["queueing"]["system"] == "auto"  # the CRD's default
            bad = {**body, "metadata": {"name": f"{name}-bad"},
                   "spec": {**body["spec"], "queueing": {"system": "slurm"}}}
            with pytest.raises(Invalid, match="system"):
                await hub.request("POST", resources.MEMBER_CLUSTERS.collection(), body=bad)
        finally:
            await hub.request("DELETE", resources.MEMBER_CLUSTERS.item(name))
