"""``scaleDefinition.creationStagePath`` and ``podWavesPath`` (docs/definitions.md §3.8) on
plain objects: what the built-in JobSet and Job definitions say, and the error a
definition gets when its path gives the wrong type."""

from __future__ import annotations

from typing import Any

import pytest

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import WorkloadError

CATALOG = Catalog.builtin()


def _rjob(name: str, pods: int, completions: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"name": name, **extra, "template": {"spec": {
        "parallelism": pods, **({"completions": completions} if completions else {}),
        "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}}


def _stages(spec: dict[str, Any]) -> list[tuple[str, str, bool]]:
    obj = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
           "metadata": {"name": "j", "namespace": "a"}, "spec": spec}
    (component,) = CATALOG.resolve(obj).components
    return [(i.id, i.stage, i.waves) for i in component.instances]


def test_jobset_stages_follow_its_startup_policy_and_dependencies() -> None:
    rjobs = [_rjob("a", 1), _rjob("b", 2)]
    assert _stages({"replicatedJobs": rjobs}) == [("a", "", False), ("b", "", False)]
    assert _stages({"replicatedJobs": rjobs, "startupPolicy": {
        "startupPolicyOrder": "InOrder"}}) == [("a", "a", False), ("b", "b", False)]
    assert _stages({"replicatedJobs": [_rjob("a", 1), _rjob("b", 2, dependsOn=[
        {"name": "a", "status": "Ready"}])]}) == [("a", "", False), ("b", "b", False)]
    assert _stages({"replicatedJobs": [_rjob("a", 2, completions=5), _rjob("b", 2, 2)]}) \
        == [("a", "", True), ("b", "", False)]


def test_a_job_in_waves_says_so() -> None:
    def waves(**spec: Any) -> bool:
        obj = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
               "spec": {**spec, "template": {"spec": {"containers": [
                   {"name": "c", "image": "i"}]}}}}
        (component,) = CATALOG.resolve(obj).components
        return component.instances[0].waves
    assert waves(parallelism=2, completions=5)
    assert not waves(parallelism=2, completions=2)
    assert not waves(parallelism=3)  # a work queue: all at once


@pytest.mark.parametrize(("path", "words"), [
    ("creationStagePath: '.spec.parts[] | {x: 1}'", "a creation stage must be a string"),
    ("podWavesPath: '.spec.parts[] | \"yes\"'", "podWavesPath must give a boolean"),
])
def test_a_wrong_type_is_an_error_that_names_the_path(path: str, words: str) -> None:
    (definition,) = load_text(f"""apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {{name: parts}}
spec:
  structureDefinition:
    rootComponent:
      name: root
      kind: {{group: example.com, version: v1, kind: Parts}}
      statusDefinition:
        statusMappings:
          running: [{{byExpression: {{expression: 'true', expectedResult: "true"}}}}]
    childComponents:
    - name: part
      ownerRef: root
      kind: {{group: "", version: v1, kind: Pod}}
      specDefinition: {{podTemplateSpecPath: '.spec.parts[].template'}}
      scaleDefinition:
        {path}
""", source="parts.yaml")
    obj = {"apiVersion": "example.com/v1", "kind": "Parts", "metadata": {"name": "p"},
           "spec": {"parts": [{"template": {"spec": {"containers": [
               {"name": "c", "image": "i"}]}}}]}}
    with pytest.raises(WorkloadError) as caught:
        Catalog([definition]).resolve(obj)
    assert words in str(caught.value) and "scaleDefinition" in str(caught.value)
