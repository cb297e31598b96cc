"""docs/events.md is the code's catalogue: every Event reason, condition and rejection reason.

Read from the source (an AST walk over ``dispatcher/``), never from a hand-kept list:

- Events: the ``reason=`` of every ``.event(...)`` call (``Writer.event``) and every
  ``EventRecorder.record(workload=..., reason=...)``; the type from ``warning=``.
- Dispatch conditions: the ``type_=``/``reason=``/``status=`` of every ``condition(...)``
  (``control.core.record.condition``).
- Rejection reasons: the ``reason=`` of every ``Rejection.of(...)``.
- Definition conditions: every ``Acceptance(accepted, reason, ...)`` of the live catalog.
- MemberCluster conditions: the condition types ``fleet.status.conditions`` writes, with the
  reasons member health can give each (``fleet.health.Reason``, ``kubeconfigs.INSECURE``).

A reason that is not a literal, an enum member or an ``a if c else b`` of those must be
named in ``DYNAMIC`` with the values it can take, computed from the code, so a new computed
reason fails here until someone says what it can be. The page may not miss one, nor list
one the code no longer writes; a fixed status or Event type must agree; every metric it
names must be one the controller registers.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Callable, Iterator
from enum import Enum
from pathlib import Path
from typing import get_args

from dispatcher.control.core.names import PendingReason, Phase
from dispatcher.control.observe import Metrics
from dispatcher.fleet import health
from dispatcher.fleet.admission import State
from dispatcher.fleet.health import Reason
from dispatcher.fleet.kubeconfigs import INSECURE
from dispatcher.workloads.model import GenericStatus

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "dispatcher"
DOC = ROOT / "docs" / "events.md"

ENUMS: dict[str, type[Enum]] = {"PendingReason": PendingReason, "Phase": Phase,
                                "Reason": Reason, "GenericStatus": GenericStatus}

# (file, enclosing function, condition type or "" for Events, expression) -> its values
DYNAMIC: dict[tuple[str, str, str, str], Callable[[], set[str]]] = {
    # the mirror's phase Event: the phase of the copy's generic status
    ("control/actions.py", "_mirror", "", "phase"):
        lambda: {Phase.of_generic(g).value for g in GenericStatus},
    # pending_status(reason: PendingReason): Placed=False with it; Resolved=False with the
    # unresolved ones only (the others are Resolved=True)
    ("control/core/record.py", "pending_status", "Placed", "reason"):
        lambda: {r.value for r in PendingReason},
    ("control/core/record.py", "pending_status", "Resolved", "reason"):
        lambda: {r.value for r in PendingReason if r.unresolved},
    # Writer.event: passes its caller's reason through (the callers are collected)
    ("control/writes.py", "event", "", "reason"): set,
    # a member's own refusal: its Kubernetes reason (Invalid, Forbidden, ...), said in prose
    ("control/submit.py", "create_copy", "", "exc.reason or type(exc).__name__"): set,
    # a copy that cannot be built: its object quarantined, or any other definition failure
    ("control/core/copyplan.py", "plan", "", "reason"): lambda: {"Quarantined", "CopyInvalid"},
    # a Kueue member's admission of the copy: its state (condition reason), as an Event
    ("control/actions.py", "_mirror", "MemberAdmitted", "said[0]"):
        lambda: set(get_args(State)),
    ("control/actions.py", "_mirror", "", "f'Member{said[0]}'"):
        lambda: {f"Member{s}" for s in get_args(State)},
}


class UnknownReason(AssertionError):
    """A computed reason DYNAMIC does not describe."""


class _Calls(ast.NodeVisitor):
    """Every call of the catalogue's helpers, with the file and enclosing function."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.function = ""
        self.found: list[tuple[str, str, ast.Call]] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> None:
        outer, self.function = self.function, node.name
        self.generic_visit(node)
        self.function = outer

    def visit_Call(self, node: ast.Call) -> None:
        self.found.append((self.path, self.function, node))
        self.generic_visit(node)


