"""The real cores behind the simulated fleet: capacity model, placement engine, resolver.

This is the only sim module that knows the other packages' APIs (the adapter the brief asks
for). Each simulated member is a real ``fleet.capacity.ClusterCapacity`` fed the member's
real ``v1.Node`` objects (``fleetfile.node_manifests``) and, as workloads start and finish,
real ``v1.Pod`` objects bound to the chosen nodes, the same events a watch delivers. Decisions
come from the controller's ``control.core.placing.place_ask`` over ``MemberSnapshot``s of those
models (``sim.engine``); ``choice`` turns one into the pods to bind.

Three capacity views are kept per member (see ``sim.backend.View``): ``live`` sees every
running pod, ``durable`` only pods of services (what stays once batch jobs end; used to pick
a member to reserve for a starving workload), ``empty`` none (can a workload ever run here?).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatcher.fleet.capacity import ClusterCapacity
from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.placement.engine import POLICIES, decide
from dispatcher.placement.model import (
    Decision,
    MemberSnapshot,
    NodeGrant,
    PlacementError,
    PlacementRequest,
)
from dispatcher.placement.offline import fleet_snapshots
from dispatcher.sim.backend import Choice, View
from dispatcher.sim.stream import Resolver
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.podspec import GPU_RESOURCE

__all__ = ["CoreBackend", "choice", "policies", "resolver"]


def _pod(uid: str, index: int, node: str, gpus: int) -> dict[str, Any]:
    """A bound, running ``v1.Pod`` holding ``gpus`` on ``node`` (what a watch would show)."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"namespace": "sim", "name": f"{uid}-{index}"},
            "spec": {"nodeName": node, "containers": [
                {"name": "main", "resources": {"limits": {GPU_RESOURCE: gpus}}}]},
            "status": {"phase": "Running"}}


def choice(decision: Decision) -> Choice:
    """The chosen member of ``decision`` and, per pod, its node and GPUs."""
    assert decision.chosen is not None
    score = next((v.score for v in decision.verdicts if v.member == decision.chosen), None)
    return Choice(member=decision.chosen, pods=_pods(decision.assignment), score=score or 0.0)


def _pods(grants: tuple[NodeGrant, ...]) -> tuple[tuple[str, int], ...]:
    """Per pod (node, GPUs) from per-node grants: a node's GPUs split over its pods as evenly
    as whole GPUs allow (only the node total matters to capacity)."""
    pods: list[tuple[str, int]] = []
    for grant in grants:
        share, extra = divmod(grant.gpus, grant.pods) if grant.pods else (grant.gpus, 0)
        count = max(grant.pods, 1)
        pods.extend((grant.node, share + (1 if i < extra else 0)) for i in range(count))
    return tuple(pods)


class CoreBackend:
    """``sim.backend.Backend`` over the real capacity model and placement engine."""

    def __init__(self, fleet: FleetSpec) -> None:
        self._views: dict[View, dict[str, ClusterCapacity]] = {}
        self._snapshots: dict[View, tuple[MemberSnapshot, ...]] = {}
        for view in ("live", "durable", "empty"):
            snapshots = tuple(fleet_snapshots(fleet))
            self._views[view] = {s.name: s.capacity for s in snapshots}
            self._snapshots[view] = snapshots
        self._bound: dict[str, tuple[str, list[str], bool]] = {}

    def members(self, view: View = "live") -> tuple[MemberSnapshot, ...]:
        return self._snapshots[view]

    def fitting(self, request: PlacementRequest) -> frozenset[str]:
        try:
            decision = decide(self._snapshots["live"], request)
        except PlacementError:
            return frozenset()
        return frozenset(v.member for v in decision.verdicts if v.feasible)

    def bind(self, *, uid: str, choice: Choice, durable: bool) -> None:
        keys: list[str] = []
        views: list[View] = ["live", "durable"] if durable else ["live"]
        for index, (node, gpus) in enumerate(choice.pods):
            pod = _pod(uid, index, node, gpus)
            for view in views:
                self._views[view][choice.member].upsert_pod(pod)
            keys.append(f"sim/{uid}-{index}")
        self._bound[uid] = (choice.member, keys, durable)

    def release(self, *, uid: str) -> None:
        member, keys, durable = self._bound.pop(uid)
        views: list[View] = ["live", "durable"] if durable else ["live"]
        for key in keys:
            for view in views:
                self._views[view][member].delete_pod(key)

    def capacity(self, member: str, *, view: View = "live") -> ClusterCapacity:
        """The capacity model of one member (tests compare it with the ledger)."""
        return self._views[view][member]


def policies() -> tuple[str, ...]:
    """Scoring policies the placement engine knows."""
    return POLICIES


def resolver(catalog: Catalog | None = None) -> Resolver:
    """manifest -> Demand through the workload engine (default: the built-in catalog).

    Workload errors (no definition for the kind, a broken object) become ValueError, which
    the stream builder reports with the scenario key of the manifest.
    """
    loaded = catalog if catalog is not None else Catalog.builtin()

    def resolve(manifest: Mapping[str, Any]) -> Demand:
        try:
            return loaded.resolve(manifest).demand
        except WorkloadError as exc:
            raise ValueError(str(exc)) from exc

    return resolve
