"""JSON on the wire to and from an apiserver: orjson, with the standard library behind it.

Decoding every response and watch line and encoding every request body were about a tenth
of the controller's CPU per dispatch with ``json``; orjson does the same in a fraction of
that. What orjson refuses (an integer beyond 64 bits, a key that is not a string, a value
only the ``default`` hook knows) goes through ``json`` exactly as before, so the bytes an
apiserver accepts and the values a caller gets do not depend on which one ran. Nothing here
is for hashing or stamping: those use ``canonical_text``, whose bytes must not change.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]


def _iso8601(value: Any) -> Any:
    """JSON for the values kubernetes_asyncio's serialiser converted (dates, times)."""
    if isinstance(value, datetime.date):  # datetime.datetime included
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def dumps(body: Any) -> bytes:
    """``body`` as compact JSON bytes (non-ASCII as UTF-8, as Go's encoder writes it)."""
    try:
        return orjson.dumps(body, default=_iso8601)
    except TypeError:  # orjson.JSONEncodeError: a big int, a non-string key, a bad value
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False,
                          default=_iso8601).encode()


def loads(raw: bytes | str) -> Any:
    """The value of one JSON document; ValueError when it is not JSON."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # a ValueError: perhaps only an integer beyond 64 bits
        return json.loads(raw)
