"""jq's value semantics on plain JSON values, for ``jqlite``: truthiness, jq's total order
and equality (``true`` is not ``1``), arithmetic, indexing, iteration in sorted key order
(as libjq on the canonical text) and the builtins the subset has.

Exact or it raises: ``JqError`` where libjq raises an error (``?`` may catch it), ``GiveUp``
where the case is not modelled here (the caller hands the object to libjq).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["BINARY", "OPERATORS", "UNARY", "GiveUp", "JqError", "field", "from_entries",
           "index", "iterate", "number", "slice_value", "to_entries", "tostring", "truthy"]

_SAFE_INT = 2**53


class GiveUp(Exception):
    """The evaluator does not model this case; libjq must evaluate the object."""


class JqError(GiveUp):
    """A case where libjq raises an error: ``?`` catches it, anything else hands over.

    ``message`` is libjq's own error text where it is known exactly (iterating or taking
    the keys of ``null`` or a boolean: an object the definition does not fit), else None.
    """

    def __init__(self, reason: str, message: str | None = None) -> None:
        super().__init__(reason)
        self.message = message


def _described(value: Any) -> str | None:
    """libjq's description of a value in an error (``null (null)``), for the values it
    is exact (its text of a string or number is truncated by rules not modelled here)."""
    if value is None:
        return "null (null)"
    if value is True or value is False:
        return f"boolean ({'true' if value else 'false'})"
    return None


def truthy(value: Any) -> bool:
    return value is not None and value is not False


def _rank(value: Any) -> int:
    if value is None:
        return 0
    if value is False:
        return 1
    if value is True:
        return 2
    kind = type(value)
    if kind is int:
        return 3
    if kind is str:
        return 4
    if kind is list:
        return 5
    if kind is dict:
        return 6
    raise GiveUp(f"value of type {kind.__name__}")


def _compare(a: Any, b: Any) -> int:
    """jq's total order (null < false < true < numbers < strings < arrays < objects)."""
    ra, rb = _rank(a), _rank(b)
    if ra != rb:
        return -1 if ra < rb else 1
    if ra in (3, 4):
        return -1 if a < b else (1 if a > b else 0)
    if ra == 5:
        for x, y in zip(a, b, strict=False):
            c = _compare(x, y)
            if c:
                return c
        return -1 if len(a) < len(b) else (1 if len(a) > len(b) else 0)
    if ra == 6:
        if a == b and _equal(a, b):
            return 0
        raise GiveUp("object ordering")
    return 0


