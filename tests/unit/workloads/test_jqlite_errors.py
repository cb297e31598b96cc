"""Where jqlite fails on an expression, the failure it reports is libjq's own.

A workload the definition does not fit (``spec: {}`` under a RayCluster definition) makes
some paths fail (``Cannot iterate over null (null)``). ``jqlite`` reports libjq's message
for the errors it knows exactly, met before any stream had several values (after that,
its eager order may meet another error first than libjq's lazy one); every other failing
expression runs in libjq, alone or, when many fail, with the whole batch. So
``Batch.evaluate`` must equal libjq's ``Batch.run`` on every path, failures included,
message for message: checked on every sample of every built-in and upstream definition,
their mutations (where most failures come from), and a grid of small expressions.
"""

from __future__ import annotations

import random
from typing import Any

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.jqlite import compile_program, run_each
from dispatcher.workloads.jqrun import MAX_RESULTS, Batch, JqFailure, ObjectInput, canonical_text
from tests.unit.workloads.test_jqlite import (
    _EXPRESSIONS,
    _VALUES,
    _in_subset,
    _mutated,
    _samples,
    _upstream,
)


def _exact(batch: Batch, obj: Any) -> int:
    """How many of ``batch``'s failures on ``obj`` jqlite reported itself; fails the test
    where ``evaluate`` differs from libjq in any result."""
    given = ObjectInput(obj)
    if not given.plain:
        return 0  # a scalar: libjq evaluates it anyway
    theirs = batch.run(canonical_text(obj))
    mine = batch.evaluate(given)
    for expression, a, b in zip(batch.expressions, mine, theirs, strict=True):
        assert a == b, (expression, obj, a, b)
    programs = [compile_program(e) for e in batch.expressions]
    found = run_each([p for p in programs if p is not None], obj, MAX_RESULTS)
    return sum(isinstance(f, str) for f in found)


def test_evaluate_fails_as_libjq_on_every_sample_and_its_mutations() -> None:
    rng = random.Random(20261201)
    exact = failed = 0
    samples = _samples()
    for catalog in (Catalog.builtin(), _upstream()):
        for definition in _in_subset(catalog):
            mine = [s for s in samples if (s.get("apiVersion"), s.get("kind")) ==
                    (definition.api_version, definition.kind)]
            for sample in mine:
                base = {k: v for k, v in sample.items() if k != "spec"}
                for obj in [sample, {**base, "spec": {}}, {**base, "spec": None}] + [
                        _mutated(sample, rng) for _ in range(5)]:
                    exact += _exact(definition.full_batch, obj)
                    failed += sum(isinstance(r, JqFailure)
                                  for r in definition.full_batch.run(canonical_text(obj)))
    assert exact > 500  # the messages jqlite knows were met and were libjq's
    assert failed > exact  # and the others were left to libjq


_MORE_EXPRESSIONS = [
    ".[] | .[]", ".a[], .b[]", "(.a, .b) | .[]", ".[] | keys", "[.[] | .a[]]",
    "to_entries[] | .value[]", "keys[] as $k | .[$k][]", "map(.[])", "map(keys)",
    "with_entries(.value |= 1)", ".a as $x | $x[]", "if .a then .b[] else .c[] end",
    "select(.a[] == 1)", "{x: .a[]}", "{x: .a[], y: .b[]}", '"\\(.a[])\\(.b[])"',
    ".a[] // .b[]", ".a[]? // .b[]", "(.a[] | .b) , .c[]", ".[]?[]", ".a[][]",
    # two errors, met in another order by eager and lazy evaluation: libjq's is the one
    # on the first value (null), jqlite's own the one on the second
    "(.a, .b[]) | .[]", ".c[][] | .[]", "(.c[] | .[]) | .[]",
    "(.c[] as $x | $x[]) | .[]", "(.c[] | keys) | .[]", "[.c[][]], .a[]"]
_MORE_VALUES: list[Any] = [{"a": None}, {"a": True, "b": [1]}, {"a": [None, 1]},
                           {"a": [[1], None]}, {"b": None, "c": False},
                           {"a": None, "b": True, "c": [[None], True]}]


def test_evaluate_fails_as_libjq_on_small_expressions_over_edge_values() -> None:
    exact = 0
    for expression in [*_EXPRESSIONS, *_MORE_EXPRESSIONS]:
        batch = Batch([expression])
        if compile_program(expression) is None:
            continue
        for value in [*_VALUES, *_MORE_VALUES]:
            exact += _exact(batch, value)
    assert exact > 40
