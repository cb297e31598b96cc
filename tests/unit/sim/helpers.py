"""Small builders shared by the sim tests: fleets and workloads without YAML."""

from __future__ import annotations

from typing import Any

from dispatcher.fleet.fleetfile import FleetSpec, parse_fleet
from dispatcher.sim.results import SimWorkload
from dispatcher.workloads.demand import Demand, Gang, PodShape


def fleet(members: dict[str, list[tuple[int, int]]] | dict[str, Any]) -> FleetSpec:
    """``{"a": [(nodes, gpus_per_node), ...]}`` -> a fleet (pools named p0, p1, ...)."""
    return parse_fleet({"members": [
        {"name": name, "nodePools": [{"name": f"p{i}", "count": count, "gpus": gpus}
                                     for i, (count, gpus) in enumerate(pools)]}
        for name, pools in members.items()]})


def demand(*gangs: tuple[int, int]) -> Demand:
    """One gang per ``(pods, gpus_per_pod)``."""
    return Demand(gangs=tuple(
        Gang(name=f"g{i}", pods=pods, min_pods=pods,
             pod_shapes=(PodShape(count=pods, gpus=gpus),))
        for i, (pods, gpus) in enumerate(gangs)))


def workload(uid: str, *, at: float, run: float | None, need: Demand,
             priority: int = 0, annotations: dict[str, str] | None = None) -> SimWorkload:
    return SimWorkload(uid=uid, namespace="default", name=uid, kind="Job",
                       api_version="batch/v1", template=uid, arrival=at, run_time=run,
                       priority=priority, demand=need,
                       annotations=tuple(sorted((annotations or {}).items())))
