"""Untrusted definitions are evaluated under bounds; hostile ones end with a clear error.

Outcomes only (an error naming the bound, the caller alive, other kinds still resolving,
which object or definition is quarantined, the order evaluations finish in, the workers'
priority as the kernel reports it); the bounds themselves are generous so nothing here
depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator

import pytest

from dispatcher.workloads.bounded import (
    BoundExceeded,
    Bounds,
    DefinitionQuarantined,
    Evaluator,
    ObjectQuarantined,
)
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import DefinitionError, EvaluationError, MutationError
from dispatcher.workloads.mutate import mutate_pods, pod_templates
from dispatcher.workloads.paths import in_process, strip_server_set

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


def _obj(name: str = "train", namespace: str = "team-a", version: str = "1"
         ) -> dict[str, object]:
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["metadata"] = {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                       "resourceVersion": version}
    return obj


def test_a_bound_broken_on_one_object_quarantines_that_object_only(
        evaluator: Evaluator) -> None:
    with pytest.raises(ObjectQuarantined) as caught:
        evaluator.resolve(_obj())
    assert caught.value.bound == "memory" and "object is quarantined" in str(caught.value)
    assert isinstance(caught.value, EvaluationError)
    assert evaluator.quarantined() == {}  # the definition is not
    assert evaluator.worker_pids() == []  # the worker that broke the bound is gone
    # the same object at the same version fails at once: no worker is started for it
    with pytest.raises(ObjectQuarantined):
        evaluator.demand(_obj())
    assert evaluator.worker_pids() == []
    definition = evaluator.catalog.require(_obj())
    assert evaluator.object_quarantine(definition, _obj()) == \
        "memory: libjq could not allocate within 256 MB"
    assert evaluator.object_quarantine(definition, _obj(version="2")) is None
    # changed (a new resourceVersion): evaluated again, once (and breaks the bound again)
    with pytest.raises(ObjectQuarantined):
        evaluator.resolve(_obj(version="2"))
    # the built-in kinds still resolve in-process
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
    assert evaluator.resolve(job).demand.pods == 1


def test_the_definition_is_quarantined_after_objects_of_two_namespaces(
        evaluator: Evaluator) -> None:
    """Default rule: 3 objects from 2 namespaces. One tenant's objects, however many,
    never switch the definition off; the first hit from a second namespace that makes
    three objects does."""
    for name in ("a1", "a2", "a3"):
        with pytest.raises(ObjectQuarantined):
            evaluator.resolve(_obj(name, "team-a"))
    with pytest.raises(ObjectQuarantined):  # the same object changed is one object
        evaluator.resolve(_obj("a1", "team-a", version="9"))
    assert evaluator.quarantined() == {}
    with pytest.raises(DefinitionQuarantined) as caught:
        evaluator.resolve(_obj("b1", "team-b"))
    assert caught.value.bound == "memory" and "definition quarantined" in str(caught.value)
    assert list(evaluator.quarantined()) == ["demo-batchset"]
    with pytest.raises(DefinitionQuarantined):  # everyone's, at once, from now on
        evaluator.status(_obj("b2", "team-b"))
    assert evaluator.worker_pids() == []


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
            pytest.raises(BoundExceeded) as caught:
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
            pytest.raises(BoundExceeded) as caught:
        evaluator.resolve(BATCHSET_OBJ)
    assert caught.value.bound == bound


# Copy building (docs/definitions.md §6, §3.5): the jq ``path()`` of an untrusted
# definition's paths runs in the bounded workers too. On ``null`` these expressions
# iterate nothing (the load-time path check stays cheap); on BATCHSET_OBJ (two jobs) one
# runs 2 x 10^8 iterations, the other doubles an array 52 times.
SLOW_ON_DATA = ("reduce (.spec.jobs[]? | " + " | ".join(
    f"(1,2,3,4,5,6,7,8,9,10) as $v{i}" for i in range(8)) + " | 1) as $x (0; . + 1)")
DOUBLING_ON_DATA = ("reduce (" + ", ".join([".spec.jobs[]?"] * 26)
                    + ") as $x ([1]; . + .) | length")


def _server_set(condition: str) -> str:
    return edit(BATCHSET, lambda d: d["spec"].update(copyDefinition={"serverSetPaths": [
        f"select(({condition}) > -1) | .spec.generated"]}))


def _template_path(condition: str) -> str:
    def change(doc: dict[str, object]) -> None:
        child = doc["spec"]["structureDefinition"]["childComponents"][0]  # type: ignore[index]
        child["specDefinition"]["podTemplateSpecPath"] = (
            f". as $root | .spec.jobs[] | select(($root | {condition}) > -1)"
            " | .template.spec.template")
    return edit(BATCHSET, change)


@pytest.mark.parametrize(("text", "bounds", "bound"), [
    (_server_set(SLOW_ON_DATA), Bounds(deadline_seconds=0.5, cpu_seconds=60, workers=1),
     "time"),
    (_server_set(DOUBLING_ON_DATA), BOUNDS, "memory"),
    (_template_path(DOUBLING_ON_DATA), BOUNDS, "memory")])
def test_hostile_path_in_copy_building_is_bounded_and_quarantined(
        text: str, bounds: Bounds, bound: str) -> None:
    """build_copy (server-set removal, then pod mutation) through the evaluator's locator:
    the hostile expression ends in its worker; this process goes on."""
    from dispatcher.control.core.copies import build_copy

    hostile = load_text(text, source="hostile.yaml")[0]
    catalog = Catalog.merged(Catalog.builtin(), Catalog([hostile]))
    obj = _obj()
    with Evaluator.for_catalog(catalog, bounds=bounds) as evaluator:
        with pytest.raises(ObjectQuarantined) as caught:
            build_copy(obj, hub_id="hub", definition=hostile,
                       locate=evaluator.locator(hostile, subject=obj))
        assert caught.value.bound == bound
        assert evaluator.object_quarantine(hostile, obj) is not None
        assert evaluator.quarantined() == {}
        with pytest.raises(ObjectQuarantined):  # at once, no second evaluation
            mutate_pods(obj, hostile, labels={"a": "b"},
                        locate=evaluator.locator(hostile, subject=obj))
        assert evaluator.worker_pids() == []
        job_def = catalog.find("batch/v1", "Job")
        assert job_def is not None and evaluator.locator(job_def) is in_process
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
        out = mutate_pods(job, job_def, labels={"a": "b"})
        assert out["spec"]["template"]["metadata"]["labels"] == {"a": "b"}


def test_untrusted_copy_building_in_workers_equals_in_process() -> None:
    """A well-behaved untrusted definition: the bounded locator writes the same copy, and
    a path that cannot be written is the same MutationError."""
    definition = load_text(_server_set("1"), source="ok.yaml")[0]
    obj = copy.deepcopy(BATCHSET_OBJ)
    obj["spec"]["generated"] = "by the hub"
    with Evaluator.for_catalog(Catalog([definition]), bounds=BOUNDS) as evaluator:
        locate = evaluator.locator(definition)
        assert locate is not in_process
        kwargs: dict[str, object] = {"labels": {"x": "y"}, "scheduler_name": "kai"}
        bounded = mutate_pods(obj, definition, locate=locate, **kwargs)  # type: ignore[arg-type]
        assert bounded == mutate_pods(obj, definition, **kwargs)  # type: ignore[arg-type]
        assert [t.metadata for t in pod_templates(bounded, definition, locate=locate)] == [
            {"labels": {"x": "y"}}, {"labels": {"x": "y"}}]
        stripped = copy.deepcopy(obj)
        strip_server_set(stripped, definition, locate=locate)
        assert "generated" not in stripped["spec"]
        broken = edit(BATCHSET, lambda d: d["spec"]["structureDefinition"]["childComponents"][0]
                      ["specDefinition"].update(podTemplateSpecPath=".spec.jobs[] | "
                                                "(.template.spec.template | tostring)"))
        bad = load_text(broken, source="bad.yaml")[0]
        with pytest.raises(MutationError, match="cannot be written") as bounded_error:
            mutate_pods(obj, bad, labels={"x": "y"}, locate=evaluator.locator(bad))
        with pytest.raises(MutationError) as local_error:
            mutate_pods(obj, bad, labels={"x": "y"})
        assert str(bounded_error.value) == str(local_error.value)


def test_worker_start_is_not_counted_against_the_deadline() -> None:
    """Spawning a worker (a Python process importing the evaluator) takes far more than
    50 ms; only the evaluation, microseconds here, is the definition's to answer for. On a
    loaded host the start once took seconds and quarantined well-behaved definitions."""
    catalog = Catalog(load_text(BATCHSET, source="ok.yaml"))
    quick = Bounds(deadline_seconds=0.05, cpu_seconds=5, memory_mb=256, workers=1)
    with Evaluator.for_catalog(catalog, bounds=quick) as evaluator:
        assert evaluator.resolve(BATCHSET_OBJ).demand.pods == 7
        assert evaluator.quarantined() == {}
