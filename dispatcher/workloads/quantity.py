"""Kubernetes resource quantities (``"500m"``, ``"128Gi"``, ``4``) as exact fractions.

Only what pod resource sums need: parse, add, compare, and print back in a readable
canonical form. Exact arithmetic (Fraction), so ``"0.5" + "500m"`` is exactly ``"1"``.

The one GPU rule: a GPU count read from a Kubernetes object (a node's allocatable, a
container's limits, a simulated node) goes through ``whole_count`` — every quantity form,
fractions rounded down, junk read as 0. Only the dispatcher's own records (a reservation on
a Dispatch) are read strictly (``int``): a value there that is not a whole number is a
corrupt record, refused as a whole rather than rounded.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache

__all__ = ["format_cpu", "format_memory", "parse_quantity", "whole_count"]

_SUFFIX = {
    "": Fraction(1), "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}
_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


def parse_quantity(value: object) -> Fraction | int:
    """A quantity as an exact number; ValueError for anything Kubernetes would reject.

    Plain integers stay ``int`` (the common case, and much cheaper than Fraction).
    """
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, float):
        return Fraction(str(value))
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    return _parse_text(value)


@lru_cache(maxsize=4096)
def _parse_text(value: str) -> Fraction:
    """A few spellings ("500m", "2Gi") recur in every pod: parse each once."""
    match = _QUANTITY.match(value.strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    scale = _SUFFIX[suffix]
    if number.isdigit():  # "500m", "16Gi": no decimal text for Fraction to parse
        return Fraction(int(number) * scale.numerator, scale.denominator)
    return Fraction(number) * scale


def whole_count(value: object) -> int:
    """A quantity read as a whole, non-negative count (GPUs on a node, in a container).

    For live objects the apiserver already validated: an unusable value reads as 0 rather
    than breaking a watch, and a fractional one is rounded down (half a GPU cannot be
    allocated). Every quantity form parses (``"1e3"`` is 1000, ``"1.0"`` is 1, ``"500m"``
    is 0, ``"1k"`` is 1000).
    """
    try:
        number = parse_quantity(value)
    except ValueError:
        return 0
    return max(int(number), 0)


def format_cpu(value: Fraction | int) -> str:
    """CPU cores: whole numbers plain (``"16"``), else millicores (``"1500m"``)."""
    if isinstance(value, int) or value.denominator == 1:
        return str(int(value))
    milli = value * 1000
    if milli.denominator == 1:
        return f"{milli.numerator}m"
    return f"{float(value):g}"


def format_memory(value: Fraction | int) -> str:
    """Bytes with the largest exact suffix, binary first (``"128Gi"``, ``"1G"``, ``"1536Mi"``)."""
    if not isinstance(value, int) and value.denominator != 1:
        return format_cpu(value)
    number = int(value)
    if number == 0:
        return "0"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi"):
        unit = _SUFFIX[suffix].numerator
        if number % unit == 0:
            return f"{number // unit}{suffix}"
    for suffix in ("E", "P", "T", "G", "M", "k"):
        unit = _SUFFIX[suffix].numerator
        if number % unit == 0:
            return f"{number // unit}{suffix}"
    if number % 1024 == 0:
        return f"{number // 1024}Ki"
    return str(number)
