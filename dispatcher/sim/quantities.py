"""Durations and rates as people write them in scenario files: ``90s``, ``30m``, ``2h``, ``20/h``.

Virtual time in the simulator is a float of seconds; these helpers turn the human spellings
into seconds (or events per second) and back, so reports show ``1h30m`` rather than 5400.0.
``RunTime`` is a scenario's run-time distribution, sampled in seconds.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Literal

__all__ = ["Distribution", "RunTime", "format_duration", "parse_duration", "parse_rate"]

Distribution = Literal["fixed", "exponential", "lognormal", "uniform"]


@dataclass(frozen=True, kw_only=True)
class RunTime:
    """A run-time distribution in seconds; ``a``/``b`` mean value, mean, median+sigma, low+high."""

    distribution: Distribution
    a: float
    b: float = 0.0

    def sample(self, rng: random.Random) -> float:
        """One run time, never below one second (a zero-length job tells nothing)."""
        if self.distribution == "fixed":
            value = self.a
        elif self.distribution == "exponential":
            value = rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0
        elif self.distribution == "lognormal":
            value = rng.lognormvariate(math.log(self.a), self.b) if self.a > 0 else 0.0
        else:
            value = rng.uniform(self.a, self.b)
        return max(1.0, value)


_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")
_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|m|h|d)\s*$")


def parse_duration(value: object) -> float:
    """Seconds from ``3600``, ``"90s"``, ``"1h30m"`` or ``"2.5h"``; ValueError otherwise.

    Plain numbers are seconds. Negative durations are rejected: nothing in a scenario runs
    backwards in time.
    """
    if isinstance(value, bool):
        raise ValueError(f"expected a duration like 90s, 30m, 2h, got {value!r}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a duration >= 0, got {value!r}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a duration like 90s, 30m, 2h, got {value!r}")
    text = value.strip().replace(" ", "")
    pos, total = 0, 0.0
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"expected a duration like 90s, 30m, 2h, got {value!r}")
    return total


def parse_rate(value: object) -> float:
    """Events per second from ``"20/h"``, ``"1/m"`` or ``"0.5/s"``; ValueError otherwise."""
    if isinstance(value, str):
        match = _RATE.match(value)
        if match:
            rate = float(match.group(1)) / _UNITS[match.group(2)]
            if rate > 0:
                return rate
    raise ValueError(f"expected a positive rate like 20/h or 1/m, got {value!r}")


def format_duration(seconds: float) -> str:
    """``5400.0`` -> ``"1h30m"``; sub-minute values keep seconds (``"42s"``, ``"2m05s"``)."""
    whole = round(seconds)
    if whole < 60:
        return f"{seconds:.0f}s" if seconds >= 1 or seconds == 0 else f"{seconds:.2f}s"
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    return f"{minutes}m{secs:02d}s" if secs else f"{minutes}m"
