"""Every code reference in ``docs/`` and the README resolves in the tree.

A reference is a name in single backquotes of one of two forms: a path into the tree
(``control/submit.py``, ``deploy/base/rbac.yaml``, ``control/core/copyplan.plan``: a file under
the repository or under ``dispatcher/``, and for a Python module the names after it defined
there), or ``Class.member`` with a class of the package (``Reconciler.plan_copy``). A path
whose first part is no folder of the tree (``batch/v1``) is not a reference; lowercase
``module.name`` is not checked (it cannot be told from config keys and log lines such as
``watch.namespaces``). A method renamed or a file moved without its page fails here.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dispatcher"
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
UPSTREAM = {"docs/examples", "docs/catalog/*.yaml"}
"""Paths in other projects' repositories, named with the repository in the text."""
_TICKED = re.compile(r"(?<!`)`([^`\s]+)`(?!`)")
_FILE = re.compile(r"\.(md|ya?ml|json|toml|txt|sh|go|tsv|html|cfg)$")
_MODULE_PATH = re.compile(r"^((?:[a-z_]+/)+[a-z_0-9]+)(?:\.py)?((?:\.[A-Za-z_]\w*)*)$")
_CLASS_MEMBER = re.compile(r"^([A-Z]\w*)((?:\.[A-Za-z_]\w*)+)(?:\(\))?$")


@cache
def defined(path: Path) -> frozenset[str]:
    """Names a module defines anywhere: functions, classes, assigned names and attributes
    (one set: ``module.Class.member`` is checked name by name against it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        for target in targets:
            if isinstance(target, ast.Name):
                names.add(target.id)
            elif isinstance(target, ast.Attribute):
                names.add(target.attr)
    return frozenset(names)


@cache
def classes() -> dict[str, tuple[Path, ...]]:
    found: dict[str, list[Path]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(path)
    return {name: tuple(paths) for name, paths in found.items()}


def _in_tree(relative: str) -> list[Path]:
    return [p for base in (ROOT, PACKAGE) for p in base.glob(relative)] \
        if "*" in relative else [p for base in (ROOT, PACKAGE) if (p := base / relative).exists()]


def problem(reference: str) -> str | None:
    """Why ``reference`` does not resolve, or None (also for what is not a reference)."""
    reference = reference.rstrip(".,;:")
    if "{" in reference or "<" in reference:
        return None  # a brace list or a placeholder, spelled out in the prose next to it
    if "/" in reference:
        top = reference.split("/")[0]
        if top in (".", "..") or not ((ROOT / top).is_dir() or (PACKAGE / top).is_dir()) \
                or reference in UPSTREAM:  # "../shared/...": beside the clone, not in it
            return None
        if _FILE.search(reference) or reference.endswith("/"):
            return None if _in_tree(reference.rstrip("/")) else "no such file"
        match = _MODULE_PATH.match(reference)
        if match is None:
            return None
        module, attrs = match.groups()
        files = _in_tree(f"{module}.py") or _in_tree(module)
        if not files:
            return "no such module"
        missing = [a for a in attrs.split(".") if a and files[0].suffix == ".py"
                   and a not in defined(files[0])]
        return f"{files[0].relative_to(ROOT)} defines no {missing[0]}" if missing else None
    match = _CLASS_MEMBER.match(reference)
    if match is None or match.group(1) not in classes():
        return None
    member = match.group(2).split(".")[1]
    if not any(member in defined(path) for path in classes()[match.group(1)]):
        return f"class {match.group(1)} has no {member}"
    return None


def test_the_check_tells_a_broken_reference() -> None:
    assert problem("control/core/copyplan.plan") is None
    assert problem("control/core/copyplan.py") is None
    assert problem("deploy/base/rbac.yaml") is None
    assert problem("batch/v1") is None and problem("`spec.decision`") is None
    assert problem("control/submit.MemberWrites._admit") == \
        "dispatcher/control/submit.py defines no _admit"
    assert problem("control/submit.nothing_here") == \
        "dispatcher/control/submit.py defines no nothing_here"
    assert problem("control/nothere.py") == "no such module"
    assert problem("deploy/base/nothere.yaml") == "no such file"
    assert problem("Reconciler._submit") == "class Reconciler has no _submit"
    assert problem("Reconciler.plan_copy") is None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_reference_resolves(page: Path) -> None:
    broken = [(ref, why) for ref in _TICKED.findall(page.read_text())
              if (why := problem(ref)) is not None]
    assert broken == [], f"{page.name}: references that do not resolve"
