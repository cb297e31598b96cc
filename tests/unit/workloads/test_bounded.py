"""Untrusted definitions are evaluated under bounds; hostile ones end with a clear error.

Outcomes only (an error naming the bound, the caller alive, other kinds still resolving);
the bounds themselves are generous so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator

import pytest

from dispatcher.workloads.bounded import Bounds, DefinitionQuarantined, Evaluator
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import DefinitionError, EvaluationError

from .shapes import BATCHSET, BATCHSET_OBJ, edit

BOUNDS = Bounds(deadline_seconds=30, cpu_seconds=5, memory_mb=256, workers=1)
REDUCE = "reduce (" + ", ".join([".spec"] * 26) + ") as $x ([1]; . + .) | length"


def _with_replicas(path: str) -> str:
    def change(doc: dict[str, object]) -> None:
        child = doc["spec"]["structureDefinition"]["childComponents"][0]  # type: ignore[index]
        child["scaleDefinition"]["replicasPath"] = path
    return edit(BATCHSET, change)


@pytest.fixture
def evaluator() -> Iterator[Evaluator]:
    hostile = load_text(_with_replicas(REDUCE), source="hostile.yaml")
    catalog = Catalog.merged(Catalog.builtin(), Catalog(hostile))
    with Evaluator.for_catalog(catalog, bounds=BOUNDS) as evaluator:
        yield evaluator


def test_doubling_reduce_hits_the_memory_bound_and_is_quarantined(
        evaluator: Evaluator) -> None:
    with pytest.raises(DefinitionQuarantined) as caught:
        evaluator.resolve(BATCHSET_OBJ)
    assert caught.value.bound == "memory" and "quarantined" in str(caught.value)
    assert isinstance(caught.value, EvaluationError)
    assert "demo-batchset" in evaluator.quarantined()
    # later objects of that kind fail at once; the built-in kinds still resolve in-process
    with pytest.raises(DefinitionQuarantined):
        evaluator.demand(copy.deepcopy(BATCHSET_OBJ))
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    assert evaluator.resolve(job).demand.pods == 1


def test_untrusted_definition_that_behaves_resolves_like_in_process() -> None:
    catalog = Catalog(load_text(BATCHSET, source="ok.yaml"))
    with Evaluator.for_catalog(catalog, bounds=BOUNDS) as evaluator:
        assert not evaluator.is_trusted(catalog.definitions[0])
        bounded = evaluator.resolve(BATCHSET_OBJ).to_dict()
        assert bounded == catalog.resolve(BATCHSET_OBJ).to_dict()
        assert evaluator.status(BATCHSET_OBJ).status == bounded["status"]
        assert asyncio.run(evaluator.resolve_async(BATCHSET_OBJ)).to_dict() == bounded


def test_result_size_is_bounded() -> None:
    catalog = Catalog(load_text(BATCHSET, source="x.yaml"))
    tiny = Bounds(deadline_seconds=30, cpu_seconds=5, memory_mb=256, workers=1,
                  max_result_bytes=64)
    with Evaluator.for_catalog(catalog, bounds=tiny) as evaluator, \
            pytest.raises(DefinitionQuarantined) as caught:
        evaluator.resolve(BATCHSET_OBJ)  # its pod templates are more than 64 bytes
    assert caught.value.bound == "result size"


def test_string_repetition_by_literal_is_refused_at_load() -> None:
    with pytest.raises(DefinitionError, match="string repetition by literal counts"):
        load_text(_with_replicas('("x" * 1000000000) | length'), source="x.yaml")


# 10^8 iterations in constant memory: loop-free, yet minutes of CPU
SLOW = ("reduce (" + " | ".join(f"(1,2,3,4,5,6,7,8,9,10) as $v{i}" for i in range(8))
        + " | 1) as $x (0; . + 1)")


@pytest.mark.parametrize(("bounds", "bound"), [
    (Bounds(deadline_seconds=0.5, cpu_seconds=60, workers=1), "time"),
    (Bounds(deadline_seconds=60, cpu_seconds=1, workers=1), "cpu")])
def test_cpu_hog_is_stopped_by_the_deadline_or_the_cpu_limit(bounds: Bounds,
                                                             bound: str) -> None:
    catalog = Catalog(load_text(_with_replicas(SLOW), source="slow.yaml"))
    with Evaluator.for_catalog(catalog, bounds=bounds) as evaluator, \
            pytest.raises(DefinitionQuarantined) as caught:
        evaluator.resolve(BATCHSET_OBJ)
    assert caught.value.bound == bound
