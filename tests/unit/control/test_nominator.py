"""``control.nominator.Nominator``'s bookkeeping of the hub's Kueue objects, on plain data
(the watches and the writes run against real apiservers in
tests/integration/test_multikueue_dispatcher.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from dispatcher.control.catalog import LiveCatalog
from dispatcher.control.core.record import parse_time
from dispatcher.control.nominator import CHECKS, CONFIGS, WORKLOADS, Nominator
from dispatcher.control.settings import ControlSettings
from dispatcher.kube.errors import Unreachable
from dispatcher.kube.resources import ResourceRef
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.kueueworkload import KueueWorkload
from tests.unit.control.test_reconcile import JOBS, StubFleet
from tests.unit.workloads.test_kueueworkload import workload


def nominator(namespaces: tuple[str, ...] = ("team-a", "team-b")) -> Nominator:
    return Nominator(hub=None, fleet=StubFleet([]),  # type: ignore[arg-type]
                     live=LiveCatalog(Catalog.builtin()),
                     settings=ControlSettings(namespaces=namespaces, record_events=False),
                     clock=lambda: 0.0)


def in_namespace(uid: str, namespace: str) -> dict[str, Any]:
    obj = workload()
    obj["metadata"].update(uid=uid, namespace=namespace)
    return obj


def test_a_relist_of_one_namespace_keeps_the_other_namespaces_workloads() -> None:
    async def relists() -> None:
        n = nominator()
        n._relist(WORKLOADS, [in_namespace("a1", "team-a")], "team-a")
        n._relist(WORKLOADS, [in_namespace("b1", "team-b")], "team-b")
        n._relist(WORKLOADS, [in_namespace("a2", "team-a")], "team-a")  # a1 went, b1 stays
        assert set(n.workloads) == {"a2", "b1"}
        n._relist(WORKLOADS, [], "")  # watching every namespace: a relist is all of them
        assert n.workloads == {}
        await n.workers.stop()  # the kicks' reconciles (no checks known: nothing to do)

    asyncio.run(relists())


def test_which_checks_are_multikueues_and_their_workers() -> None:
    n = nominator()
    n._relist(CHECKS, [
        {"metadata": {"name": "mk"}, "spec": {
            "controllerName": "kueue.x-k8s.io/multikueue",
            "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                           "name": "cfg"}}},
        {"metadata": {"name": "prov"}, "spec": {
            "controllerName": "kueue.x-k8s.io/provisioning-request"}}], "")
    n._relist(CONFIGS, [{"metadata": {"name": "cfg"},
                         "spec": {"clusters": ["member-1", "member-2"]}}], "")
    assert n._checks == {"mk": "cfg"}
    assert n._configs == {"cfg": ("member-1", "member-2")}
    n._apply(CHECKS, "DELETED", {"metadata": {"name": "mk"}})
    assert n._checks == {}


class _Discovery:
    async def resource(self, api_version: str, kind: str) -> ResourceRef | None:
        return JOBS if (api_version, kind) == ("batch/v1", "Job") else None


class _Hub:
    """The hub as ``Nominator._job`` reads it: discovery, and GETs counted."""

    def __init__(self, job: dict[str, Any] | None) -> None:
        self.discovery, self.job, self.gets = _Discovery(), job, 0

    async def request(self, method: str, path: str, **_: Any) -> Any:
        self.gets += 1
        if self.job is None:
            raise Unreachable("hub: down")
        return self.job


def test_what_a_workload_asks_is_read_once_unless_its_job_could_not_be_read() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job",
           "metadata": {"name": "train", "namespace": "team-a", "uid": "j"},
           "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
               "restartPolicy": "Never", "containers": [{
                   "name": "c", "image": "x",
                   "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}}

    async def twice(hub: _Hub) -> list[Any]:
        n = nominator()
        n.hub = hub  # type: ignore[assignment]
        obj = workload()
        wl = KueueWorkload.of(obj, frozenset(), parse_time)
        out = [await n._demand(obj, wl), await n._demand(obj, wl)]
        n.live.close()
        return out

    read = _Hub(job)
    first, again = asyncio.run(twice(read))
    assert read.gets == 1 and first == again and first[0].gpus == 8  # the job's own gangs
    down = _Hub(None)
    first, _ = asyncio.run(twice(down))
    assert down.gets == 2  # the pod sets stood in, and the job is asked for again
    assert first[0].gpus == 8 and first[1:3] == ("batch/v1", "Job")
