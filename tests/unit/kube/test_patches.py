"""merge_diff: applying the diff to ``old`` gives ``new`` (property), and equal is empty."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.kube.patches import apply_merge, merge_diff

_leaf = st.one_of(st.integers(), st.text(max_size=3), st.booleans(),
                  st.lists(st.integers(), max_size=3))
_obj = st.recursive(st.dictionaries(st.sampled_from("abcd"), _leaf, max_size=4),
                    lambda inner: st.dictionaries(st.sampled_from("abcd"),
                                                  st.one_of(_leaf, inner), max_size=4),
                    max_leaves=12)


@given(old=_obj, new=_obj)
def test_diff_applies(old: dict[str, Any], new: dict[str, Any]) -> None:
    assert apply_merge(old, merge_diff(old, new)) == new


@given(obj=_obj)
def test_equal_is_empty(obj: dict[str, Any]) -> None:
    assert merge_diff(obj, obj) == {}


def test_removed_nested_key_is_nulled() -> None:
    assert merge_diff({"s": {"a": 1, "b": 2}}, {"s": {"a": 1}}) == {"s": {"b": None}}
