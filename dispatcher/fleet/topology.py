"""A member's topology levels: which node labels name its racks, blocks, NVLink cliques.

A multi-node GPU gang runs well only inside one fast-network domain; the nodes say which
domain they are in through labels (``nvidia.com/gpu.clique`` from the GPU operator, a
rack or block label from the provider or a tool like Topograph,
``topology.kubernetes.io/zone``). The operator declares, per member (MemberCluster
``spec.topologyLevels``, a static member's ``topologyLevels``, a fleet file member's) or
fleet-wide (``fleet.topologyLevels``), which labels are levels and what to call them, so a
workload may ask for ``dispatcher.io/topology: rack`` without knowing each member's label
keys. Pure; placement reads the levels from ``MemberSnapshot.topology_levels``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["TopologyLevel", "parse_levels", "resolve_level"]

# A label key: optional DNS-subdomain prefix and a name of at most 63 characters.
_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    """One level: its name (``rack``) and the node label whose value names the domain."""

    name: str
    node_label: str


def _label_key_problem(key: str) -> str | None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _PREFIX.match(prefix)):
        return f"{key!r} is not a label key (bad prefix)"
    if not _NAME.match(name):
        return f"{key!r} is not a label key"
    return None


def parse_levels(raw: Any, *, where: str) -> tuple[TopologyLevel, ...]:
    """``[{name, nodeLabel}, ...]`` as levels; ValueError names ``where`` and the entry.

    Names and labels must be unique within one member (a level name that meant two labels
    would make a request ambiguous)."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ValueError(f"{where}: must be a list of {{name, nodeLabel}}")
    levels: list[TopologyLevel] = []
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{at}: must be a mapping with name and nodeLabel")
        unknown = sorted(set(item) - {"name", "nodeLabel"})
        if unknown:
            raise ValueError(f"{at}.{unknown[0]}: unknown key (known: name, nodeLabel)")
        name, label = item.get("name"), item.get("nodeLabel")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{at}.name: is required (a string)")
        if not isinstance(label, str) or not label:
            raise ValueError(f"{at}.nodeLabel: is required (a node label key)")
        problem = _label_key_problem(label)
        if problem:
            raise ValueError(f"{at}.nodeLabel: {problem}")
        if any(level.name == name for level in levels):
            raise ValueError(f"{at}.name: level {name!r} is declared twice")
        if any(level.node_label == label for level in levels):
            raise ValueError(f"{at}.nodeLabel: label {label!r} is declared twice")
        levels.append(TopologyLevel(name=name, node_label=label))
    return tuple(levels)


def resolve_level(asked: str, levels: Sequence[TopologyLevel]) -> TopologyLevel | None:
    """The member's level a request means: by level name first, else by node label key
    (the Workload Map's ``requiredTopologyLevel`` is a label key); None when the member
    declares no such level."""
    for level in levels:
        if level.name == asked:
            return level
    for level in levels:
        if level.node_label == asked:
            return level
    return None
