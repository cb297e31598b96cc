"""Server-side apply on behalf of another field manager, without taking anything from it.

Pure. Kueue v0.17.0 asks an external MultiKueue dispatcher to write
``Workload.status.nominatedClusterNames`` as the field manager ``kueue-admission`` (its
``docs/concepts/multikueue.md``, "Known limitation"): Kueue applies the admission status as
that manager and leaves the nominations out once it sets ``clusterName``, which removes them
only if that manager owns them. An apply is a manager's whole intent, though: a body with
the nominations alone would also remove every other status field the manager owns
(admission, conditions, checks). ``owned`` cuts out of an object exactly what one
managedFields entry says the manager owns, so the apply carries those unchanged values
plus the one field being set.

The entry's ``fieldsV1`` is the structured-merge-diff set: ``f:<name>`` a field, ``k:<json>``
a list item by its keys, ``v:<json>`` a set's value, ``i:<n>`` an item by index, ``.`` the
node itself; an empty set under a field means the whole value (a leaf, or an atomic list or
map).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["apply_entry", "owned"]


def apply_entry(obj: Mapping[str, Any], *, manager: str, subresource: str = ""
                ) -> Mapping[str, Any]:
    """The ``fieldsV1`` of ``manager``'s Apply entry on ``subresource`` ({} if none)."""
    for entry in (obj.get("metadata") or {}).get("managedFields") or ():
        if isinstance(entry, Mapping) and entry.get("manager") == manager \
                and entry.get("operation") == "Apply" \
                and (entry.get("subresource") or "") == subresource:
            fields = entry.get("fieldsV1")
            return fields if isinstance(fields, Mapping) else {}
    return {}


def owned(value: Any, fields: Mapping[str, Any]) -> Any:
    """The part of ``value`` that ``fields`` names (see the module docstring)."""
    children = {k: v for k, v in fields.items() if k != "."}
    if not children:
        return value if not fields or not isinstance(value, Mapping | list) else \
            ({} if isinstance(value, Mapping) else [])
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, sub in children.items():
            if key.startswith("f:") and key[2:] in value:
                out[key[2:]] = owned(value[key[2:]], sub if isinstance(sub, Mapping) else {})
        return out
    if isinstance(value, list):
        return [owned(item, sub if isinstance(sub, Mapping) else {})
                for key, sub in children.items()
                for item in _items(value, key)]
    return value


def _items(values: list[Any], key: str) -> list[Any]:
    """The items of a list one ``k:``, ``v:`` or ``i:`` key names (none when absent)."""
    kind, _, text = key.partition(":")
    if kind == "i":
        index = int(text)
        return [values[index]] if 0 <= index < len(values) else []
    wanted = json.loads(text)
    if kind == "v":
        return [v for v in values if v == wanted]
    if kind == "k" and isinstance(wanted, Mapping):
        return [v for v in values if isinstance(v, Mapping)
                and all(v.get(k) == want for k, want in wanted.items())][:1]
    return []
