"""The bounded, batched jq runner: safety check, ordering, limits, failure isolation."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.workloads.jqcheck import check_safety, compile_errors, is_balanced, is_linear
from dispatcher.workloads.jqrun import MAX_RESULTS, Batch, JqFailure, Limits, canonical_text


@pytest.mark.parametrize("expression", [
    ".spec.del", ".range", '"env"', '.metadata.labels["input"]', ".a // 1", ". as $x | $x.y",
    ".a == 1", ".a != .b", ".a <= 2", "[.[] | select(.a >= 2)]", "# env\n.a"])
def test_safe_expressions(expression: str) -> None:
    assert check_safety(expression) == []


@pytest.mark.parametrize("expression", [
    "env", "$ENV", "input", "inputs", "del(.a)", "..", ".a = 1", ".a |= 1", ".a //= 1",
    "[range(5)]", "def f: 1; f", '"\\(env.HOME)"', '"a\\("b\\(now)")"', "walk(.)",
    "debug", "halt", "include \"x\"; .", "keys_unsorted", "[.a | combinations]", "$__loc__",
    "until(1; 1)"])
def test_unsafe_expressions(expression: str) -> None:
    assert check_safety(expression)


@pytest.mark.parametrize(("expression", "linear"), [
    (".spec.jobs[].name", True), (".spec.jobs[] | (.replicas // 1)", True),
    (".spec.m | to_entries[] | .key", True), (".a[] | select(.x == 1)", True),
    ('.metadata.labels["a,b[][]"]', True),
    (".a[].b[]", False), (".a[] as $x | .b", False), ("{a: .x, b: .y}", False),
    (".a[] + .b[]", False), ('"\\(.a[])"', False), ("[.a[] | limit(2; .b)]", False)])
def test_linear_classification(expression: str, linear: bool) -> None:
    assert is_linear(expression) is linear


def test_cross_product_stops_at_the_result_cap() -> None:
    batch = Batch([".a[] as $x | .a[] | $x", ".a[]", ".a | length"])
    results = batch.run(canonical_text({"a": list(range(600))}))
    assert isinstance(results[0], JqFailure) and "1000" in results[0].message
    assert results[1] == list(range(600))
    assert results[2] == [600]


def test_failures_are_isolated_per_expression() -> None:
    batch = Batch([".a", ".b[]", ".c | error(\"boom\")", ".d"])
    results = batch.run(canonical_text({"a": 1, "b": None, "d": [1]}))
    assert results[0] == [1]
    assert isinstance(results[1], JqFailure) and "Cannot iterate over null" in results[1].message
    assert results[2] == JqFailure("boom")
    assert results[3] == [[1]]
    assert len(Batch([]).run("{}")) == 0


def test_keys_sorted_recursively_and_integral_floats_are_integers() -> None:
    text = canonical_text({"m": {"z": 1.0, "a": {"y": 2, "b": [3.5, 4.0]}}})
    assert text == '{"m":{"a":{"b":[3.5,4],"y":2},"z":1}}'
    batch = Batch([".m | keys[]", ".m | .[] | type", ".m.z | tostring"])
    assert batch.run(text) == [["a", "z"], ["object", "number"], ["1"]]


def test_limits() -> None:
    deep: dict[str, object] = {}
    node = deep
    for _ in range(20):
        node["x"] = {}
        node = node["x"]  # type: ignore[assignment]
    with pytest.raises(ValueError, match="deeper than 10"):
        canonical_text(deep, limits=Limits(max_depth=10))
    assert canonical_text(deep, limits=Limits(max_depth=30))
    with pytest.raises(ValueError, match="bytes"):
        canonical_text({"a": "x" * 100}, limits=Limits(max_bytes=50))
    with pytest.raises(ValueError, match="not JSON"):
        canonical_text({"a": float("nan")})
    with pytest.raises(ValueError, match="not JSON"):
        canonical_text({"a": {1, 2}})


@given(st.lists(st.integers(-(2**53), 2**53), max_size=MAX_RESULTS + 5))  # float64, as Go
def test_result_cap_matches_upstream(items: list[int]) -> None:
    (result,) = Batch([".[]"]).run(canonical_text(items))
    if len(items) >= MAX_RESULTS:
        assert isinstance(result, JqFailure)
    else:
        assert result == items


@pytest.mark.parametrize(("expression", "balanced"), [
    (".a", True), ('.a["x)"] | {b: "]"}', True), ("(.a", False), (".a)", False),
    ('"\\(.a)"', False), (".a # c", False), ("[.a)", False), ('"abc', False)])
def test_balanced_classification(expression: str, balanced: bool) -> None:
    assert is_balanced(expression) is balanced


def test_compile_errors_found_together_or_alone() -> None:
    errors = compile_errors([".a", ".b | nosuchfn", "(.c", '.d["x"]', ".e) , (.f"])
    assert set(errors) == {".b | nosuchfn", "(.c", ".e) , (.f"}
    assert "nosuchfn" in errors[".b | nosuchfn"]


def test_yaml_timestamps_become_rfc3339_strings() -> None:
    import datetime

    moment = datetime.datetime(2026, 11, 29, 10, 0, tzinfo=datetime.UTC)
    text = canonical_text({"t": moment, "d": datetime.date(2026, 1, 2),
                           "n": datetime.datetime(2026, 1, 2, 3, 4, 5)})
    assert text == '{"d":"2026-01-02","n":"2026-01-02T03:04:05Z","t":"2026-11-29T10:00:00Z"}'
