"""A deep copy of decoded JSON, several times cheaper than ``copy.deepcopy``.

Objects from the apiserver are dicts, lists, strings, numbers, booleans and None: a copy
needs no memo (JSON has no shared or cyclic parts) and the scalars are immutable. Every
member copy is built from a copy of its hub object (``control/core/copies.build_copy``,
``workloads/mutate.py``); ``copy.deepcopy`` was most of that cost. Anything else (a tuple,
an object a caller put in) is left to ``copy.deepcopy``, so the result is the same.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["plain_copy"]

_SCALARS = (str, int, float, bool, type(None))


def plain_copy(value: Any) -> Any:
    """A deep copy of ``value`` (decoded JSON, or anything ``copy.deepcopy`` copies)."""
    kind = type(value)
    if kind is dict:
        return {key: plain_copy(item) for key, item in value.items()}
    if kind is list:
        return [plain_copy(item) for item in value]
    if kind in _SCALARS:
        return value
    return copy.deepcopy(value)
