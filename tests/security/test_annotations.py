"""Workload annotations are user input: never jq, never a way past placement's rules.

Definitions (operator input) hold every jq expression; a workload only supplies data. So:
hostile annotation and label text changes nothing the catalog computes and never reaches
the jq compiler; the ``dispatcher.io/*`` annotations are parsed as plain values (a pin is a
name, a selector a label selector, a policy a known word) and a pin cannot take a workload
to a member its own selector, a cordon, or the member's namespace allow-list excludes.
"""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import jq
import pytest
import yaml

from dispatcher.commands.explain import fleet_snapshots
from dispatcher.fleet.fleetfile import load_fleet
from dispatcher.placement import engine
from dispatcher.placement.model import PlacementError, PlacementRequest
from dispatcher.workloads.catalog import Catalog

TESTS = Path(__file__).resolve().parents[1]
CATALOG = Catalog.builtin()
MEMBERS = fleet_snapshots(load_fleet(TESTS / "integration" / "fleet.yaml"))
SAMPLES = sorted((TESTS / "unit" / "workloads" / "catalog").glob("*/typical.yaml"))
PAYLOADS = ('") | halt_error(1) | ("', "$__loc__", 'env.HOME', "input", "..|.",
            '"\\(1+1)"', "def f: f; f", '{"a":1} | .a', "$ENV.PATH", "import \"x\" as x; .")
MARK = "zz-injected-zz"


def _hostile(workload: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(workload)
    meta = out.setdefault("metadata", {})
    notes = {f"example.com/p{i}": f"{p} {MARK}" for i, p in enumerate(PAYLOADS)}
    notes.update({f"{MARK}/{i}": p for i, p in enumerate(PAYLOADS)})
    meta["annotations"] = {**(meta.get("annotations") or {}), **notes}
    meta["labels"] = {**(meta.get("labels") or {}), "app": MARK}
    return out


@pytest.mark.parametrize("path", SAMPLES, ids=[p.parent.name for p in SAMPLES])
def test_hostile_annotations_change_nothing_and_never_reach_jq(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workload = yaml.safe_load(path.read_text())
    compiled: list[str] = []
    real = jq.compile

    def spy(program: str, *args: Any, **kwargs: Any) -> Any:
        compiled.append(program)
        return real(program, *args, **kwargs)

    plain = CATALOG.resolve(workload)
    monkeypatch.setattr(jq, "compile", spy)  # the module jqrun compiles through
    fresh = Catalog.load([TESTS.parent / "definitions"])  # compiles its programs anew
    hostile = fresh.resolve(_hostile(workload))
    assert hostile.demand == plain.demand
    assert hostile.status == plain.status
    assert compiled, "the spy saw no jq program: the check would be vacuous"
    assert not [p for p in compiled if MARK in p or PAYLOADS[0] in p]


@pytest.mark.parametrize("annotations, message", [
    ({"dispatcher.io/policy": "$__loc__"}, "unknown placement policy"),
    ({"dispatcher.io/policy": '.[] | halt'}, "unknown placement policy"),
    ({"dispatcher.io/cluster-selector": ".metadata | halt_error"}, "cluster-selector"),
    ({"dispatcher.io/cluster-selector": "region=us-east) or (true"}, "cluster-selector"),
    ({"dispatcher.io/cluster": "member-1 or member-2"}, "does not exist"),
    ({"dispatcher.io/cluster": "*"}, "does not exist"),
])
def test_dispatcher_annotations_are_values_not_code(annotations: dict[str, str],
                                                    message: str) -> None:
    request = _request(annotations)
    with pytest.raises(PlacementError, match=message):
        engine.decide(MEMBERS, request)


def _request(annotations: dict[str, str], namespace: str = "team-a") -> PlacementRequest:
    workload = yaml.safe_load((TESTS / "unit" / "workloads" / "catalog" / "pytorchjob"
                               / "lowercase-keys.yaml").read_text())
    resolution = CATALOG.resolve(workload)
    return PlacementRequest.from_annotations(
        demand=resolution.demand, api_version=resolution.api_version, kind=resolution.kind,
        annotations=annotations, namespace=namespace, count_fits=True)


def test_a_pin_cannot_escape_the_workloads_own_selector() -> None:
    decision = engine.decide(MEMBERS, _request({"dispatcher.io/cluster": "member-2",
                                                "dispatcher.io/cluster-selector":
                                                    "region=us-east"}))
    assert decision.chosen is None
    assert all(v.feasible is False for v in decision.verdicts)


def test_a_pin_cannot_reach_a_cordoned_member() -> None:
    members = [dataclasses.replace(m, cordoned=m.name == "member-2") for m in MEMBERS]
    decision = engine.decide(members, _request({"dispatcher.io/cluster": "member-2"}))
    assert decision.chosen is None
    assert next(v for v in decision.verdicts if v.member == "member-2").reason == "cordoned"


def test_a_pin_cannot_reach_a_namespace_the_member_does_not_allow() -> None:
    members = [dataclasses.replace(m, allowed_namespaces=("team-a",)) for m in MEMBERS]
    decision = engine.decide(members, _request({"dispatcher.io/cluster": "member-1"},
                                               namespace="kube-system"))
    assert decision.chosen is None
    allowed = engine.decide(members, _request({"dispatcher.io/cluster": "member-1"}))
    assert allowed.chosen == "member-1"
