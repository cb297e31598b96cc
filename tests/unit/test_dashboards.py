"""The Grafana dashboards of deploy/dashboards/: every query parses and names real metrics.

Covers: each dashboard is JSON with a title, uid and panels; every panel has a query, and
every query (panel targets and ``label_values`` variables) is valid PromQL once Grafana's
variables are substituted (parsed by promql-parser, a port of Prometheus's own parser);
every metric it names is one ``Metrics`` declares (its registry and the controller's
scrape-time probe); the same for the alert rules documented in docs/operator-guide.md
(section 5), whose metrics are also in its table. Helpers here are shared with
tests/e2e/test_dashboards.py, which checks the same names against a live scrape of a
running controller.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from dispatcher.control.core.queue import PendingQueue
from dispatcher.control.meters import ControllerProbe
from dispatcher.control.observe import Metrics

DASHBOARDS = Path(__file__).resolve().parents[2] / "deploy" / "dashboards"
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<expr>.+),\s*)?(?P<label>\w+)\)$")


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARDS.glob("*.json"))}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels") or [])  # collapsed rows hold their panels


def queries(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    for panel in _panels(dashboard.get("panels") or []):
        for target in panel.get("targets") or []:
            yield f"panel {panel.get('title')!r}", str(target["expr"])
    for variable in (dashboard.get("templating") or {}).get("list") or []:
        if variable.get("type") != "query":
            continue
        query = variable["query"]
        text = query["query"] if isinstance(query, dict) else str(query)
        match = _LABEL_VALUES.match(text.strip())
        assert match, f"variable {variable['name']}: only label_values(...) is used: {text}"
        if match["expr"]:
            yield f"variable {variable['name']}", match["expr"]


def substituted(expr: str) -> str:
    """Grafana's variables replaced by values of the same shape: intervals by a duration,
    anything else by a plain word (they appear inside label matchers' quotes)."""
    expr = re.sub(r"\$__(rate_interval|interval|range)\b", "5m", expr)
    return re.sub(r"\$\{?\w+\}?", "x", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects; raises ValueError if it is not valid PromQL."""
    return _names(promql_parser.parse(substituted(expr)))


def _names(node: Any) -> set[str]:
    if isinstance(node, promql_parser.VectorSelector):
        if node.name:
            return {node.name}
        named = {m.value for m in node.matchers.matchers if m.name == "__name__"}
        assert named, f"a selector without a metric name: {node}"
        return named
    if isinstance(node, promql_parser.MatrixSelector):
        return _names(node.vector_selector)
    if isinstance(node, promql_parser.Call):
        return set().union(*(_names(a) for a in node.args))
    if isinstance(node, promql_parser.AggregateExpr):
        return _names(node.expr) | (_names(node.param) if node.param is not None else set())
    if isinstance(node, promql_parser.BinaryExpr):
        return _names(node.lhs) | _names(node.rhs)
    if isinstance(node, promql_parser.ParenExpr | promql_parser.UnaryExpr
                  | promql_parser.SubqueryExpr):
        return _names(node.expr)
    if isinstance(node, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        return set()
    raise AssertionError(f"unknown PromQL node {type(node).__name__}: {node}")


def used_metrics() -> dict[str, set[str]]:
    """metric name -> where the dashboards use it."""
    out: dict[str, set[str]] = {}
    for file, dashboard in dashboards().items():
        for where, expr in queries(dashboard):
            try:
                names = metric_names(expr)
            except ValueError as exc:
                pytest.fail(f"{file}, {where}: not valid PromQL ({exc}): {expr}")
            for name in names:
                out.setdefault(name, set()).add(f"{file}: {where}")
    return out


def sample_names(text: str, *, declared: bool = False) -> set[str]:
    """The sample names of a Prometheus text scrape; with ``declared``, also the names a
    family with no sample yet would have (a labelled counter nothing has counted)."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        names |= {s.name for s in family.samples}
        if declared:
            suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                        "summary": ("_sum", "_count")}.get(family.type, ("",))
            names |= {family.name + s for s in suffixes}
    return names


class _EmptyFleet:
    def snapshots(self) -> list[Any]:
        return []


def test_every_dashboard_is_well_formed() -> None:
    found = dashboards()
    assert {"fleet.json", "pipeline.json", "controller.json"} <= set(found)
    uids = [d["uid"] for d in found.values()]
    assert len(set(uids)) == len(uids)
    for file, dashboard in found.items():
        assert dashboard["title"].startswith("Dispatcher / "), file
        panels = list(_panels(dashboard["panels"]))
        assert panels, file
        for panel in panels:
            if panel["type"] != "row":
                assert panel.get("targets"), f"{file}: panel {panel['title']!r} has no query"


def test_every_query_names_a_metric_the_controller_declares() -> None:
    metrics = Metrics.create()
    metrics.attach(ControllerProbe(metrics=metrics, queue=PendingQueue(backfill_limit=1),
                                   fleet=_EmptyFleet(),  # type: ignore[arg-type]
                                   running=lambda: 0, workers=1))
    declared = sample_names(metrics.render().decode(), declared=True)
    used = used_metrics()
    assert {n for n in used if n.startswith("dispatcher_")} >= {
        "dispatcher_member_free_gpus", "dispatcher_member_allocatable_gpus",
        "dispatcher_member_ready", "dispatcher_queue_depth", "dispatcher_reconcile_total",
        "dispatcher_leader", "dispatcher_member_api_requests_total"}
    unknown = {name: sorted(where) for name, where in used.items() if name not in declared}
    assert not unknown, f"dashboards use metrics the controller does not export: {unknown}"


@pytest.mark.parametrize("expr", ["sum(rate(nope[5m])", "foo{", "histogram_quantile(0.9)",
                                  "no_such_function(x)"])
def test_invalid_promql_is_refused(expr: str) -> None:
    with pytest.raises(ValueError):
        metric_names(expr)


def test_names_are_found_wherever_they_are_in_an_expression() -> None:
    expr = ('histogram_quantile(0.99, sum by (le) (rate(a_bucket{member=~"$member"}'
            '[$__rate_interval]))) / on() group_left -b + max_over_time(c[1h:5m]) '
            'or {__name__="d"} > bool 1 unless topk(3, (e))')
    assert metric_names(expr) == {"a_bucket", "b", "c", "d", "e"}


def test_the_documented_alerts_are_valid_and_name_declared_metrics() -> None:
    """The rule file in docs/operator-guide.md (section 5, "Metrics and the alerts worth
    setting") parses as YAML and PromQL, and names only declared metrics."""
    guide = (DASHBOARDS.parents[1] / "docs" / "operator-guide.md").read_text()
    section = guide[guide.index("### Metrics and the alerts worth setting"):]
    block = section[section.index("```yaml\n") + 8:]
    rules = yaml.safe_load(block[:block.index("```")])["groups"][0]["rules"]
    assert len(rules) >= 10
    metrics = Metrics.create()
    metrics.attach(ControllerProbe(metrics=metrics, queue=PendingQueue(backfill_limit=1),
                                   fleet=_EmptyFleet(),  # type: ignore[arg-type]
                                   running=lambda: 0, workers=1))
    declared = sample_names(metrics.render().decode(), declared=True)
    for rule in rules:
        names = metric_names(rule["expr"])
        assert names and names <= declared, f"{rule['alert']}: {names - declared}"
        documented = {n.removesuffix("_bucket") for n in names}
        assert all(f"`{n}`" in section for n in documented), rule["alert"]
