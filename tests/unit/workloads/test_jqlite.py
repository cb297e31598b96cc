"""The in-process jq subset (``jqlite``) against libjq itself.

Wherever ``jqlite`` answers, its answer must be libjq's, bit for bit (``true`` is not
``1``); where libjq fails, ``jqlite`` must give up. Checked on every path of the built-in
catalog and of upstream's example definitions, on every catalog sample and on thousands of
mutations of them (wrong types, missing fields, empty lists), and on a grid of small
expressions over edge-case values. The counts at the end of each test make sure the
comparison is not vacuous: the evaluator really answers for the shapes it claims.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.jqlite import GiveUp, compile_program, run_programs
from dispatcher.workloads.jqrun import MAX_RESULTS, Batch, JqFailure, ObjectInput, canonical_text
from dispatcher.workloads.model import Definition
from dispatcher.workloads.resolve import resolve

HERE = Path(__file__).parent
SAMPLES = HERE / "catalog"
UPSTREAM = HERE / "upstream"


def _plain(obj: Any) -> Any:
    return json.loads(canonical_text(obj))


def _samples() -> list[dict[str, Any]]:
    out = []
    for path in sorted(SAMPLES.glob("*/*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if path.name.endswith(".frames.yaml"):
                base = yaml.safe_load(path.with_name(
                    path.name.replace(".frames.yaml", ".yaml")).read_text())
                frames = doc if isinstance(doc, list) else [doc]
                out += [_plain({**base, "status": f.get("status")}) for f in frames
                        if isinstance(f, dict)]
            elif isinstance(doc, dict):
                out.append(_plain(doc))
    return out


def _upstream() -> Catalog:
    loaded = []
    for path in sorted(UPSTREAM.glob("*.yaml")):
        try:
            loaded.append(Catalog.load([path]))
        except Exception:
            continue
    return Catalog.merged(*loaded)


_REPLACEMENTS: list[Any] = [None, True, False, 0, 3, -1, "", "x", "2", "v2.6.1", [], {},
                            [1, "a"], {"a": 1}, [{"name": "n"}], 9007199254740991]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield (*prefix, key)
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield (*prefix, index)
            yield from _paths(item, (*prefix, index))


def _mutated(obj: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    out = json.loads(json.dumps(obj))
    paths = [p for p in _paths(out) if p[0] not in ("apiVersion", "kind")]
    for path in rng.sample(paths, min(len(paths), rng.randint(1, 3))):
        parent = out
        try:
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) != isinstance(path[-1], str):
                continue  # an earlier mutation in this round changed the container
            if isinstance(parent, dict) and rng.random() < 0.25:
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = json.loads(json.dumps(rng.choice(_REPLACEMENTS)))
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation in this round replaced an ancestor
    return out


def _same(batch: Batch, obj: Any) -> bool | None:
    """Whether jqlite answered (True) or gave up (False); fails the test on a mismatch.
    None: libjq failed on some expression and jqlite rightly gave up."""
    expected = batch.run(canonical_text(obj))
    programs = [compile_program(e) for e in batch.expressions]
    assert all(p is not None for p in programs)
    try:
        got = run_programs([p for p in programs if p is not None], obj, MAX_RESULTS)
    except GiveUp:
        return None if any(isinstance(r, JqFailure) for r in expected) else False
    for expression, mine, theirs in zip(batch.expressions, got, expected, strict=True):
        assert not isinstance(theirs, JqFailure), (
            f"libjq failed ({theirs}) where jqlite answered {mine!r}: {expression}")
        assert json.dumps(mine, sort_keys=True) == json.dumps(theirs, sort_keys=True), expression
    return True


def _in_subset(catalog: Catalog) -> list[Definition]:
    return [d for d in catalog.definitions if d.full_batch.in_process]


def test_every_builtin_and_upstream_definition_is_in_the_subset() -> None:
    assert all(d.full_batch.in_process for d in Catalog.builtin().definitions)
    assert all(d.full_batch.in_process for d in _upstream().definitions)


@pytest.mark.parametrize("which", ["builtin", "upstream"])
def test_agrees_with_libjq_on_every_sample_and_its_mutations(which: str) -> None:
    catalog = Catalog.builtin() if which == "builtin" else _upstream()
    rng = random.Random(20261130)
    answered = gave_up = failed = 0
    samples = _samples()
    for definition in _in_subset(catalog):
        mine = [s for s in samples if (s.get("apiVersion"), s.get("kind")) ==
                (definition.api_version, definition.kind)]
        for sample in mine:
            outcome = _same(definition.full_batch, sample)
            # every sample answered in process, unless libjq itself fails on it
            assert outcome is not False, (definition.name, sample)
            answered += outcome is True
            for _ in range(40):
                outcome = _same(definition.full_batch, _mutated(sample, rng))
                answered += outcome is True
                gave_up += outcome is False
                failed += outcome is None
    # every unmutated sample answered in process; most mutations too, the rest by libjq
    assert answered > 1000
    assert failed > 50  # mutations that make libjq fail were met, and jqlite gave up on them
    assert gave_up < answered


_VALUES: list[Any] = [None, True, False, 0, 2, -3, "", "a", "B:c", "12", "v2.6.11",
                      [], [1, 2], [3, "x"], [None, False], ["b", "a", "b"],
                      {}, {"b": 1, "a": 2}, {"a": None, "key": "k", "value": 1},
                      {"a": {"b": [1, {"c": "d"}]}, "n": 4, "s": "x:y"},
                      [{"key": "k", "value": 1}, {"key": "j", "value": None}]]

_EXPRESSIONS = [
    ".", ".a", ".a.b", ".a.b[1].c", '."a"', '.["a"]', ".[0]", ".[-1]", ".[5]", ".[]", ".[]?",
    ".a[]?", ".[1:]", ".[:1]", ".[0:2]", ".a // 1", ".x // .y // 3", "(.a, .b) // 0",
    "[.[] // 7]", ".a and .b", ".a or false", "(true, false) and (true, false)",
    "(1, 2) + (10, 20)", ". + 1", ". + .", ". - 1", ". * 2", ". / 2", "6 / .", ". / 2 | floor",
    "(. * 3) / 3", "floor", ". == 1", ". != null",
    ". < 2", ". >= [1]", ". > \"a\"", "[1, true] == [1, 1]", "length", "keys", "keys[]",
    "to_entries", "to_entries[] | .key", "with_entries(select(.value != null))", "type",
    "tostring", "tonumber", "tonumber? // 0", "ascii_downcase", "min", "max", "add", "last",
    "not", "any", "all", "split(\":\")", "ltrimstr(\"v\")", "has(\"a\")", "has(0)",
    "select(. != null)", "map(. + 1)", "map(type)", "[.[] | select(type == \"number\")]",
    "if . then 1 else 2 end", "if . == 0 then \"z\" elif . == 2 then \"t\" end",
    ". as $x | [$x, $x]", ".a as $x | .n as $y | {$x, y: $y}", "{a: 1, (\"b\", \"c\"): .}",
    "{a: (1, 2), b: (3, 4)}", "[.[] as $v | $v]", "empty", "[empty]", "-1", "\"\\u00e9\"",
    "[.[]?] | length", ".a.b[]? | .c?", "(.n // 0) - 1", "[(.a // {}) | keys[]]",
    ".s | split(\":\") | last", "map(tonumber? // 0) | .[0:2] >= [2, 6]",
    "select(.[0] < empty)", "[(.a, .b)[0, 1]]", "[.[(\"a\", \"b\")]]",
    '"x-\\(.)-y"', '"\\(.a)\\(.n)"', '"\\(.a // "q\\("r")")!"', '"\\(.[]?)"',
    '. as $x | "\\($x | length)"',
]


def test_agrees_with_libjq_on_small_expressions_over_edge_values() -> None:
    answered = 0
    for expression in _EXPRESSIONS:
        batch = Batch([expression])
        assert compile_program(expression) is not None, expression
        for value in _VALUES:
            answered += _same(batch, value) is True
    assert answered > len(_EXPRESSIONS) * len(_VALUES) // 3


@pytest.mark.parametrize("expression", [
    "reduce .[] as $x (0; . + $x)", '"\\(reduce .[] as $x (0; 1))"', "1.5", "1e3",
    ". % 2", "..", "$__loc__", "$ENV", "def f: 1; f", "try .a catch 0", ".[] as [$a] | $a",
    "@base64",
    "test(\"a\")", "first(.[])", "label $f | 1", ".a |= 1", "# c\n.a", "$undefined",
    ". as $x | $y", ".a ?// 1", "input", "env", "limit(1; .[])", "sort"])
def test_outside_the_subset_compiles_to_none(expression: str) -> None:
    assert compile_program(expression) is None


def test_a_cross_product_beyond_the_budget_hands_over_to_libjq() -> None:
    program = compile_program(".[] as $a | .[] as $b | .[] as $c | [$a, $b, $c]")
    assert program is not None
    with pytest.raises(GiveUp):
        run_programs([program], list(range(100)), MAX_RESULTS)


def test_results_never_share_the_object_s_own_lists() -> None:
    obj = {"spec": {"containers": [{"name": "a"}]}}
    program = compile_program(".spec.containers[]")
    assert program is not None
    (out,) = run_programs([program], obj, MAX_RESULTS)
    out.append("extra")
    assert obj == {"spec": {"containers": [{"name": "a"}]}}


def test_a_shared_binding_head_runs_once_per_object() -> None:
    calls = []

    def counting(value: Any) -> Any:
        calls.append(1)
        return value

    obj = {"a": [1, 2], "b": 5}
    head = "([.a[] | . + 1] | map(. * 2) | add)"  # the memoised source: 8+ tokens
    programs = [compile_program(f"{head} as $s | $s + {n}") for n in range(3)]
    assert all(p is not None for p in programs)
    from dispatcher.workloads import jqvalues
    original = jqvalues.UNARY["add"]
    jqvalues.UNARY["add"] = lambda v: counting(original(v))
    try:
        programs = [compile_program(f"{head} as $s | $s + {n}") for n in range(3)]
        got = run_programs([p for p in programs if p is not None], obj, MAX_RESULTS)
    finally:
        jqvalues.UNARY["add"] = original
    assert got == [[10], [11], [12]]
    assert len(calls) == 1


def test_objects_that_are_not_plain_take_libjq_and_resolve_the_same() -> None:
    catalog = Catalog.builtin()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
           "spec": {"parallelism": 2, "template": {"spec": {"containers": [
               {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
    floats = json.loads(json.dumps(job).replace('"parallelism": 2', '"parallelism": 2.0'))
    assert ObjectInput(job).plain and not ObjectInput(floats).plain
    assert resolve(floats, catalog=catalog).to_dict() == resolve(job, catalog=catalog).to_dict()
    assert resolve(job, catalog=catalog).demand.pods == 2
