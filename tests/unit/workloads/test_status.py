"""Status matching: upstream edge cases (reference §3.4) and the dispatcher's extensions."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher.workloads.errors import EvaluationError
from dispatcher.workloads.resolve import resolve_with

from .shapes import TRAINRUN, TRAINRUN_OBJ, define, edit


def _status(obj_status: dict[str, Any], text: str = TRAINRUN) -> tuple[str, list[str]]:
    obj = copy.deepcopy(TRAINRUN_OBJ)
    obj["status"] = obj_status
    out = resolve_with(define(text), obj).to_dict()
    return out["status"], out["statuses"]


def _mappings(mappings: dict[str, Any], **extra: Any) -> str:
    def change(doc: dict[str, Any]) -> None:
        status = doc["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]
        status["statusMappings"] = mappings
        status.update(extra)
    return edit(TRAINRUN, change)


def test_phase_matches_but_condition_does_not_is_unknown() -> None:
    assert _status({"stage": "Active", "conditions": [
        {"type": "AllRolesUp", "status": "False"}]}) == ("unknown", ["unknown"])


def test_empty_conditions_is_unknown_and_phase_alone_matches() -> None:
    assert _status({"stage": "Active", "conditions": []})[0] == "unknown"
    assert _status({"stage": "Queued"}) == ("initializing", ["initializing"])


def test_reason_required_by_definition_but_absent_on_object_does_not_match() -> None:
    assert _status({"conditions": [{"type": "Stalled", "status": "True"}]})[0] == "unknown"
    assert _status({"conditions": [{"type": "Stalled", "reason": "Timeout"}]})[0] == "failed"


def test_reason_on_object_but_not_in_definition_still_matches() -> None:
    assert _status({"stage": "Active", "conditions": [
        {"type": "AllRolesUp", "status": "True", "reason": "Whatever"}]})[0] == "running"


def test_all_matches_in_upstream_order_running_beats_degraded() -> None:
    status = {"stage": "Active", "conditions": [{"type": "AllRolesUp", "status": "True"}],
              "roleStatus": [{"ready": 1, "wanted": 2}]}
    assert _status(status) == ("running", ["running", "degraded"])


def test_precedence_extension_reorders() -> None:
    text = edit(TRAINRUN, lambda d: d["spec"]["structureDefinition"]["rootComponent"][
        "statusDefinition"].update(statusPrecedence=["degraded", "running"]))
    status = {"stage": "Active", "conditions": [{"type": "AllRolesUp", "status": "True"}],
              "roleStatus": [{"ready": 1, "wanted": 2}]}
    assert _status(status, text) == ("degraded", ["degraded", "running"])


def test_later_condition_of_same_type_overwrites() -> None:
    assert _status({"stage": "Active", "conditions": [
        {"type": "AllRolesUp", "status": "True"},
        {"type": "AllRolesUp", "status": "False"}]})[0] == "unknown"


def test_empty_matcher_always_matches() -> None:
    assert _status({}, _mappings({"pending": [{}]})) == ("pending", ["pending"])


def test_absent_and_status_not_extensions() -> None:
    text = _mappings({
        "pending": [{"byConditions": [{"type": "Ready", "absent": True}]}],
        "degraded": [{"byConditions": [{"type": "Healthy", "statusNot": "True"},
                                       {"type": "Ready", "status": "True"}]}],
        "running": [{"byConditions": [{"type": "Healthy", "status": "True"}]}]})
    assert _status({}, text) == ("pending", ["pending"])
    assert _status({"conditions": [{"type": "Ready", "status": "True"}]}, text)[0] == "degraded"
    assert _status({"conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "Healthy", "status": "Unknown"}]}, text)[0] \
        == "degraded"
    assert _status({"conditions": [{"type": "Ready", "status": "True"},
                                   {"type": "Healthy", "status": "True"}]}, text) \
        == ("running", ["running"])


def test_by_expression_compares_tostring_and_expected_is_escaped() -> None:
    text = _mappings({"running": [{"byExpression": {
        "expression": ".status.ready", "expectedResult": "3"}}],
        "failed": [{"byExpression": {"expression": ".status.msg",
                                     "expectedResult": 'say "hi"\\'}}]})
    assert _status({"ready": 3.0}, text)[0] == "running"
    assert _status({"ready": "3"}, text)[0] == "running"
    assert _status({"msg": 'say "hi"\\'}, text)[0] == "failed"


def test_suspended_and_upstream_newer_keys_map_to_generic_statuses() -> None:
    text = _mappings({"suspending": [{"byPhase": "Stopping"}],
                      "resuming": [{"byPhase": "Waking"}]})
    assert _status({"stage": "Stopping"}, text)[0] == "suspended"
    assert _status({"stage": "Waking"}, text)[0] == "initializing"


def test_conditions_of_the_wrong_shape_are_errors() -> None:
    obj = copy.deepcopy(TRAINRUN_OBJ)
    obj["status"] = {"conditions": {"type": "Ready"}}
    with pytest.raises(EvaluationError, match="failed to extract conditions"):
        resolve_with(define(TRAINRUN), obj)
    obj["status"] = {"stage": 3}
    with pytest.raises(EvaluationError, match="phase must be a string"):
        resolve_with(define(TRAINRUN), obj)


def test_custom_condition_field_names_and_null_reason_field_default() -> None:
    def change(doc: dict[str, Any]) -> None:
        status = doc["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]
        status["conditionsDefinition"] = {"path": ".status.conds", "typeFieldName": "kind",
                                          "statusFieldName": "state", "reasonFieldName": None}
    text = edit(TRAINRUN, change)
    assert _status({"conds": [{"kind": "Stalled", "state": "True", "reason": "Timeout"}]},
                   text)[0] == "failed"
