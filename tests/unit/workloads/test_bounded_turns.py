"""The bounded workers against other tenants: their priority, their turns, a busy host.

Real worker processes (``workloads.bounded``): the workers' nice value as the kernel reports
it in /proc; the order in which namespaces' evaluations finish with one worker; that the
event loop's default executor (which aiohttp uses for every request) stays free while the
pool is saturated; that a worker given no CPU is nobody's fault. Orders and states only,
never timings.
"""

from __future__ import annotations

import asyncio
import copy
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dispatcher.workloads.bounded import (
    Bounds,
    EvaluationUnavailable,
    Evaluator,
    ObjectQuarantined,
)
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.jqpool import nice_of

from .shapes import BATCHSET, BATCHSET_OBJ, edit

# Quadratic in the length of the ``load`` annotation: free on ordinary objects, about
# 0.6 s of CPU at 1,000 characters, far past a 2 s bound at 4,000.
COST = ('reduce ((.metadata.annotations.load // "" | explode[]) as $a | '
        '(.metadata.annotations.load // "" | explode[]) as $b | 1) as $x (0; . + 1)')
BOUNDS = Bounds(deadline_seconds=30, cpu_seconds=5, memory_mb=256, workers=1)


def _costly() -> str:
    def change(doc: dict[str, Any]) -> None:
        child = doc["spec"]["structureDefinition"]["childComponents"][0]
        child["scaleDefinition"]["replicasPath"] = \
            f"({COST}) as $cost | .spec.jobs[] | (.replicas // 1)"
    return edit(BATCHSET, change)


def _obj(name: str, namespace: str, *, load: int = 0) -> dict[str, Any]:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["metadata"] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                       "resourceVersion": "1", "annotations": {"load": "x" * load}}
    return obj


@pytest.fixture
def evaluator() -> Iterator[Evaluator]:
    catalog = Catalog(load_text(_costly(), source="costly.yaml"))
    with Evaluator.for_catalog(catalog, bounds=BOUNDS) as evaluator:
        yield evaluator


def test_workers_run_below_the_controllers_priority(evaluator: Evaluator) -> None:
    evaluator.resolve(_obj("x", "team-a"))
    pids = evaluator.worker_pids()
    assert len(pids) == 1
    mine = nice_of(os.getpid())
    assert mine is not None
    expected = min(mine + BOUNDS.nice, 19)
    assert nice_of(pids[0]) == expected > mine
    threads = list(Path(f"/proc/{pids[0]}/task").iterdir())
    for thread in threads:  # every thread of the worker, not just the one that asked
        fields = (thread / "stat").read_text().rsplit(")", 1)[1].split()
        assert int(fields[16]) == expected, thread


async def test_another_namespace_is_served_next_not_after_the_backlog(
        evaluator: Evaluator) -> None:
    """One worker; team-a queues five slow objects, then team-b one cheap object: team-b's
    finishes second (after the one already running), not sixth."""
    finished: list[str] = []

    async def resolve(obj: dict[str, Any]) -> None:
        await evaluator.resolve_async(obj)
        finished.append(f"{obj['metadata']['namespace']}/{obj['metadata']['name']}")

    slow = [asyncio.create_task(resolve(_obj(f"a{i}", "team-a", load=400)))
            for i in range(5)]
    await asyncio.sleep(0)  # team-a's requests are queued first
    cheap = asyncio.create_task(resolve(_obj("b0", "team-b")))
    await asyncio.gather(*slow, cheap)
    assert finished[:2] == ["team-a/a0", "team-b/b0"], finished
    assert sorted(finished[2:]) == [f"team-a/a{i}" for i in range(1, 5)]


async def test_a_saturated_pool_leaves_the_default_executor_free(
        evaluator: Evaluator) -> None:
    """Forty evaluations wait for one worker; a ``to_thread`` call (what aiohttp does for
    every request: netrc and proxy lookups) still runs at once. When each evaluation held a
    default-executor thread while it waited, it ran only after most of them."""
    tasks = [asyncio.create_task(evaluator.resolve_async(_obj(f"a{i}", "team-a", load=200)))
             for i in range(40)]
    await asyncio.sleep(0)
    assert await asyncio.to_thread(lambda: "ran") == "ran"
    done = sum(t.done() for t in tasks)
    await asyncio.gather(*tasks)
    assert done < 20, done


def test_a_worker_given_no_cpu_is_nobodys_fault() -> None:
    """A stopped worker (SIGSTOP: no CPU at all, as on a saturated host) passes its
    deadline without having computed: the evaluation is unavailable, nothing is
    quarantined, and the next call (a new worker) resolves."""
    catalog = Catalog(load_text(_costly(), source="costly.yaml"))
    quick = Bounds(deadline_seconds=0.2, starved_seconds=1.0, cpu_seconds=5, memory_mb=256,
                   workers=1)
    with Evaluator.for_catalog(catalog, bounds=quick) as evaluator:
        obj = _obj("x", "team-a")
        evaluator.resolve(obj)
        [pid] = evaluator.worker_pids()
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(EvaluationUnavailable, match="busy host"):
            evaluator.resolve(obj)
        definition = catalog.definitions[0]
        assert evaluator.object_quarantine(definition, obj) is None
        assert evaluator.quarantined() == {}
        assert evaluator.resolve(obj).demand.pods == 7


def test_an_object_over_the_bound_is_quarantined_and_its_neighbours_resolve() -> None:
    """The finding: one object (a 4 KB annotation under an expression that grows with it)
    breaks the CPU bound; it alone is quarantined, another namespace's object of the same
    kind resolves."""
    catalog = Catalog(load_text(_costly(), source="costly.yaml"))
    tight = Bounds(deadline_seconds=30, cpu_seconds=1, memory_mb=256, workers=1)
    with Evaluator.for_catalog(catalog, bounds=tight) as evaluator:
        with pytest.raises(ObjectQuarantined) as caught:
            evaluator.resolve(_obj("big", "team-a", load=4096))
        assert caught.value.bound == "cpu"
        assert evaluator.resolve(_obj("small", "team-b", load=40)).demand.pods == 7
        assert evaluator.quarantined() == {}
