"""JSON merge patches (RFC 7386) computed from two versions of an object.

A merge patch merges nested objects and replaces lists; a key is removed only by sending
``null``. ``merge_diff(old, new)`` is the smallest patch that turns ``old`` into ``new``,
so mirroring a status never leaves stale keys behind and an unchanged object costs nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["apply_merge", "merge_diff", "strip_nulls"]


def merge_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The merge patch from ``old`` to ``new`` (empty when they are equal).

    ``None`` values inside ``new`` cannot be expressed by a merge patch (they mean
    delete); they are treated as absent.
    """
    patch: dict[str, Any] = {}
    for key, value in old.items():
        if (key not in new or new[key] is None) and value is not None:
            patch[key] = None
    for key, value in new.items():
        if value is None:
            continue
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_diff(before, value)
            if sub:
                patch[key] = sub
        elif before != value or key not in old:
            patch[key] = strip_nulls(value)
    return patch


def strip_nulls(value: Any) -> Any:
    """``value`` without None entries in mappings (what a merge patch can express)."""
    if isinstance(value, Mapping):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    return value


def apply_merge(target: Any, patch: Any) -> Any:
    """RFC 7386 application (for tests and for updating caches after a patch)."""
    if not isinstance(patch, Mapping):
        return patch
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = apply_merge(out.get(key), value)
    return out