def _calls() -> Iterator[tuple[str, str, ast.Call]]:
    for file in sorted(PACKAGE.rglob("*.py")):
        visitor = _Calls(str(file.relative_to(PACKAGE)))
        visitor.visit(ast.parse(file.read_text()))
        yield from visitor.found


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _values(node: ast.expr, where: tuple[str, str, str]) -> set[str]:
    """Every value ``node`` can take (see the module docstring)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _values(node.body, where) | _values(node.orelse, where)
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id in ENUMS:
        return {str(ENUMS[node.value.id][node.attr].value)}
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
            and node.func.id == "str" and len(node.args) == 1:
        return _values(node.args[0], where)
    key = (*where, ast.unparse(node))
    if key not in DYNAMIC:
        raise UnknownReason(f"{key[0]}: {key[1]}: reason {key[3]!r} is computed: add it to "
                            f"DYNAMIC with the values it can take")
    return DYNAMIC[key]()


def _method(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else \
        call.func.id if isinstance(call.func, ast.Name) else ""


def code_events() -> dict[str, set[str]]:
    """Event reason -> the types (Normal, Warning) it is written with."""
    out: dict[str, set[str]] = defaultdict(set)
    for path, function, call in _calls():
        name = _method(call)
        reason = _kw(call, "reason")
        if reason is None or not isinstance(call.func, ast.Attribute) or not (
                name == "event" or (name == "record" and _kw(call, "workload") is not None)):
            continue
        warning = _kw(call, "warning")
        kinds = ({"Normal"} if warning is None or (isinstance(warning, ast.Constant)
                                                   and warning.value is False)
                 else {"Warning"} if isinstance(warning, ast.Constant)
                 else {"Normal", "Warning"})
        for value in _values(reason, (path, function, "")):
            out[value] |= kinds
    return dict(out)


def _status(node: ast.expr | None) -> str | None:
    """A fixed condition status ("True", "False"), or None when computed."""
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        return str(node.value)
    return None


def code_conditions() -> dict[tuple[str, str], set[str | None]]:
    """(type, reason) -> statuses (None: computed) of the Dispatch conditions."""
    out: dict[tuple[str, str], set[str | None]] = defaultdict(set)
    for path, function, call in _calls():
        type_ = _kw(call, "type_")
        if _method(call) != "condition" or type_ is None:
            continue
        assert isinstance(type_, ast.Constant), f"{path}: {function}: a computed type_"
        reason = _kw(call, "reason")
        assert reason is not None
        for value in _values(reason, (path, function, str(type_.value))):
            out[(str(type_.value), value)].add(_status(_kw(call, "status")))
    return dict(out)


def code_rejections() -> set[str]:
    out: set[str] = set()
    for path, function, call in _calls():
        if _method(call) == "of" and isinstance(call.func, ast.Attribute) \
                and isinstance(call.func.value, ast.Name) and call.func.value.id == "Rejection":
            reason = _kw(call, "reason")
            assert reason is not None
            out |= _values(reason, (path, function, ""))
    return out


def code_definition_conditions() -> dict[tuple[str, str], set[str | None]]:
    out: dict[tuple[str, str], set[str | None]] = defaultdict(set)
    for path, _, call in _calls():
        if path == "workloads/hubdefinitions.py" and _method(call) == "Acceptance" \
                and isinstance(call.func, ast.Name):
            accepted, reason = call.args[0], call.args[1]
            assert isinstance(reason, ast.Constant), "a computed definition verdict reason"
            out[("Accepted", str(reason.value))].add(_status(accepted))
    return dict(out)


def code_member_conditions() -> dict[tuple[str, str], set[str | None]]:
    """The types ``fleet.status.conditions`` writes (read from its tuples), each with the
    reasons member health gives it: ``Ready`` every failure (``Connected`` when True);
    ``Reachable`` ``APIServerAnswering`` while it answers, else the failure that says the
    network failed or is unknown (never one that proves an answer); ``TLSVerified`` the
    insecure transports."""
    types = set()
    source = (PACKAGE / "fleet" / "status.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.name == "conditions":
            types |= {t.elts[0].value for t in ast.walk(node) if isinstance(t, ast.Tuple)
                      and t.elts and isinstance(t.elts[0], ast.Constant)
                      and isinstance(t.elts[0].value, str)}
    answered = {Reason.CONNECTED, Reason.SYNCING, *health._ANSWERED}
    reasons: dict[str, dict[str, set[str | None]]] = {
        "Ready": {r.value: {"True" if r is Reason.CONNECTED else "False"}
                  for r in Reason if r is not Reason.ANSWERING},
        "Reachable": {Reason.ANSWERING.value: {"True"},
                      **{r.value: {None} for r in Reason
                         if r is not Reason.ANSWERING and r not in answered}},
        "TLSVerified": {key: {"False"} for key in INSECURE},
    }
    assert types == set(reasons), f"MemberCluster condition types {types}: say their reasons"
    return {(t, r): s for t, by in reasons.items() for r, s in by.items()}


# -- the page ----------------------------------------------------------------------------

def _sections() -> dict[str, list[list[str]]]:
    """Table rows (cells, backticks kept) under each ``##`` heading."""
    out: dict[str, list[list[str]]] = defaultdict(list)
    heading = ""
    for line in DOC.read_text().splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
        elif line.startswith("| `"):
            out[heading].append([c.strip() for c in line.strip().strip("|").split("|")])
    return out


