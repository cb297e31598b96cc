"""The live catalog's merge on plain data: precedence, verdicts, conflicts, last good."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dispatcher.kube.resources import GroupVersionKind
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.hubdefinitions import HubDefinition, lint, merge

ROOT = Path(__file__).resolve().parents[3]


def manifest(name: str = "jobset", *, kind: str = "JobSet",
             group: str = "jobset.x-k8s.io", version: str = "v1alpha2",
             fmt: str = "Karta") -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / "definitions" / "jobset.yaml").read_text())
    doc["kind"] = fmt
    doc["apiVersion"] = {"Karta": "run.ai/v1alpha1",
                         "ResourceInterface": "optimization.nvidia.com/v1alpha1"}[fmt]
    doc["metadata"] = {"name": name, "uid": "u", "generation": 3, "resourceVersion": "9"}
    doc["spec"]["structureDefinition"]["rootComponent"]["kind"] = {
        "group": group, "version": version, "kind": kind}
    return doc


def hub(doc: dict[str, Any]) -> HubDefinition:
    linted = lint(doc)
    return HubDefinition(format=doc["kind"], name=doc["metadata"]["name"],
                         generation=int(doc["metadata"]["generation"]),
                         definition=None if isinstance(linted, str) else linted,
                         problem=linted if isinstance(linted, str) else "")


BUILTIN = Catalog.builtin()


def test_catalog_manifests_lint_as_hub_objects_named_by_format() -> None:
    linted = lint(manifest())
    assert not isinstance(linted, str)
    assert linted.name == "karta/jobset"
    assert not isinstance(lint(manifest(fmt="ResourceInterface")), str)


def test_a_hub_object_for_a_new_kind_is_accepted_and_added() -> None:
    out = merge(BUILTIN, BUILTIN, [hub(manifest("xgb", kind="XGBoostJob",
                                                group="kubeflow.org", version="v1"))])
    verdict = out.verdicts[("Karta", "xgb")]
    assert verdict.accepted and verdict.overrides == "" and verdict.observed_generation == 3
    assert verdict.serves == GroupVersionKind("kubeflow.org", "v1", "XGBoostJob")
    assert out.catalog.find("kubeflow.org/v1", "XGBoostJob") is not None
    assert out.sources[GroupVersionKind("kubeflow.org", "v1", "XGBoostJob")] == "Karta/xgb"
    assert len(out.catalog) == len(BUILTIN) + 1


def test_a_hub_object_overrides_config_which_overrides_built_in() -> None:
    config_def = lint(manifest("cfg"))
    assert not isinstance(config_def, str)
    config = Catalog.merged(BUILTIN, Catalog([config_def]))
    only_config = merge(BUILTIN, config, [])
    assert only_config.catalog.find("jobset.x-k8s.io/v1alpha2", "JobSet") is config_def
    assert only_config.sources[GroupVersionKind.of("jobset.x-k8s.io/v1alpha2", "JobSet")] \
        == "config"
    out = merge(BUILTIN, config, [hub(manifest("mine"))])
    found = out.catalog.find("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert found is not None and found.name == "karta/mine"
    assert out.verdicts[("Karta", "mine")].overrides == "config"
    assert merge(BUILTIN, BUILTIN, [hub(manifest("mine"))]).verdicts[
        ("Karta", "mine")].overrides == "built-in"


def test_a_broken_object_is_rejected_and_changes_nothing() -> None:
    broken = manifest("bad", kind="XGBoostJob", group="kubeflow.org", version="v1")
    broken["spec"]["structureDefinition"]["rootComponent"]["scaleDefinition"] = {
        "replicasPath": ".spec | env"}
    out = merge(BUILTIN, BUILTIN, [hub(broken)])
    verdict = out.verdicts[("Karta", "bad")]
    assert not verdict.accepted and verdict.reason == "Invalid" and verdict.message
    assert out.catalog.find("kubeflow.org/v1", "XGBoostJob") is None
    assert {d.name for d in out.catalog.definitions} == {d.name for d in BUILTIN.definitions}


def test_a_broken_update_keeps_the_last_accepted_version() -> None:
    good = hub(manifest("x", kind="XGBoostJob", group="kubeflow.org", version="v1"))
    first = merge(BUILTIN, BUILTIN, [good])
    bad = HubDefinition(format="Karta", name="x", generation=4, definition=None,
                        problem="jq does not compile")
    second = merge(BUILTIN, BUILTIN, [bad], last_good=first.accepted)
    assert second.catalog.find("kubeflow.org/v1", "XGBoostJob") is good.definition
    assert "last accepted version stays in use" in second.verdicts[("Karta", "x")].message
    assert second.accepted[("Karta", "x")] is good.definition
    gone = merge(BUILTIN, BUILTIN, [], last_good=second.accepted)
    assert gone.catalog.find("kubeflow.org/v1", "XGBoostJob") is None
    assert gone.accepted == {}


def test_deleting_an_override_falls_back_to_the_built_in() -> None:
    first = merge(BUILTIN, BUILTIN, [hub(manifest("mine"))])
    after = merge(BUILTIN, BUILTIN, [], last_good=first.accepted)
    assert after.catalog.find("jobset.x-k8s.io/v1alpha2", "JobSet") is BUILTIN.get("jobset")


def test_two_hub_objects_for_one_kind_are_both_refused() -> None:
    out = merge(BUILTIN, BUILTIN, [hub(manifest("a")), hub(manifest("b", fmt="Karta")),
                                   hub(manifest("c", kind="Other", group="o.io"))])
    a, b = out.verdicts[("Karta", "a")], out.verdicts[("Karta", "b")]
    assert (a.reason, b.reason) == ("Conflict", "Conflict")
    assert "Karta/b" in a.message and "Karta/a" in b.message
    assert out.catalog.find("jobset.x-k8s.io/v1alpha2", "JobSet") is BUILTIN.get("jobset")
    assert out.verdicts[("Karta", "c")].accepted


def test_a_quarantined_definition_is_refused_with_its_bound() -> None:
    obj = hub(manifest("q", kind="Q", group="q.io"))
    out = merge(BUILTIN, BUILTIN, [obj], quarantined={"karta/q": "cpu: more than 2 s"})
    verdict = out.verdicts[("Karta", "q")]
    assert (verdict.accepted, verdict.reason) == (False, "Quarantined")
    assert "cpu: more than 2 s" in verdict.message
    assert out.catalog.find("q.io/v1alpha2", "Q") is None


def test_status_shape() -> None:
    out = merge(BUILTIN, BUILTIN, [hub(manifest("mine"))])
    status = out.verdicts[("Karta", "mine")].status()
    assert status["observedGeneration"] == 3
    assert status["servesKind"] == "JobSet" and status["overrides"] == "built-in"
    assert status["conditions"][0]["type"] == "Accepted"
    assert status["conditions"][0]["status"] == "True"
