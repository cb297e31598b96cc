"""Raw v1.Node / v1.Pod builders: the same ones the capacity tests use."""

from ..fleet.objects import node, pod

__all__ = ["node", "pod"]
