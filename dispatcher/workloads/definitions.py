"""Load and validate definitions (Workload Map ``ResourceInterface`` and ``Karta``).

Reads one or many documents per file (YAML or JSON), applies the CRD defaults, checks the
structure like upstream's validator plus the dispatcher's extensions, checks and compiles
every jq path once, and returns frozen ``Definition`` values. Every problem of a file is
reported (file, definition, field path, message), never just the first. See
docs/definitions.md for the format.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from dispatcher.workloads.errors import DefinitionError, Issue
from dispatcher.workloads.model import Definition
from dispatcher.workloads.reader import DocReader

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when present: 10x faster

__all__ = [
    "dump_json", "expand_paths", "load_file", "load_text", "parse_documents", "summary",
    "validate_paths",
]


def load_file(path: str | Path) -> list[Definition]:
    """Every definition in one file; DefinitionError listing all problems if any."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DefinitionError([Issue(source=source, definition="", field="",
                                     message=f"cannot read: {error}")]) from error
    return load_text(text, source=source)


def load_text(text: str, *, source: str) -> list[Definition]:
    """Every definition in ``text`` (YAML or JSON, one or many documents)."""
    documents = parse_documents(text, source=source)
    definitions: list[Definition] = []
    issues: list[Issue] = []
    for index, document in enumerate(documents):
        reader = DocReader(source=source, document=document, index=index)
        definition = reader.build()
        issues.extend(reader.issues)
        if definition is not None and not reader.issues:
            definitions.append(definition)
    if issues:
        raise DefinitionError(issues)
    return definitions


def parse_documents(text: str, *, source: str) -> list[Any]:
    """The documents of a file: YAML multi-doc, a JSON value, a list, or a ``List``."""
    try:
        loaded = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as error:
        raise DefinitionError([Issue(source=source, definition="", field="",
                                     message=f"not valid YAML/JSON: {_one_line(error)}")]
                              ) from error
    documents: list[Any] = []
    for item in loaded:
        if item is None:
            continue
        if isinstance(item, list):
            documents.extend(item)
        elif isinstance(item, Mapping) and item.get("kind") == "List" \
                and isinstance(item.get("items"), list):
            documents.extend(item["items"])
        else:
            documents.append(item)
    if not documents:
        raise DefinitionError([Issue(source=source, definition="", field="",
                                     message="no definitions in file")])
    return documents


def validate_paths(paths: Iterable[str | Path]) -> list[Issue]:
    """Every problem in the given files or directories (``*.yaml``, ``*.yml``, ``*.json``)."""
    issues: list[Issue] = []
    for path in expand_paths(paths):
        try:
            load_file(path)
        except DefinitionError as error:
            issues.extend(error.issues)
    return issues


def expand_paths(paths: Iterable[str | Path]) -> list[Path]:
    """Files as given, directories as their definition files in name order.

    A file named twice (``defs/ defs/a.yaml``) is listed once, else its problems would be
    reported twice and it would conflict with itself.
    """
    out: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out.extend(sorted(p for p in path.iterdir()
                              if p.suffix in (".yaml", ".yml", ".json") and p.is_file()))
        else:
            out.append(path)
    return _unique(out)


def _unique(paths: Iterable[Path]) -> list[Path]:
    seen: set[Path] = set()
    out: list[Path] = []
    for path in paths:
        key = path.resolve() if path.exists() else path
        if key not in seen:
            seen.add(key)
            out.append(path)
    return out


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())


def summary(definition: Definition) -> dict[str, Any]:
    """A plain dict describing a definition (for ``dispatcher definitions list``)."""
    return {
        "name": definition.name,
        "apiVersion": definition.api_version,
        "kind": definition.kind,
        "format": definition.format,
        "components": [c.name for c in definition.components],
        "source": definition.source,
        "gangs": definition.gangs.form if definition.gangs else None,
    }


def dump_json(definition: Definition) -> str:
    """The definition document as JSON (after CRD defaults), for debugging."""
    return json.dumps(definition.document, indent=2, sort_keys=True)


