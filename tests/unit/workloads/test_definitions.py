"""Loading and validation: formats, documents, defaults, and every error reported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.workloads.definitions import load_file, load_text, validate_paths
from dispatcher.workloads.errors import DefinitionError

from .shapes import BATCHSET, FRAGSERVE, TRAINRUN, as_format, edit


def _errors(text: str) -> list[str]:
    with pytest.raises(DefinitionError) as caught:
        load_text(text, source="defs.yaml")
    return [str(issue) for issue in caught.value.issues]


def _children(change: Any) -> str:
    return edit(TRAINRUN, lambda d: change(d["spec"]["structureDefinition"]))


def test_many_documents_yaml_json_and_lists() -> None:
    docs = [yaml.safe_load(t) for t in (TRAINRUN, BATCHSET, FRAGSERVE)]
    multi = "---\n".join(yaml.safe_dump(d) for d in docs)
    assert [d.name for d in load_text(multi, source="a.yaml")] == [
        "demo-trainrun", "demo-batchset", "demo-fragserve"]
    assert len(load_text(json.dumps(docs), source="a.json")) == 3
    assert len(load_text(json.dumps({"kind": "List", "items": docs}), source="b.json")) == 3


def test_format_is_recorded_and_defaults_applied() -> None:
    (ri,) = load_text(as_format(TRAINRUN, "ri"), source="x")
    assert ri.format == "optimization.nvidia.com/v1alpha1/ResourceInterface"
    assert (ri.api_version, ri.kind) == ("demo.example/v1", "TrainRun")
    assert ri.status is not None
    assert (ri.status.type_field, ri.status.status_field, ri.status.reason_field,
            ri.status.message_field) == ("type", "status", "reason", "message")


def test_name_defaults_to_lowercase_root_kind() -> None:
    text = edit(BATCHSET, lambda d: d.pop("metadata"))
    (definition,) = load_text(text, source="x")
    assert definition.name == "batchset"


def test_jq_syntax_error_names_file_definition_field_and_jq_message() -> None:
    text = _children(lambda s: s["childComponents"][0]["scaleDefinition"].update(
        replicasPath=".spec.roles | .[] | (.count // "))
    (error,) = _errors(text)
    assert error.startswith("defs.yaml: definition demo-trainrun: "
                            "spec.structureDefinition.childComponents[0].scaleDefinition."
                            "replicasPath: failed to parse JQ expression")
    assert "syntax error" in error


@pytest.mark.parametrize("expression", [
    "env.HOME", "$ENV.PATH", "input", '"\\(env.HOME)"', "[.. | numbers]",
    "del(.a)", "[range(10)]", "def f: f; f", ".a |= 1", "[paths]", "(walk(.))"])
def test_forbidden_jq_is_rejected_at_any_depth(expression: str) -> None:
    text = _children(lambda s: s["childComponents"][0]["scaleDefinition"].update(
        maxReplicasPath=expression))
    errors = _errors(text)
    assert any("not allowed" in e for e in errors), errors


def test_every_error_is_reported_not_just_the_first() -> None:
    def change(doc: dict[str, Any]) -> None:
        root = doc["spec"]["structureDefinition"]["rootComponent"]
        root["kind"] = {"group": "", "version": "v1", "kind": "TrainRun"}
        root["ownerRef"] = "x"
        child = doc["spec"]["structureDefinition"]["childComponents"][0]
        child["specDefinition"]["podSpecPath"] = ".spec.x"
        child["scaleDefinition"]["replicasPath"] = "[["
        del child["podSelector"]["componentInstanceSelector"]
        doc["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0][
            "members"].append({"componentName": "ghost"})
    errors = _errors(edit(TRAINRUN, change))
    text = "\n".join(errors)
    for expected in ("root component must have full kind",
                     "root component cannot have owner ref",
                     "component 'role' has multiple pod spec definitions",
                     "failed to parse JQ expression '[['",
                     "has instance id path but no pod component instance selector",
                     "pod-group member component 'ghost' is not defined"):
        assert expected in text
    assert len(errors) >= 6


def test_duplicate_names_stop_structural_checks() -> None:
    """§3.9: a child renamed to the root's name gives only the uniqueness error."""
    text = _children(lambda s: s["childComponents"][0].update(name="trainrun"))
    errors = _errors(text)
    assert errors == ["defs.yaml: definition demo-trainrun: spec.structureDefinition: "
                      "component name trainrun is not unique"]


