"""Wire JSON: orjson's answer where it can give one, the standard library's otherwise, and
the same values either way."""

from __future__ import annotations

import datetime
import json

import pytest

from dispatcher.kube import wirejson

OBJECT = {"apiVersion": "v1", "kind": "ConfigMap",
          "metadata": {"name": "café", "labels": {"a": "b"}, "generation": 3},
          "data": {"ratio": 0.25, "on": True, "none": None, "list": [1, "two", {"x": []}]}}


def test_round_trip_keeps_every_value() -> None:
    raw = wirejson.dumps(OBJECT)
    assert isinstance(raw, bytes)
    assert wirejson.loads(raw) == OBJECT == json.loads(raw)
    assert wirejson.loads(raw.decode()) == OBJECT


def test_compact_and_utf8_as_go_writes_it() -> None:
    assert wirejson.dumps({"a": [1, 2], "n": "é"}) == '{"a":[1,2],"n":"é"}'.encode()


def test_integers_beyond_64_bits_fall_back_to_the_standard_library() -> None:
    big = {"spec": {"n": 2**70, "m": -(2**64)}}
    raw = wirejson.dumps(big)
    assert json.loads(raw) == big
    assert wirejson.loads(raw) == big


def test_keys_that_are_not_strings_are_written_as_json_writes_them() -> None:
    assert json.loads(wirejson.dumps({1: "x"})) == {"1": "x"}


def test_dates_and_times_are_iso_8601() -> None:
    when = datetime.datetime(2026, 12, 1, 17, 42, 5, tzinfo=datetime.UTC)
    assert json.loads(wirejson.dumps({"t": when, "d": when.date()})) == {
        "t": "2026-12-01T17:42:05+00:00", "d": "2026-12-01"}


def test_values_json_cannot_write_still_raise_type_error() -> None:
    with pytest.raises(TypeError):
        wirejson.dumps({"x": object()})


@pytest.mark.parametrize("raw", [b"", b"{", b"not json", b'{"a": 1} trailing'])
def test_what_is_not_json_raises_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError):
        wirejson.loads(raw)
