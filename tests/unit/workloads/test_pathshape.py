"""The load-time check of ``serverSetPaths``: a path expression by its shape, never run.

The verdicts are compared with libjq's own ``path()`` on an object where every expression
evaluates, and loading a definition is shown not to evaluate its server-set paths at all
(a tenant's exponential expression used to run at load, in the controller).
"""

from __future__ import annotations

import jq
import pytest

from dispatcher.workloads import paths
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.pathshape import path_shape_problem
from tests.unit.control.core.test_copies import _definition

PATHS = [
    ".spec.selector", ".spec.items[1, 3]", ".a[]?.b", '."x-y".z', ".[0:2]", ".a, .b",
    "(.a | .b), .c", ".a // .b", "empty", 'getpath(["a", "b"])', ". as $x | .a",
    "(.a, .b) as $x | .c", "if .a then .b else .c end",
    "if .a then .b elif .c then .d end", ".a | select(.b) | .c", ".a[.k]",
    'select(.spec.manualSelector != true) | .spec.template.metadata.labels["job-name", "x"]',
    "select((reduce .list[] as $v (0; . + $v)) > -1) | .spec",
    'select([.a[]? | tostring] | length > 0) | .b',
]
VALUES = [
    ".a // 1", ".a + 1", "1", '"s"', "$__loc__", "[.a]", "{a: 1}", ".a | length",
    ".a == 1", ".a and .b", ".a | tostring", "(.a, .b) as $x | 1", ".a | . as $y | 2",
    "if .a then 1 else .c end", "(.a, 2)", ".a | not",
]
DATA = ['{"a": {"b": {"x": 1}}, "b": 2, "c": 3, "k": "b", "list": [1, 2], "spec": {}}',
        '{"a": 1, "b": [1], "c": 2}', "[1, 2, 3]", "null"]


def _libjq(expression: str) -> list[str]:
    """libjq's path() on each of DATA: '' where it gave locations, else its error."""
    out = []
    for data in DATA:
        try:
            jq.compile(f"[path({expression})]").input_text(data).first()
            out.append("")
        except ValueError as error:
            out.append(str(error))
    return out


@pytest.mark.parametrize("expression", PATHS)
def test_path_expressions_pass(expression: str) -> None:
    assert path_shape_problem(expression) == ""
    assert not any("Invalid path expression" in e for e in _libjq(expression))
    assert "" in _libjq(expression)  # libjq gives locations for it


@pytest.mark.parametrize("expression", VALUES)
def test_value_expressions_are_refused(expression: str) -> None:
    assert "gives values, not locations" in path_shape_problem(expression)
    assert any("Invalid path expression" in e for e in _libjq(expression))


def test_destructuring_is_refused() -> None:
    assert "destructuring" in path_shape_problem(".a as [$x] | .b")
    assert "destructuring" in path_shape_problem(". as {a: $x} | .b")


def test_loading_never_evaluates_a_server_set_path(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(text: str) -> None:
        raise AssertionError(f"evaluated at load: {text}")

    monkeypatch.setattr(paths, "_path_program", refuse)
    hostile = " | ".join(f"(.a, .b) as $x{i}" for i in range(40)) + " | .spec.generated"
    (definition,) = load_text(_definition([hostile]), source="t.yaml")
    assert [e.text for e in definition.server_set] == [hostile]
