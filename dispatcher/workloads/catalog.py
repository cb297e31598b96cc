"""A set of definitions, found by the apiVersion/kind of the objects they describe.

``Catalog.builtin()`` is the shipped catalog (``definitions/*.yaml``, installed as the
package ``dispatcher.catalog``); ``Catalog.load(paths)`` reads files or directories;
``Catalog.merged(a, b)`` lets later catalogs override earlier ones by definition name
(``--definitions`` over the built-in catalog).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.definitions import expand_paths, load_file, load_text
from dispatcher.workloads.errors import DefinitionError, Issue, NoDefinitionError
from dispatcher.workloads.jqrun import DEFAULT_LIMITS, Limits
from dispatcher.workloads.model import Definition
from dispatcher.workloads.resolve import Resolution, resolve_with

__all__ = ["Catalog"]


class Catalog:
    """Definitions by name, and an index by (apiVersion, kind) of the described objects."""

    def __init__(self, definitions: Iterable[Definition] = ()) -> None:
        by_name: dict[str, Definition] = {}
        for definition in definitions:
            by_name.pop(definition.name, None)  # a later one overrides, and moves last
            by_name[definition.name] = definition
        self._by_name = by_name
        self._by_kind: dict[GroupVersionKind, Definition] = {}
        for definition in by_name.values():
            self._by_kind[definition.gvk] = definition

    @classmethod
    def builtin(cls) -> Catalog:
        """The catalog shipped with the package (loaded once per process)."""
        return _builtin()

    @classmethod
    def load(cls, paths: Iterable[str | Path]) -> Catalog:
        """Definitions from files/directories; DefinitionError listing every problem."""
        definitions: list[Definition] = []
        issues: list[Issue] = []
        for path in expand_paths(paths):
            try:
                definitions.extend(load_file(path))
            except DefinitionError as error:
                issues.extend(error.issues)
        return _checked(definitions, issues)

    @classmethod
    def merged(cls, *catalogs: Catalog) -> Catalog:
        """One catalog; for equal names (or equal kinds) the later catalog wins."""
        out: list[Definition] = []
        for catalog in catalogs:
            kinds = {d.gvk for d in catalog.definitions}
            out = [d for d in out if d.gvk not in kinds]
            out.extend(catalog.definitions)
        return cls(out)

    @property
    def definitions(self) -> tuple[Definition, ...]:
        """Every definition, in load order."""
        return tuple(self._by_name.values())

    def kinds(self) -> tuple[GroupVersionKind, ...]:
        """Every described object type."""
        return tuple(d.gvk for d in self._by_name.values())

    def get(self, name: str) -> Definition | None:
        """The definition called ``name``."""
        return self._by_name.get(name)

    def find(self, api_version: str, kind: str) -> Definition | None:
        """The definition for objects of this apiVersion and kind, if any."""
        return self._by_kind.get(GroupVersionKind.of(api_version, kind))

    def require(self, obj: Any) -> Definition:
        """The definition for ``obj``, else NoDefinitionError naming what is loaded."""
        api_version = obj.get("apiVersion") if isinstance(obj, Mapping) else None
        kind = obj.get("kind") if isinstance(obj, Mapping) else None
        found = self.find(str(api_version), str(kind))
        if found is None:
            raise NoDefinitionError(api_version=str(api_version), kind=str(kind),
                                    known=[f"{d.name} ({d.api_version} {d.kind})"
                                           for d in self.definitions])
        return found

    def resolve(self, obj: Any, *, limits: Limits = DEFAULT_LIMITS) -> Resolution:
        """Resolve ``obj`` through its definition (see ``resolve.resolve``)."""
        return resolve_with(self.require(obj), obj, limits=limits)

    def __len__(self) -> int:
        return len(self._by_name)


@cache
def _builtin() -> Catalog:
    root = files("dispatcher.catalog")
    definitions: list[Definition] = []
    issues: list[Issue] = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith((".yaml", ".yml", ".json")) or not entry.is_file():
            continue
        try:
            definitions.extend(load_text(entry.read_text(encoding="utf-8"),
                                         source=f"definitions/{entry.name}"))
        except DefinitionError as error:
            issues.extend(error.issues)
    return _checked(definitions, issues)


def _conflicts(definitions: Iterable[Definition]) -> list[Issue]:
    """Two definitions of one source set for the same kind: ambiguous, so an error."""
    seen: dict[GroupVersionKind, Definition] = {}
    issues = []
    for definition in definitions:
        key = definition.gvk
        other = seen.get(key)
        if other is not None and other.name != definition.name:
            issues.append(Issue(
                source=definition.source, definition=definition.name, field="",
                message=f"describes {key.api_version} {key.kind} like definition {other.name} "
                        f"({other.source}); one definition per kind"))
        seen[key] = definition
    return issues


def _checked(definitions: list[Definition], issues: list[Issue]) -> Catalog:
    """The catalog of ``definitions``, or DefinitionError with every problem: the load
    ``issues`` and the kinds two definitions describe."""
    issues = [*issues, *_conflicts(definitions)]
    if issues:
        raise DefinitionError(issues)
    return Catalog(definitions)
