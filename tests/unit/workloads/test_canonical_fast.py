"""``canonical_text`` takes orjson's fast path only where its bytes are json's exactly: the
text is what every expression sees, and what hashes and stamps are made from."""

from __future__ import annotations

import datetime
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.workloads.jqrun import _ascii_text, canonical_text

PLAIN = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53) + 1, 2**53 - 1) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=30)


def _reference(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@settings(max_examples=1500, deadline=None)
@given(PLAIN)
def test_the_fast_text_is_json_text_byte_for_byte(obj: object) -> None:
    fast = _ascii_text(obj)
    if fast is not None:
        assert fast == _reference(obj)


@settings(max_examples=500, deadline=None)
@given(st.dictionaries(st.text(), PLAIN, max_size=5))
def test_canonical_text_is_unchanged(obj: dict[str, object]) -> None:
    assert canonical_text(obj) == _reference(obj)


@pytest.mark.parametrize("value", ["\x7f", "é", "\u2028", "\ud800"])
def test_what_json_escapes_and_orjson_does_not_takes_the_json_path(value: str) -> None:
    assert _ascii_text({"a": value}) is None
    assert canonical_text({"a": value}) == _reference({"a": value})


def test_floats_and_timestamps_keep_their_own_rules() -> None:
    obj = {"b": 2.0, "a": 0.5, "t": datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)}
    assert canonical_text(obj) == '{"a":0.5,"b":2,"t":"2026-12-01T00:00:00Z"}'
