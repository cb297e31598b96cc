"""FleetSettings: safe defaults, documented fields, validation with the key's name."""

from __future__ import annotations

import ast
import inspect
from dataclasses import fields

import pytest

from dispatcher.fleet import settings as module
from dispatcher.fleet.settings import FleetSettings, StaticMember


def test_defaults_are_safe() -> None:
    s = FleetSettings()
    assert s.secret_namespace == "dispatcher-system"
    assert s.static_members == ()
    assert s.probe_interval_s + s.request_timeout_s <= s.unreachable_after_s


def test_every_field_has_a_docstring() -> None:
    """Each field is followed by a string literal (what the config reference shows)."""
    tree = ast.parse(inspect.getsource(module))
    for cls in (FleetSettings, StaticMember):
        node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
        documented = set()
        body = node.body
        for i, stmt in enumerate(body[:-1]):
            nxt = body[i + 1]
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and \
                    isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant):
                documented.add(stmt.target.id)
        assert {f.name for f in fields(cls)} == documented


@pytest.mark.parametrize("field", ["probe_interval_s", "unreachable_after_s",
                                   "status_min_interval_s", "resync_period_s"])
def test_non_positive_durations_name_the_key(field: str) -> None:
    with pytest.raises(ValueError, match=f"fleet.{field}"):
        FleetSettings(**{field: 0})  # type: ignore[arg-type]


def test_duplicate_static_members() -> None:
    with pytest.raises(ValueError, match="duplicate names \\['a'\\]"):
        FleetSettings(static_members=(StaticMember(name="a", kubeconfig="x"),
                                      StaticMember(name="a", kubeconfig="y")))
