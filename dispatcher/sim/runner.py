"""One ``dispatcher simulate`` run: a stream replayed once per policy over fresh cores.

The thin layer between the command and the engine: builds the stream (scenario generator or
trace), runs each policy on its own fresh ``CoreBackend``, and assembles the report data that
``-o json`` prints and ``--report DIR`` writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from dispatcher.fleet.fleetfile import FleetSpec
from dispatcher.sim.cores import CoreBackend, resolver
from dispatcher.sim.engine import simulate
from dispatcher.sim.results import RunResult, SimWorkload
from dispatcher.sim.scenario import QueueSpec, Scenario
from dispatcher.sim.stream import build_stream

__all__ = ["Simulation", "run_policies", "run_scenario"]

PolicyProgress = Callable[[str, float], None]
"""Called with (policy, virtual seconds reached)."""


@dataclass(frozen=True, kw_only=True)
class Simulation:
    """All policy runs of one stream, plus what they were run on."""

    name: str
    source: str
    seed: int | None
    fleet: FleetSpec
    workloads: tuple[SimWorkload, ...]
    results: tuple[RunResult, ...]
    wall_seconds: float

    def summary(self) -> dict[str, Any]:
        """The document ``-o json`` prints and ``--report DIR`` writes as ``summary.json``."""
        nodes = sum(p.count for m in self.fleet.members for p in m.node_pools)
        gpus = sum(p.count * p.gpus for m in self.fleet.members for p in m.node_pools)
        kinds: dict[str, int] = {}
        for workload in self.workloads:
            kinds[workload.kind] = kinds.get(workload.kind, 0) + 1
        return {
            "scenario": self.name, "source": self.source, "seed": self.seed,
            "durationSeconds": self.results[0].duration if self.results else 0,
            "fleet": {"members": len(self.fleet.members), "nodes": nodes, "gpus": gpus},
            "workloads": len(self.workloads),
            "services": sum(1 for w in self.workloads if w.run_time is None),
            "kinds": dict(sorted(kinds.items())),
            "policies": [result.summary() for result in self.results],
            "wallSeconds": round(self.wall_seconds, 3),
        }


def run_policies(*, name: str, source: str, seed: int | None, fleet: FleetSpec,
                 workloads: Sequence[SimWorkload], policies: Sequence[str], duration: float | None,
                 queue: QueueSpec | None = None, sample_interval: float | None = None,
                 progress: PolicyProgress | None = None) -> Simulation:
    """Replay ``workloads`` once per policy, each on a fresh fleet of real cores."""
    started = time.perf_counter()
    results = []
    for policy in policies:
        callback = None
        if progress is not None:
            def callback(t: float, policy: str = policy) -> None:
                progress(policy, t)
        results.append(simulate(
            fleet=fleet, workloads=workloads, backend=CoreBackend(fleet), policy=policy,
            duration=duration, queue=queue, sample_interval=sample_interval,
            progress=callback))
    return Simulation(name=name, source=source, seed=seed, fleet=fleet,
                      workloads=tuple(workloads), results=tuple(results),
                      wall_seconds=time.perf_counter() - started)


def run_scenario(scenario: Scenario, *, policies: Sequence[str] | None = None,
                 progress: PolicyProgress | None = None) -> Simulation:
    """Build the scenario's stream with the real resolver and run every policy."""
    workloads = build_stream(scenario, resolve=resolver())
    return run_policies(
        name=scenario.name, source=scenario.source, seed=scenario.seed, fleet=scenario.fleet,
        workloads=workloads, policies=policies or scenario.policies,
        duration=scenario.duration, queue=scenario.queue,
        sample_interval=scenario.sample_interval, progress=progress)
