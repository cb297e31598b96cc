"""Is a pod template a valid Pod? Checked before anything is placed or submitted.

A member's apiserver (or the framework's controller, later) rejects a template whose
containers lack a name or image, whose ``command``/``args`` hold non-strings, or whose
resources do not parse; found only after submission, such a workload fails on the
member after a decision was recorded. The problems are found at resolve time instead,
each naming the field relative to the pod spec (``containers[0].command[1]``), which
``resolve`` turns into a ``TemplateError`` with the path in the workload object.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from dispatcher.workloads.quantity import parse_quantity

__all__ = ["TemplateProblem", "check_pod_spec", "value_type"]

_MAP = (dict, Mapping)


class TemplateProblem(ValueError):
    """One invalid field of a pod spec: where (relative to the spec) and what is wrong."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}" if where else reason)


def value_type(value: Any) -> str:
    """A JSON type name for messages (``number 8``, not ``int``)."""
    return {dict: "object", list: "list", str: "string", bool: "boolean",
            int: "number", float: "number"}.get(type(value), type(value).__name__)


def check_pod_spec(spec: Any, *, required: tuple[str, ...] = ("name", "image")) -> None:
    """Raise TemplateProblem for the first field that cannot be part of a valid Pod.

    ``required``: the container fields that must be non-empty strings. A PodTemplateSpec
    becomes Pods as written (both). A framework's inline pod spec (Knative, KServe) gets
    container names from the framework's webhook (``("image",)``); one assembled from
    fragments may get its image from the framework too (``()``). Present fields must
    still be strings.
    """
    if spec is None:
        return
    if not isinstance(spec, _MAP):
        raise TemplateProblem("", f"pod spec must be an object, not {value_type(spec)}")
    for group in ("initContainers", "containers"):
        containers = spec.get(group)
        if containers is None:
            continue
        if not isinstance(containers, list):
            raise TemplateProblem(group, f"must be a list, not {value_type(containers)}")
        for i, container in enumerate(containers):
            _check_container(container, f"{group}[{i}]", required=required)


def _check_container(container: Any, where: str, *, required: tuple[str, ...]) -> None:
    if not isinstance(container, _MAP):
        raise TemplateProblem(where, f"must be an object, not {value_type(container)}")
    for key in ("name", "image"):
        value = container.get(key)
        if value is None or value == "":
            if key in required:
                raise TemplateProblem(f"{where}.{key}", "is required")
            continue
        if not isinstance(value, str):
            raise TemplateProblem(f"{where}.{key}",
                                  f"must be a string, not {value_type(value)} {value!r}")
    for key in ("command", "args"):
        items = container.get(key)
        if items is None:
            continue
        if not isinstance(items, list):
            raise TemplateProblem(f"{where}.{key}",
                                  f"must be a list of strings, not {value_type(items)}")
        for j, item in enumerate(items):
            if not isinstance(item, str):
                raise TemplateProblem(f"{where}.{key}[{j}]",
                                      f"must be a string, not {value_type(item)} {item!r}")
    resources = container.get("resources")
    if resources is None:
        return
    if not isinstance(resources, _MAP):
        raise TemplateProblem(f"{where}.resources",
                              f"must be an object, not {value_type(resources)}")
    for block in ("requests", "limits"):
        amounts = resources.get(block)
        if amounts is None:
            continue
        if not isinstance(amounts, _MAP):
            raise TemplateProblem(f"{where}.resources.{block}",
                                  f"must be an object, not {value_type(amounts)}")
        for name, amount in amounts.items():
            try:
                parse_quantity(amount)
            except ValueError as error:
                raise TemplateProblem(f"{where}.resources.{block}[{json.dumps(name)}]",
                                      str(error)) from None
