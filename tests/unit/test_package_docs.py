"""Package docstrings that list their modules name each module that exists, and only those.

Covers ``control``, ``control/core``, ``fleet``, ``sim`` and ``workloads``, whose docstrings
are their module maps: a module added, moved or renamed without its package's docstring
fails here. A name in
double backquotes that is a bare lowercase identifier must be a module of the package or
a top-level part of ``dispatcher`` (``fleet``, ``placement``); dotted and other names are
not checked. Not covered: docs/architecture.md (prose, kept by review).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dispatcher"
MAPPED = ("control", "control/core", "fleet", "sim", "workloads")
_NAMED = re.compile(r"``([a-z_][a-z0-9_]*)``")


def _modules(directory: Path) -> set[str]:
    return ({p.stem for p in directory.glob("*.py") if p.stem != "__init__"}
            | {p.name for p in directory.iterdir() if (p / "__init__.py").is_file()})


def named(docstring: str) -> set[str]:
    """The bare lowercase identifiers in double backquotes."""
    return set(_NAMED.findall(docstring))


def test_named_reads_only_bare_identifiers() -> None:
    assert named("``queue`` (``PendingQueue``), ``shell.app``, ``--report``, ``a b``") == {
        "queue"}


@pytest.mark.parametrize("package", MAPPED)
def test_the_package_docstring_names_its_modules(package: str) -> None:
    directory = PACKAGE / package
    doc = ast.get_docstring(ast.parse((directory / "__init__.py").read_text())) or ""
    modules = _modules(directory)
    assert sorted(modules - named(doc)) == [], "modules the docstring does not name"
    assert sorted(named(doc) - modules - _modules(PACKAGE)) == [], \
        "names in the docstring that are no module here"
