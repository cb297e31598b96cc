"""Shared hypothesis strategies and budgets for the fuzz suite.

Budgets are fixed (``max_examples``, no deadline) so a CI run costs the same every time;
``derandomize`` keeps CI reproducible, while ``FUZZ_EXAMPLES`` in the environment lets a
long local run search further (and with fresh randomness).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Mapping
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

__all__ = ["BUDGET", "json_values", "mutate", "paths_of"]

_EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "0"))
BUDGET = settings(max_examples=_EXAMPLES or 120, deadline=None, derandomize=not _EXAMPLES,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

scalars = (st.none() | st.booleans() | st.integers(-2**63, 2**63)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=16)
           | st.sampled_from(["", "0", "-1", "1e9", "4Gi", "nvidia.com/gpu", "~", "null",
                              "'", "{", "..", "/etc/passwd", "https://", "\x00", "é"]))

json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10) | st.sampled_from(
        ["name", "spec", "status", "server", "token", "user", "cluster", "context",
         "replicas", "template", "containers", "resources", "limits", "nvidia.com/gpu"]),
        inner, max_size=4),
    max_leaves=20)


def paths_of(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path (keys and indexes) into a JSON-like value, the root included."""
    out = [prefix]
    if isinstance(value, Mapping):
        for k, v in value.items():
            out += paths_of(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths_of(v, (*prefix, i))
    return out


def mutate(value: Any, path: tuple[Any, ...], replacement: Any, *, delete: bool = False) -> Any:
    """A deep copy of ``value`` with the node at ``path`` replaced (or deleted)."""
    out = copy.deepcopy(value)
    if not path:
        return replacement
    node = out
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = replacement
    return out


@st.composite
def mutations(draw: st.DrawFn, base: Any) -> Any:
    """``base`` with one random node replaced by random JSON, or deleted."""
    paths = paths_of(base)
    path = draw(st.sampled_from(paths))
    if path and draw(st.booleans()) and draw(st.booleans()):
        return mutate(base, path, None, delete=True)
    return mutate(base, path, draw(json_values))