@pytest.mark.parametrize(("owners", "cycle"), [
    ({"a": "b", "b": "a"}, True), ({"a": "b", "b": "c", "c": "a"}, True),
    ({"a": "trainrun", "b": "a"}, False), ({"a": "missing", "b": "a"}, False)])
def test_cycles_detected_and_invalid_owner_suppresses_cycle_check(
        owners: dict[str, str], cycle: bool) -> None:
    def change(structure: dict[str, Any]) -> None:
        structure["childComponents"] += [{"name": n, "ownerRef": o}
                                         for n, o in owners.items()]
    text = _children(change)
    if cycle:
        assert any("ownership cycle detected" in e for e in _errors(text))
    elif "missing" in owners.values():
        errors = _errors(text)
        assert any("non-existing component 'missing'" in e for e in errors)
        assert not any("cycle" in e for e in errors)
    else:
        load_text(text, source="x")


def test_instance_selector_without_instance_path() -> None:
    text = _children(lambda s: s["childComponents"][0].pop("instanceIdPath"))
    assert any("has pod component instance selector but no instance id path" in e
               for e in _errors(text))


def test_unknown_fields_and_wrong_types_are_reported() -> None:
    def change(doc: dict[str, Any]) -> None:
        child = doc["spec"]["structureDefinition"]["childComponents"][0]
        child["ownerName"] = "trainrun"
        child["scaleDefinition"]["replicasPath"] = 3
        doc["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"][
            "statusMappings"]["weird"] = []
    errors = "\n".join(_errors(edit(TRAINRUN, change)))
    assert "childComponents[0].ownerName: unknown field" in errors
    assert "replicasPath: must be a string, not int" in errors
    assert "statusMappings.weird: unknown status" in errors


def test_extension_misuse_is_reported() -> None:
    def change(doc: dict[str, Any]) -> None:
        group = doc["spec"]["optimizationInstructions"]["gangScheduling"]["podGroups"][0]
        group["gangPer"] = "replica"
        group["minPodsPath"] = "1"
        status = doc["spec"]["structureDefinition"]["rootComponent"]["statusDefinition"]
        status["statusMappings"]["pending"] = [{"byConditions": [
            {"type": "A", "absent": True, "status": "True"}]}]
        status["statusPrecedence"] = ["sleeping"]
    errors = "\n".join(_errors(edit(TRAINRUN, change)))
    assert "only allowed with gangPer: workload" in errors
    assert "absent: true cannot be combined" in errors
    assert "unknown status 'sleeping'" in errors


def test_not_a_definition_and_malformed_yaml(tmp_path: Path) -> None:
    assert "is not a definition" in _errors("apiVersion: v1\nkind: Pod\n")[0]
    assert "not valid YAML" in _errors("a: [\n")[0]
    bad = tmp_path / "bad.yaml"
    bad.write_text(TRAINRUN + "\n---\napiVersion: v1\nkind: Pod\n")
    good = tmp_path / "good.yaml"
    good.write_text(BATCHSET)
    issues = validate_paths([tmp_path])
    assert [i.source for i in issues] == [str(bad)]
    assert len(load_file(good)) == 1
    with pytest.raises(DefinitionError, match="cannot read"):
        load_file(tmp_path / "missing.yaml")


def test_comment_in_expression_does_not_break_the_batch() -> None:
    text = _children(lambda s: s["childComponents"][0]["scaleDefinition"].update(
        maxReplicasPath=".spec.roles | .[] | .max # the upper bound"))
    (definition,) = load_text(text, source="x")
    assert definition.name == "demo-trainrun"
