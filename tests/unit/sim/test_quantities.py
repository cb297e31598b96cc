from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatcher.sim.quantities import format_duration, parse_duration, parse_rate


@pytest.mark.parametrize(("text", "seconds"), [
    ("90s", 90.0), ("30m", 1800.0), ("2h", 7200.0), ("1h30m", 5400.0), ("1d", 86400.0),
    ("2.5h", 9000.0), (45, 45.0), (0, 0.0), ("0s", 0.0)])
def test_parse_duration(text: object, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("bad", ["", "h", "10", "1x", "-5m", "1h 30", True, None, [1], -1])
def test_parse_duration_rejects(bad: object) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(bad)


def test_parse_rate() -> None:
    assert parse_rate("36/h") == pytest.approx(0.01)
    assert parse_rate("2/m") == pytest.approx(2 / 60)
    for bad in ("0/h", "3", "3/y", 3, None):
        with pytest.raises(ValueError, match="rate"):
            parse_rate(bad)


@given(st.integers(min_value=0, max_value=10 * 86400))
def test_format_then_parse_is_close(seconds: int) -> None:
    # Formatting drops seconds above an hour and hours above a day; never more than that.
    back = parse_duration(format_duration(seconds))
    assert abs(back - seconds) < (3600 if seconds >= 86400 else 60 if seconds >= 3600 else 1)


@given(st.text(max_size=12))
def test_parse_duration_never_crashes(text: str) -> None:
    with contextlib.suppress(ValueError):
        assert parse_duration(text) >= 0
