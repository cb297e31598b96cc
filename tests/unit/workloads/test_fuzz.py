"""Random and mutated input never crashes or hangs: a result or a clear WorkloadError.

Objects: random JSON under every catalog definition's apiVersion/kind, and the catalog
samples (or this package's own shapes) with a random subtree replaced. Definitions: the
invented shapes with a random subtree replaced, and random jq text as a path.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import DefinitionError, WorkloadError
from dispatcher.workloads.mutate import mutate_pods
from dispatcher.workloads.resolve import resolve_with

from .shapes import (
    BATCHSET,
    BATCHSET_OBJ,
    FRAGSERVE,
    FRAGSERVE_OBJ,
    TRAINRUN,
    TRAINRUN_OBJ,
    define,
)

SAMPLES = Path(__file__).parent / "catalog"
FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(["1", "0", "-1", "4Gi", "True", "False", "nvidia.com/gpu", "Running"]),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(
        ["spec", "status", "replicas", "template", "containers", "resources", "limits",
         "requests", "nvidia.com/gpu", "name", "conditions", "type", "status", "x"]) | st.text(
            max_size=6), inner, max_size=4),
    max_leaves=30)


def _catalog() -> Catalog:
    return Catalog.builtin()


def _samples() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for path in sorted(SAMPLES.glob("**/*.yaml")):
        try:
            docs = list(yaml.safe_load_all(path.read_text()))
        except yaml.YAMLError:
            continue
        found.extend(d for d in docs if isinstance(d, dict) and "kind" in d)
    return found or [BATCHSET_OBJ, TRAINRUN_OBJ, FRAGSERVE_OBJ]


_SAMPLE_OBJECTS = _samples()  # read once: the set must not change between examples


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            out.extend(_paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.extend(_paths(item, (*prefix, index)))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    out = copy.deepcopy(value)
    node = out
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = new
    return out


def _mutated(data: st.DataObject, base: Any) -> Any:
    paths = _paths(base)
    path = data.draw(st.sampled_from(paths[1:] or paths))
    return _replace(base, path, data.draw(json_values))


@pytest.mark.parametrize("name", [d.name for d in Catalog.builtin().definitions])
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_random_objects_through_every_definition(name: str, data: st.DataObject) -> None:
    catalog = _catalog()
    definition = catalog.get(name)
    assert definition is not None
    obj = {"apiVersion": definition.api_version, "kind": definition.kind,
           "metadata": {"name": "fuzz"}, "spec": data.draw(json_values),
           "status": data.draw(json_values)}
    try:
        result = catalog.resolve(obj)
    except WorkloadError:
        return
    assert result.demand.pods >= 0
    assert result.status in ("pending", "initializing", "running", "degraded", "completed",
                             "failed", "suspended", "unknown")
    assert result.to_dict()["gpus"] == result.demand.gpus


@FUZZ
@given(data=st.data())
def test_mutated_samples(data: st.DataObject) -> None:
    catalog = _catalog()
    sample = data.draw(st.sampled_from(_SAMPLE_OBJECTS))
    obj = _mutated(data, sample)
    own = {"BatchSet": BATCHSET, "TrainRun": TRAINRUN, "FragServe": FRAGSERVE}
    if not isinstance(obj, dict) or not isinstance(obj.get("kind"), str):
        return
    kind = obj["kind"]
    definition = define(own[kind]) if kind in own else catalog.find(
        str(obj.get("apiVersion")), kind)
    if definition is None:
        return
    with contextlib.suppress(WorkloadError):
        resolve_with(definition, obj)
    before = copy.deepcopy(obj)
    with contextlib.suppress(WorkloadError):
        out = mutate_pods(obj, definition, labels={"a": "b"}, scheduler_name="s")
        assert out is not obj
    assert obj == before  # the input is never modified, even when mutation fails


@FUZZ
@given(data=st.data())
def test_broken_definitions_fail_clearly(data: st.DataObject) -> None:
    text, obj = data.draw(st.sampled_from([(BATCHSET, BATCHSET_OBJ), (TRAINRUN, TRAINRUN_OBJ),
                                           (FRAGSERVE, FRAGSERVE_OBJ)]))
    doc = _mutated(data, yaml.safe_load(text))
    try:
        definitions = load_text(yaml.safe_dump(doc), source="fuzz.yaml")
    except DefinitionError as error:
        assert error.issues and all(i.source == "fuzz.yaml" for i in error.issues)
        return
    for definition in definitions:
        with contextlib.suppress(WorkloadError):
            resolve_with(definition, obj)


@FUZZ
@given(expression=st.text(alphabet=st.sampled_from(list(".[]|()$ab\"\\:,?/=-+*<>{}#0 1\n")),
                          max_size=24))
def test_random_jq_text_as_a_path(expression: str) -> None:
    doc = yaml.safe_load(BATCHSET)
    doc["spec"]["structureDefinition"]["childComponents"][0]["scaleDefinition"][
        "maxReplicasPath"] = expression
    try:
        (definition,) = load_text(yaml.safe_dump(doc), source="fuzz.yaml")
    except DefinitionError:
        return
    with contextlib.suppress(WorkloadError):
        resolve_with(definition, BATCHSET_OBJ)


def _huge(kind_list: list[Any]) -> dict[str, Any]:
    return {"spec": {key: kind_list for key in (
        "replicatedJobs", "workerGroupSpecs", "jobs", "containers", "services", "components",
        "cliques", "conditions")}, "status": {"conditions": kind_list}}


@pytest.mark.parametrize("name", [d.name for d in Catalog.builtin().definitions])
def test_huge_objects_finish_with_a_result_or_a_clear_error(name: str) -> None:
    """Big lists everywhere a definition iterates: bounded by the result cap or the size cap."""
    definition = Catalog.builtin().get(name)
    assert definition is not None
    item = {"name": "x", "replicas": 1,
            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}},
            "type": "Ready", "status": "True"}
    for size in (500, 100_000):
        obj = {"apiVersion": definition.api_version, "kind": definition.kind,
               "metadata": {"name": "huge"}, **_huge([item] * size)}
        try:
            resolve_with(definition, obj)
        except WorkloadError as error:
            assert str(error)


_BOTH = [(define(t, "karta"), define(t, "ri"), o) for t, o in (
    (BATCHSET, BATCHSET_OBJ), (TRAINRUN, TRAINRUN_OBJ), (FRAGSERVE, FRAGSERVE_OBJ))]


@FUZZ
@given(data=st.data())
def test_both_formats_agree_on_mutated_objects(data: st.DataObject) -> None:
    karta, ri, base = data.draw(st.sampled_from(_BOTH))
    obj = _mutated(data, base)

    def outcome(definition: Any) -> Any:
        try:
            return resolve_with(definition, obj).to_dict()
        except WorkloadError as error:
            return str(error)
    assert outcome(karta) == outcome(ri)
