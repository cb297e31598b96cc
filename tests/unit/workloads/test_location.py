"""A value's JSON location is libjq's ``path()``, walked or not (``location.json_location``).

Field chains are walked on the Python value instead of running libjq on the text; every
chain here, on objects where it resolves, runs into null, a scalar, a list or an object,
must give what libjq's ``path()`` gives on the canonical text (or no location where libjq
fails). Expressions outside the chain form still get libjq's answer.
"""

from __future__ import annotations

import datetime
import random
from typing import Any

import pytest

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.jqrun import canonical_text
from dispatcher.workloads.location import json_location, render
from dispatcher.workloads.model import Definition
from dispatcher.workloads.paths import in_process, locations
from dispatcher.workloads.pathwalk import chain
from tests.unit.workloads.test_jqlite import _mutated, _samples, _upstream

OBJECTS: list[Any] = [
    {"spec": {"template": {"spec": {"containers": [{"name": "a"}, {"image": "b"}]}},
              "jobs": [{"template": {"x": 1}}, {"template": None}, {}],
              "components": {"z": {"replicas": -1}, "a": {"replicas": 2}, "m": None},
              "replicas": 3, "name": "s", "on": True,
              "when": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)},
     "metadata": {"labels": {"app.kubernetes.io/component": "q", "b": "c"}, "name": "x"}},
    {"spec": None},
    {"spec": []},
    {"spec": "text"},
    {"spec": {"jobs": {"b": {"template": 1}, "a": {"template": 2}}}},
    [{"spec": 1}, 2],
    {},
    None,
]
EXPRESSIONS = [
    ".", ".spec", ".spec.template", ".spec.template.spec.containers[0]",
    ".spec.template.spec.containers[1].image", ".spec.template.spec.containers[5]",
    ".spec.jobs[].template", ".spec.jobs[]", ".spec.jobs[1]", ".spec.components[].replicas",
    ".spec.components.z.replicas", ".spec.components.m.replicas",
    '.metadata.labels["app.kubernetes.io/component"]', '.metadata."labels".b',
    '.["spec"]["jobs"][0]', ".[0]", ".[].spec", ".spec.replicas.x", ".spec.name[0]",
    ".spec.on.x", ".spec.when.x", ".spec[]", ".spec[0].template", ".missing.deeper[2].x",
    # not chains: libjq answers (locations, or none)
    ".spec.replicas // 1", ".spec.jobs[]? | .template", ".spec.jobs[-1]",
    "first(.spec.jobs[])", ".spec | .template", "{a: .spec}", ".spec.jobs[0:1]",
]


def _libjq(expression: str, text: str, index: int) -> str | None:
    try:
        found = locations(expression, text)
    except ValueError:
        return None
    return render(found[index]) if index < len(found) else None


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_walked_location_is_libjqs_path(expression: str) -> None:
    for obj in OBJECTS:
        text = canonical_text(obj)
        for index in range(4):
            assert json_location(expression, lambda t=text: t, index, root=obj) \
                == _libjq(expression, text, index), (expression, obj, index)


def test_chains_are_recognised() -> None:
    assert chain(".spec.jobs[].template") == ("spec", "jobs", None, "template")
    assert chain('.metadata.labels["a/b"]') == ("metadata", "labels", "a/b")
    assert chain('.["a"][2]') == ("a", 2)
    assert chain(".") == ()
    for other in (".a // 1", ".a[-1]", ".a?", ".a | .b", "[.a]", ".a[0:1]", "$x.a",
                  ".a # comment"):
        assert chain(other) is None, other


def test_no_text_no_location() -> None:
    """An untrusted definition's expressions never run here (empty text), walked or not."""
    assert json_location(".spec", "", 0, root={"spec": {}}) is None
    assert json_location(".spec", "", 0) is None


def test_text_is_only_made_when_libjq_runs() -> None:
    made: list[int] = []

    def text() -> str:
        made.append(1)
        return '{"a":{"b":[1]}}'

    assert json_location(".a.b[0]", text, 0, root={"a": {"b": [1]}}) == "a.b[0]"
    assert made == []
    assert json_location(".a.b[0] // 1", text, 0, root={"a": {"b": [1]}}) == "a.b[0]"
    assert made == [1]


def _libjq_answer(expression: str, text: str) -> list[Any] | str:
    """What ``paths.in_process`` answered before walking: libjq's locations or message."""
    try:
        return locations(expression, text)
    except ValueError as error:
        return " ".join(str(error).split())


@pytest.mark.parametrize("expression", EXPRESSIONS)
def test_in_process_locator_is_libjqs_path(expression: str) -> None:
    """The trusted definitions' Locator walks plain paths; its answer (locations, or jq's
    message where jq refuses) is libjq's on the canonical text, walked or not."""
    for obj in OBJECTS:
        assert in_process([expression], obj) == [_libjq_answer(expression, canonical_text(obj))], \
            (expression, obj)


def _catalog_paths(definition: Definition) -> list[str]:
    """Every path expression the copy builder locates: pod specs, fragments, server-set."""
    out = [e.text for e in definition.server_set]
    for comp in definition.components:
        if comp.spec is None:
            continue
        if comp.spec.path is not None:
            out.append(comp.spec.path.text)
        out += [expr.text for _, expr in comp.spec.fragments]
    return out


@pytest.mark.parametrize("which", ["builtin", "upstream"])
def test_in_process_locator_agrees_with_libjq_on_every_catalog_path(which: str) -> None:
    catalog = Catalog.builtin() if which == "builtin" else _upstream()
    rng = random.Random(20261207)
    samples = _samples()
    walked = 0
    for definition in catalog.definitions:
        expressions = _catalog_paths(definition)
        mine = [s for s in samples if (s.get("apiVersion"), s.get("kind")) ==
                (definition.api_version, definition.kind)]
        for obj in [o for s in mine for o in (s, _mutated(s, rng), _mutated(s, rng))]:
            text = canonical_text(obj)
            assert in_process(expressions, obj) == [_libjq_answer(e, text)
                                                    for e in expressions], definition.name
            walked += sum(1 for e in expressions if chain(e) is not None)
    assert walked > 100  # the walk, not only libjq, was compared
