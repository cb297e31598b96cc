"""Random expressions of the jqlite subset over random JSON values, against libjq.

The unit tests check jqlite on the catalog's own paths; here hypothesis builds expressions
from the subset's grammar (paths, ``//``, ``and``/``or``, comparisons, arithmetic, ``if``,
``as`` bindings, ``select``, ``map``, ``?``, interpolation, collections, the builtins) and
plain JSON values to run them on. Wherever jqlite answers, the answer must be libjq's, bit
for bit; wherever libjq fails, jqlite must hand over (give up), never answer.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.workloads.jqlite import GiveUp, compile_program, run_programs
from dispatcher.workloads.jqrun import MAX_RESULTS, Batch, JqFailure, canonical_text
from tests.fuzz.strategies import BUDGET

KEYS = ["a", "b", "key", "value"]

plain_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5)
    | st.sampled_from(["", "a", "B", "2", "v2.6", "x:y", "é"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(KEYS), inner, max_size=3),
    max_leaves=10)

_LEAVES = [".", ".a", ".b", ".key", ".[0]", ".[-1]", ".[]", ".[]?", ".a[]?", ".[1:]",
           "0", "1", "2", '"a"', '""', "null", "true", "false", "[]", "{}", "empty"]
_UNARY = ["length", "keys", "type", "not", "tostring", "add", "min", "max", "last", "any",
          "all", "to_entries", "ascii_downcase", "tonumber?", "keys[]"]


def _expressions(depth: int) -> st.SearchStrategy[str]:
    leaf = st.sampled_from(_LEAVES + _UNARY)
    if depth == 0:
        return leaf
    sub = _expressions(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(["|", ",", "//", "and", "or", "==", "!=", "<", ">=",
                                        "+", "-", "*"]), sub).map(
            lambda t: f"({t[0]}) {t[1]} ({t[2]})"),
        sub.map(lambda e: f"[{e}]"),
        sub.map(lambda e: f"{{a: ({e})}}"),
        sub.map(lambda e: f"select({e})"),
        sub.map(lambda e: f"map({e})"),
        sub.map(lambda e: f"({e})?"),
        sub.map(lambda e: f'"<\\({e})>"'),
        st.tuples(sub, sub, sub).map(lambda t: f"if {t[0]} then {t[1]} else {t[2]} end"),
        st.tuples(sub, sub).map(lambda t: f"({t[0]}) as $v | ({t[1]}) | [., $v]"),
        st.tuples(sub, st.sampled_from(["split(\":\")", "ltrimstr(\"v\")", "has(\"a\")",
                                        "with_entries(select(.value != null))"])).map(
            lambda t: f"({t[0]}) | {t[1]}"),
    )


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


@BUDGET
@given(expression=_expressions(3), value=plain_values)
def test_jqlite_answers_as_libjq_or_hands_over(expression: str, value: Any) -> None:
    program = compile_program(expression)
    assert program is not None, expression  # the generator stays inside the subset
    (theirs,) = Batch([expression]).run(canonical_text(value))
    try:
        (mine,) = run_programs([program], value, MAX_RESULTS)
    except GiveUp:
        return  # libjq decides (it may well succeed: jqlite does not model every case)
    assert not isinstance(theirs, JqFailure), (expression, value, theirs, mine)
    assert _canonical(mine) == _canonical(theirs), (expression, value)