def _equal(a: Any, b: Any) -> bool:
    """jq equality: like Python's, except that true is not 1 and false is not 0."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is list:
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if kind is dict:
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def number(value: int) -> int:
    if -_SAFE_INT < value < _SAFE_INT:
        return value
    raise GiveUp("integer out of the exact range")


def _add(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    kind = type(a)
    if kind is not type(b):
        raise JqError("addition of different types")
    if kind is int:
        return number(a + b)
    if kind is str or kind is list:
        return a + b
    if kind is dict:
        return {**a, **b}
    raise JqError("addition of booleans")


def _subtract(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return number(a - b)
    if type(a) is list and type(b) is list:
        return [x for x in a if not any(_equal(x, y) for y in b)]
    raise JqError("subtraction")


def _multiply(a: Any, b: Any) -> Any:
    if type(a) is int and type(b) is int:
        return number(a * b)
    raise GiveUp("multiplication")


def _divide(a: Any, b: Any) -> Any:
    """Integers that divide exactly (LLMInferenceService's data / dataLocal); anything
    else (a fraction, a zero divisor, strings: jq's split) is libjq's."""
    if type(a) is int and type(b) is int and b != 0 and a % b == 0:
        return number(a // b)
    raise GiveUp("division")


def _floor(value: Any) -> int:
    if type(value) is int:
        return value
    raise GiveUp("floor")


def iterate(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return [value[k] for k in sorted(value)]
    described = _described(value)
    raise JqError("iterate a non-container",
                  f"Cannot iterate over {described}" if described else None)


def field(value: Any, name: str) -> Any:
    if type(value) is dict:
        return value.get(name)
    if value is None:
        return None
    raise JqError("index a non-object by name")


def index(value: Any, key: Any) -> Any:
    if type(key) is str:
        return field(value, key)
    if type(key) is int:
        if type(value) is list:
            if -len(value) <= key < len(value):
                return value[key]
            return None
        if value is None:
            return None
        raise JqError("index a non-array by number")
    raise GiveUp("index")


def slice_value(value: Any, start: Any, stop: Any) -> Any:
    if value is None:
        return None
    if type(value) not in (list, str):
        raise JqError("slice")
    for bound in (start, stop):
        if bound is not None and type(bound) is not int:
            raise GiveUp("slice bound")
    return value[start:stop]


def _length(value: Any) -> int:
    kind = type(value)
    if value is None:
        return 0
    if kind is int:
        return abs(value)  # type: ignore[no-any-return]
    if kind in (str, list, dict):
        return len(value)
    raise JqError("length of a boolean")


def _keys(value: Any) -> list[Any]:
    if type(value) is dict:
        return sorted(value)
    if type(value) is list:
        return list(range(len(value)))
    described = _described(value)
    raise JqError("keys", f"{described} has no keys" if described else None)


def to_entries(value: Any) -> list[Any]:
    if type(value) is dict:
        return [{"key": k, "value": value[k]} for k in sorted(value)]
    described = _described(value)
    if described:  # jq's to_entries starts with keys_unsorted
        raise JqError("to_entries", f"{described} has no keys")
    raise GiveUp("to_entries")


def from_entries(entries: list[Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for entry in entries:
        if (type(entry) is not dict or entry.keys() != {"key", "value"}
                or type(entry["key"]) is not str):
            raise GiveUp("from_entries")
        out[entry["key"]] = entry["value"]
    return out


def _type(value: Any) -> str:
    return ("null", "boolean", "boolean", "number", "string", "array", "object")[_rank(value)]


def tostring(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or type(value) in (bool, int):
        return json.dumps(value)
    raise GiveUp("tostring of a container")


_INTEGER = re.compile(r"-?[0-9]{1,15}")


_NUMBERISH = frozenset("0123456789+-.eE" "nNaAiIfFtTyY")  # digits, exponents, nan, infinity


def _tonumber(value: Any) -> int:
    if type(value) is int:
        return int(value)
    if isinstance(value, str):
        if _INTEGER.fullmatch(value):
            return int(value)
        if not value or not _NUMBERISH.issuperset(value):
            raise JqError("tonumber of a string that is no number")  # "v2", "4-gpu", ""
    raise GiveUp("tonumber")


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _ascii_downcase(value: Any) -> str:
    if isinstance(value, str):
        return value.translate(_ASCII_LOWER)
    raise JqError("ascii_downcase")


def _extreme(value: Any, sign: int) -> Any:
    if type(value) is not list:
        raise GiveUp("min/max")
    best = None
    for index, item in enumerate(value):
        if index == 0 or sign * _compare(item, best) >= 0:
            best = item
    return best


def _sum(value: Any) -> Any:
    total = None
    for item in iterate(value):
        total = _add(total, item)
    return total


def _last(value: Any) -> Any:
    if type(value) is list:
        return value[-1] if value else None
    if value is None:
        return None
    raise JqError("last")


def _split(value: Any, sep: Any) -> list[str]:
    if type(value) is not str:
        raise JqError("split")
    if type(sep) is not str or not sep:
        raise GiveUp("split")
    return value.split(sep) if value else []


def _ltrimstr(value: Any, prefix: Any) -> Any:
    if type(value) is not str:
        raise JqError("ltrimstr")
    if type(prefix) is not str:
        raise GiveUp("ltrimstr")
    return value[len(prefix):] if value.startswith(prefix) else value


def _has(value: Any, key: Any) -> bool:
    if type(value) is dict and type(key) is str:
        return key in value
    if type(value) is list and type(key) is int and key >= 0:
        return key < len(value)
    raise GiveUp("has")


def _any(value: Any) -> bool:
    return any(truthy(v) for v in iterate(value))


def _all(value: Any) -> bool:
    return all(truthy(v) for v in iterate(value))


UNARY: dict[str, Callable[[Any], Any]] = {
    "length": _length, "keys": _keys, "to_entries": to_entries, "type": _type,
    "tostring": tostring, "tonumber": _tonumber, "ascii_downcase": _ascii_downcase,
    "min": lambda v: _extreme(v, -1), "max": lambda v: _extreme(v, 1), "add": _sum,
    "last": _last, "not": lambda v: not truthy(v), "any": _any, "all": _all,
    "floor": _floor,
}
BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "split": _split, "ltrimstr": _ltrimstr, "has": _has,
}
OPERATORS: dict[str, Callable[[Any, Any], Any]] = {
    "+": _add, "-": _subtract, "*": _multiply, "/": _divide,
    "==": _equal, "!=": lambda a, b: not _equal(a, b),
    "<": lambda a, b: _compare(a, b) < 0, "<=": lambda a, b: _compare(a, b) <= 0,
    ">": lambda a, b: _compare(a, b) > 0, ">=": lambda a, b: _compare(a, b) >= 0,
}
