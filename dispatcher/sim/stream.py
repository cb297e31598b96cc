"""The workload stream of a scenario: explicit entries plus generated arrivals, resolved.

Generated arrivals are a Poisson process (exponential gaps at the scenario's rate), each
drawing a workload type from the mix by weight and a run time from that type's distribution,
all from one ``random.Random(seed)``: the same scenario always yields the same stream, and
every policy of a run replays that identical stream. Each distinct manifest is resolved once
through the real workload engine (the same definition gives the same demand for every copy).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dispatcher.control.core.names import PREFIX
from dispatcher.sim.results import SimWorkload
from dispatcher.sim.scenario import Scenario, ScenarioError
from dispatcher.workloads.demand import Demand
from dispatcher.workloads.trace import TraceWorkload

__all__ = ["Resolver", "annotations_of", "build_stream", "stream_from_trace"]

Resolver = Callable[[Mapping[str, Any]], Demand]
"""Turns a manifest into its demand (the real workload engine, via ``sim.cores``); raises
ValueError with a readable message when the manifest cannot be resolved."""


def annotations_of(manifest: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """The manifest's ``dispatcher.io/*`` annotations, sorted (none when it has none)."""
    meta = manifest.get("metadata")
    annotations = meta.get("annotations") if isinstance(meta, Mapping) else None
    if not isinstance(annotations, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in annotations.items()
                        if str(k).startswith(PREFIX) and v is not None))


def _meta(manifest: Mapping[str, Any]) -> tuple[str, str]:
    meta = manifest.get("metadata") or {}
    if not isinstance(meta, Mapping):
        meta = {}
    return str(meta.get("namespace") or "default"), str(meta.get("name") or "workload")


def build_stream(scenario: Scenario, *, resolve: Resolver) -> list[SimWorkload]:
    """Every workload of the scenario in arrival order, with deterministic uids."""
    cache: dict[int, Demand] = {}

    def demand_of(manifest: Mapping[str, Any], where: str) -> Demand:
        key = id(manifest)
        if key not in cache:
            try:
                cache[key] = resolve(manifest)
            except ValueError as exc:
                raise ScenarioError(f"{where}: cannot resolve {manifest.get('kind')}: "
                                    f"{exc}") from None
        return cache[key]

    items: list[tuple[float, int, SimWorkload]] = []
    for i, entry in enumerate(scenario.workloads):
        namespace, name = _meta(entry.manifest)
        for copy in range(entry.count):
            at = entry.at + copy * entry.every
            items.append((at, len(items), SimWorkload(
                uid=f"w{i:06d}" if entry.count == 1 else f"w{i:06d}-{copy:06d}",
                namespace=namespace, name=name if entry.count == 1 else f"{name}-{copy}",
                kind=str(entry.manifest["kind"]),
                api_version=str(entry.manifest["apiVersion"]), template=name, arrival=at,
                run_time=entry.run_time, priority=entry.priority,
                annotations=annotations_of(entry.manifest),
                demand=demand_of(entry.manifest, entry.where or f"workloads[{i}]"))))
    generator = scenario.generator
    if generator is not None:
        rng = random.Random(scenario.seed)
        weights = [mix.weight for mix in generator.mix]
        until = min(generator.until if generator.until is not None else scenario.duration,
                    scenario.duration)
        counts: dict[str, int] = {}
        annotations = [annotations_of(mix.manifest) for mix in generator.mix]
        t, n = 0.0, 0
        while generator.count is None or n < generator.count:
            t += rng.expovariate(generator.rate)
            if t > until:
                break
            index = rng.choices(range(len(generator.mix)), weights=weights)[0]
            mix = generator.mix[index]
            run_time = None if mix.run_time is None else mix.run_time.sample(rng)
            counts[mix.name] = counts.get(mix.name, 0) + 1
            namespace, _ = _meta(mix.manifest)
            items.append((t, len(items), SimWorkload(
                uid=f"g{n:06d}", namespace=namespace, name=f"{mix.name}-{counts[mix.name]}",
                kind=str(mix.manifest["kind"]), api_version=str(mix.manifest["apiVersion"]),
                template=mix.name, arrival=t, run_time=run_time, priority=mix.priority,
                annotations=annotations[index],
                demand=demand_of(mix.manifest,
                                 f"{scenario.source}: generator.mix[{index}]"))))
            n += 1
    items.sort(key=lambda item: (item[0], item[1]))
    return [workload for _, _, workload in items]


def stream_from_trace(trace: Sequence[TraceWorkload], *,
                      default_run_time: float | None = None) -> list[SimWorkload]:
    """Replayed arrivals; a workload with no recorded end runs ``default_run_time`` (None:
    until the end)."""
    return [SimWorkload(
        uid=item.uid, namespace=item.namespace, name=item.name, kind=item.kind,
        api_version=item.api_version, template=item.definition or item.kind,
        arrival=item.at,
        run_time=(item.end - item.at) if item.end is not None else default_run_time,
        priority=item.priority, demand=item.demand,
        annotations=annotations_of(item.manifest or {})) for item in trace]
