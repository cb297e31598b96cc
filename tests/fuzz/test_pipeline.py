"""Workload objects through resolve and placement, as the controller runs them.

Catalog samples with one node replaced (or deleted) and random annotations (pin, selector,
policy: user input) go through ``Catalog.resolve`` and then ``engine.decide`` over the
integration fleet. Each step returns a value or raises its documented error
(``WorkloadError``, ``PlacementError``); a decision that chooses a member assigns exactly
the demand's GPUs to nodes of that member, none beyond a node's free GPUs, and never a
member the pin or the selector excludes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from dispatcher.commands.explain import fleet_snapshots
from dispatcher.fleet.fleetfile import load_fleet
from dispatcher.placement import engine
from dispatcher.placement.model import PlacementError, PlacementRequest
from dispatcher.placement.selector import parse_selector
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.errors import WorkloadError

from .strategies import BUDGET, mutations

TESTS = Path(__file__).resolve().parents[1]
CATALOG = Catalog.builtin()
MEMBERS = fleet_snapshots(load_fleet(TESTS / "integration" / "fleet.yaml"))
LABELS = {m.name: dict(m.labels) for m in MEMBERS}
SAMPLES = []
for _path in sorted((TESTS / "unit" / "workloads" / "catalog").glob("*/*.yaml")):
    if not _path.name.endswith(".frames.yaml"):
        _doc = next(iter(yaml.safe_load_all(_path.read_text())), None)
        if isinstance(_doc, dict):
            SAMPLES.append(_doc)

user_annotations = st.dictionaries(
    st.sampled_from(["dispatcher.io/cluster", "dispatcher.io/cluster-selector",
                     "dispatcher.io/policy"]),
    st.sampled_from(["member-1", "member-2", "nope", "", "region=us-east", "region!=us-east",
                     "region in (eu-west)", "!region", "region", "a=b,=c", "((", "most-free",
                     "best-fit", "worst-fit", ".| halt", "$__loc__", "region=us-east; rm"])
    | st.text(max_size=20), max_size=3)


def _place(workload: Any, notes: dict[str, str]) -> None:
    try:
        resolution = CATALOG.resolve(workload)
    except WorkloadError as exc:
        assert str(exc)
        return
    request = PlacementRequest.from_annotations(
        demand=resolution.demand, api_version=resolution.api_version, kind=resolution.kind,
        annotations=notes)
    try:
        decision = engine.decide(MEMBERS, request)
    except PlacementError as exc:
        assert str(exc)
        return
    if decision.chosen is None:
        return
    assert decision.gpus == resolution.demand.gpus
    if request.pin:
        assert decision.chosen == request.pin
    if request.selector:
        assert parse_selector(request.selector).matches(LABELS[decision.chosen])
    member = next(m for m in MEMBERS if m.name == decision.chosen)
    granted: Counter[str] = Counter()
    for grant in decision.assignment:
        granted[grant.node] += grant.gpus
    assert sum(granted.values()) == resolution.demand.gpus
    for node, gpus in granted.items():
        state = member.capacity.node(node)
        assert state is not None, f"{node} is not a node of {decision.chosen}"
        assert gpus <= state.free


BAD_AFFINITY = {"apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": "j", "namespace": "n"},
                "spec": {"template": {"spec": {
                    "containers": [{"name": "c", "image": "i",
                                    "resources": {"limits": {"nvidia.com/gpu": 1}}}],
                    "affinity": {"nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": 1}]}}}}}}}


@BUDGET
@given(st.sampled_from(range(len(SAMPLES))).flatmap(lambda i: mutations(SAMPLES[i])),
       user_annotations)
@example(BAD_AFFINITY, {})  # matchExpressions: 1 was a TypeError in pod needs
def test_mutated_samples_resolve_and_place(workload: Any, notes: dict[str, str]) -> None:
    _place(workload, notes)


@BUDGET
@given(st.sampled_from(SAMPLES), user_annotations)
def test_samples_with_random_annotations(workload: Any, notes: dict[str, str]) -> None:
    _place(workload, notes)


def test_the_unchanged_samples_do_get_placed() -> None:
    """The fuzzing above is not vacuous: most samples resolve and many fit the fleet."""
    placed = 0
    for sample in SAMPLES:
        resolution = CATALOG.resolve(sample)
        decision = engine.decide(MEMBERS, PlacementRequest(
            demand=resolution.demand, api_version=resolution.api_version,
            kind=resolution.kind))
        placed += decision.chosen is not None
    assert placed >= len(SAMPLES) // 3