def _name(cell: str) -> str:
    match = re.fullmatch(r"`([^`]+)`", cell)
    assert match, f"docs/events.md: {cell!r} should be a `name`"
    return match.group(1)


def doc_pairs(section: str) -> dict[tuple[str, str], str]:
    """(type, reason) -> the status column of a conditions table."""
    rows = _sections()[section]
    assert rows, f"docs/events.md has no table under '## {section}'"
    pairs = {}
    for row in rows:
        key = (_name(row[0]), _name(row[1]))
        assert key not in pairs, f"docs/events.md: {section}: {key} twice"
        pairs[key] = row[2]
    return pairs


def _same(found: set[object], documented: set[object], what: str) -> None:
    missing, stale = found - documented, documented - found
    assert not missing and not stale, (
        f"docs/events.md, {what}: missing {sorted(map(str, missing))}, no longer written "
        f"by the code {sorted(map(str, stale))}")


def _statuses_agree(found: dict[tuple[str, str], set[str | None]],
                    documented: dict[tuple[str, str], str], what: str) -> None:
    for key, statuses in found.items():
        fixed = {s for s in statuses if s is not None}
        if None not in statuses and len(fixed) == 1:
            assert documented[key] == fixed.pop(), f"docs/events.md, {what}: {key} status"


# -- the tests ---------------------------------------------------------------------------

def test_every_event_reason_is_documented_with_its_type() -> None:
    found = code_events()
    rows = {_name(r[0]): r[1] for r in _sections()["Events"]}
    _same(set(found), set(rows), "Events")
    for reason, kinds in found.items():
        assert rows[reason] in kinds, f"docs/events.md: Event {reason} is {sorted(kinds)}"


def test_every_dispatch_condition_is_documented() -> None:
    found, documented = code_conditions(), doc_pairs("Dispatch conditions")
    _same(set(found), set(documented), "Dispatch conditions")
    _statuses_agree(found, documented, "Dispatch conditions")


def test_every_pending_reason_is_a_placed_condition() -> None:
    documented = doc_pairs("Dispatch conditions")
    assert {("Placed", r.value) for r in PendingReason} <= set(documented)


def test_every_member_condition_is_documented() -> None:
    found, documented = code_member_conditions(), doc_pairs("MemberCluster conditions")
    _same(set(found), set(documented), "MemberCluster conditions")
    _statuses_agree(found, documented, "MemberCluster conditions")


def test_every_definition_condition_is_documented() -> None:
    found, documented = code_definition_conditions(), doc_pairs("Definition conditions")
    _same(set(found), set(documented), "Definition conditions")
    _statuses_agree(found, documented, "Definition conditions")


def test_every_rejection_reason_is_documented() -> None:
    rows = {_name(r[0]) for r in _sections()["Rejection reasons"]}
    _same(code_rejections(), rows, "Rejection reasons")


def test_every_metric_named_is_registered() -> None:
    registered = set()
    for family in Metrics.create().registry.collect():
        registered.add(family.name)
        if family.type == "counter":  # exposed as <name>_total (no sample until labelled)
            registered.add(f"{family.name}_total")
        registered |= {sample.name for sample in family.samples}
    named = set(re.findall(r"`(dispatcher_[a-z_]+)", DOC.read_text()))
    assert named, "docs/events.md names no metric"
    assert named <= registered, f"not exported: {sorted(named - registered)}"


def test_the_collector_sees_what_it_claims() -> None:
    """The walk finds the known call sites (a refactor that hides them fails here, not
    silently as an empty catalogue)."""
    events, conditions = code_events(), code_conditions()
    assert {"Pending", "Submitted", "Rejected", "Running"} <= set(events)
    assert events["Pending"] == {"Warning"} and events["Updated"] == {"Normal"}
    assert ("Placed", "NoFeasibleMember") in conditions
    assert conditions[("Placed", "GaveUp")] == {"False"}
    assert {"NamespaceWeaker", "PodNotAdmitted"} <= code_rejections()


def test_a_computed_reason_must_be_described() -> None:
    call = ast.parse('w.event(x, reason=pick(), message="")').body[0]
    assert isinstance(call, ast.Expr) and isinstance(call.value, ast.Call)
    reason = _kw(call.value, "reason")
    assert reason is not None
    try:
        _values(reason, ("control/new.py", "f", ""))
    except UnknownReason as exc:
        assert "pick()" in str(exc)
    else:
        raise AssertionError("a computed reason passed unnamed")
