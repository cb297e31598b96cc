"""plain_copy is copy.deepcopy for decoded JSON (and falls back to it for anything else)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dispatcher.workloads.plaincopy import plain_copy

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30)


def _containers(value: Any) -> list[int]:
    if isinstance(value, dict):
        return [id(value), *(i for v in value.values() for i in _containers(v))]
    if isinstance(value, list):
        return [id(value), *(i for v in value for i in _containers(v))]
    return []


@given(_json)
def test_equal_to_deepcopy_and_shares_no_container(value: Any) -> None:
    copied = plain_copy(value)
    assert copied == copy.deepcopy(value)
    assert not set(_containers(copied)) & set(_containers(value))


def test_what_is_not_json_is_deep_copied_too() -> None:
    inner = {"a": [1]}
    value = {"t": (inner,), "s": {1, 2}}
    copied = plain_copy(value)
    assert copied == value
    assert copied["t"][0] is not inner
    assert copied["s"] is not value["s"]
