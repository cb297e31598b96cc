"""The hub hold of a definition (``copyDefinition.hubHold``): read at load, put on an object
as a JSON Patch, taken off a copy.

Covered: the three forms and their load errors, the built-in catalog's holds, patches that
create missing parents (checked by applying them), a user's own pause kept on the copy.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import DefinitionError
from dispatcher.workloads.holds import (
    HOLD_ANNOTATION,
    MANAGED_BY,
    Hold,
    HoldState,
    clear_hold,
    dotted,
    hold_patch,
    hold_state,
    parse_path,
)

JOB = Hold(kind="managedBy", path=("spec", "managedBy"), value=MANAGED_BY)
MPI = Hold(kind="managedBy", path=("spec", "runPolicy", "managedBy"), value=MANAGED_BY)
PAUSE = Hold(kind="pause", path=("spec", "paused"), value=True)


def apply(obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """JSON Patch ``add`` and ``remove`` as RFC 6902 says: the parent (``remove``: the
    member) must exist."""
    out = copy.deepcopy(obj)
    for op in ops:
        assert op["op"] in ("add", "remove")
        *parents, last = [p.replace("~1", "/").replace("~0", "~")
                          for p in op["path"].split("/")[1:]]
        node = out
        for part in parents:
            node = node[part]  # KeyError: the patch would be refused
        if op["op"] == "remove":
            del node[last]  # KeyError: the patch would be refused
        else:
            node[last] = op["value"]
    return out


def test_paths_are_plain_field_paths() -> None:
    assert parse_path(".spec.runPolicy.managedBy") == ("spec", "runPolicy", "managedBy")
    for bad in ("spec.managedBy", ".spec[0]", ".spec | .x", ".", "..a", '.a["b"]',
                '.a.""', '.a."b\\"c"', '.a."b', '.a."b".'):
        assert parse_path(bad) is None, bad
    # an annotation key, quoted as in jq (the LLMInferenceService stop annotation)
    quoted = '.metadata.annotations."serving.kserve.io/stop"'
    assert parse_path(quoted) == ("metadata", "annotations", "serving.kserve.io/stop")
    assert dotted(("metadata", "annotations", "serving.kserve.io/stop")) == quoted
    assert dotted(("spec", "run-policy", "x_1")) == ".spec.run-policy.x_1"


@pytest.mark.parametrize(("name", "kind"), [
    ("batch-job", "managedBy"), ("jobset", "managedBy"), ("mpijob", "managedBy"),
    ("deployment", "pause"), ("pytorchjob", "pause"), ("tfjob", "pause"),
    ("statefulset", "refuse"), ("leaderworkerset", "refuse"), ("rayjob", "refuse"),
    ("raycluster", "refuse"), ("rayservice", "refuse"), ("kserve-inferenceservice", "refuse"),
])
def test_every_builtin_kind_says_how_it_is_held(name: str, kind: str) -> None:
    definition = Catalog.builtin().get(name)
    assert definition is not None and definition.hold is not None
    assert definition.hold.kind == kind
    assert definition.hold.kind != "refuse" or "dedicated hub" in definition.hold.reason


def test_no_builtin_definition_lacks_a_hold() -> None:
    assert [d.name for d in Catalog.builtin().definitions if d.hold is None] == []


def _definition(hold: Any) -> str:
    return yaml.safe_dump({
        "apiVersion": "optimization.nvidia.com/v1alpha1", "kind": "ResourceInterface",
        "metadata": {"name": "thing"},
        "spec": {"structureDefinition": {"rootComponent": {
            "name": "thing", "kind": {"group": "example.com", "version": "v1", "kind": "Thing"},
            "specDefinition": {"podTemplateSpecPath": ".spec.template"},
            "statusDefinition": {"statusMappings": {"running": [{"byExpression": {
                "expression": ".status.ok", "expectedResult": "true"}}]}}}},
            "copyDefinition": {"hubHold": hold}}})


@pytest.mark.parametrize(("hold", "message"), [
    ({"managedBy": {"path": ".spec[0]"}}, "plain field path"),
    ({"pause": {"path": ".spec.paused"}}, "must be a scalar"),
    ({"refuse": ""}, "say why"),
    ({"managedBy": {"path": ".spec.m"}, "refuse": "x"}, "exactly one"),
    ({"gate": {}}, "gate"),
])
def test_a_broken_hold_is_a_load_error_naming_the_field(hold: Any, message: str) -> None:
    with pytest.raises(DefinitionError) as caught:
        load_text(_definition(hold), source="thing.yaml")
    assert "copyDefinition.hubHold" in str(caught.value) and message in str(caught.value)


def test_a_valid_hold_loads() -> None:
    (definition,) = load_text(
        _definition({"pause": {"path": ".spec.held", "value": "yes"}}), source="t.yaml")
    assert definition.hold == Hold(kind="pause", path=("spec", "held"), value="yes")


def test_hold_patch_adds_missing_parents_and_holds() -> None:
    mpijob: dict[str, Any] = {"metadata": {"name": "m"}, "spec": {"mpiReplicaSpecs": {}}}
    held = apply(mpijob, hold_patch(mpijob, MPI))
    assert held["spec"]["runPolicy"] == {"managedBy": MANAGED_BY}
    assert hold_state(held, MPI) == HoldState.HELD and hold_patch(held, MPI) == []
    with_policy = {"spec": {"runPolicy": {"cleanPodPolicy": "None"}}}
    assert apply(with_policy, hold_patch(with_policy, MPI))["spec"]["runPolicy"] == {
        "cleanPodPolicy": "None", "managedBy": MANAGED_BY}


def test_a_pause_records_that_the_webhook_set_it() -> None:
    deployment: dict[str, Any] = {"metadata": {"name": "d"}, "spec": {"replicas": 2}}
    held = apply(deployment, hold_patch(deployment, PAUSE))
    assert held["spec"]["paused"] is True
    assert held["metadata"]["annotations"] == {HOLD_ANNOTATION: ".spec.paused"}
    annotated = {"metadata": {"annotations": {"a": "b"}}, "spec": {}}
    assert apply(annotated, hold_patch(annotated, PAUSE))["metadata"]["annotations"] == {
        "a": "b", HOLD_ANNOTATION: ".spec.paused"}


def test_states() -> None:
    assert hold_state({"spec": {}}, JOB) == HoldState.FREE
    assert hold_state({"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}, JOB) \
        == HoldState.FOREIGN
    assert hold_state({"spec": {"paused": False}}, PAUSE) == HoldState.FREE
    assert hold_state({}, Hold(kind="refuse", reason="no")) == HoldState.REFUSED


def test_the_copy_loses_our_hold_and_empty_parents() -> None:
    copy_ = {"spec": {"runPolicy": {"managedBy": MANAGED_BY}, "x": 1}}
    clear_hold(copy_, MPI, hub_annotations={})
    assert copy_ == {"spec": {"x": 1}}
    foreign = {"spec": {"managedBy": "kueue.x-k8s.io/multikueue"}}
    clear_hold(foreign, JOB, hub_annotations={})
    assert foreign["spec"]["managedBy"] == "kueue.x-k8s.io/multikueue"


def test_a_users_own_pause_stays_on_the_copy() -> None:
    mine = {"spec": {"paused": True}}
    clear_hold(mine, PAUSE, hub_annotations={})
    assert mine == {"spec": {"paused": True}}
    ours = {"spec": {"paused": True}}
    clear_hold(ours, PAUSE, hub_annotations={HOLD_ANNOTATION: ".spec.paused"})
    assert ours == {"spec": {}}
