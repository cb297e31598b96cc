"""Invented workload types, each exercising one structural pattern (like upstream's tests).

``TrainRun`` keeps roles in a map (reference §1.13), ``BatchSet`` an array of replicated
jobs with parallelism, ``FragServe`` a fragmented pod spec spread over its own fields.
Each definition is written once (Karta) and converted to ResourceInterface by ``as_format``.
"""

from __future__ import annotations

import copy
from typing import Any

import yaml

from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.model import Definition

TRAINRUN = """
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: demo-trainrun}
spec:
  structureDefinition:
    rootComponent:
      name: trainrun
      kind: {group: demo.example, version: v1, kind: TrainRun}
      statusDefinition:
        phaseDefinition: {path: .status.stage}
        conditionsDefinition: {path: .status.conditions}
        statusMappings:
          initializing: [{byPhase: Queued}]
          running:
          - byPhase: Active
            byConditions: [{type: AllRolesUp, status: "True"}]
          degraded:
          - byExpression:
              expression: '[.status.roleStatus[]? | select(.ready < .wanted)] | length > 0'
              expectedResult: "true"
          completed: [{byPhase: Done}]
          failed: [{byPhase: Crashed}, {byConditions: [{type: Stalled, reason: Timeout}]}]
    childComponents:
    - name: role
      ownerRef: trainrun
      kind: {group: "", version: v1, kind: Pod}
      instanceIdPath: .spec.roles | keys[]
      specDefinition:
        podTemplateSpecPath: .spec.roles | .[] | .podTemplate
      scaleDefinition:
        replicasPath: .spec.roles | .[] | (.count // 1)
        minReplicasPath: .spec.roles | .[] | .minCount
      podSelector:
        componentTypeSelector: {keyPath: '.metadata.labels["demo.example/run"]'}
        componentInstanceSelector: {idPath: '.metadata.labels["demo.example/role"]'}
  optimizationInstructions:
    gangScheduling:
      podGroups:
      - name: run
        members:
        - componentName: trainrun
          groupByKeyPaths: ['.metadata.labels["demo.example/run"]']
"""

BATCHSET = """
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: demo-batchset}
spec:
  structureDefinition:
    rootComponent:
      name: batchset
      kind: {group: demo.example, version: v1, kind: BatchSet}
      statusDefinition:
        conditionsDefinition: {path: .status.conditions}
        statusMappings:
          running: [{byConditions: [{type: Running, status: "True"}]}]
          completed: [{byConditions: [{type: Completed, status: "True"}]}]
          failed: [{byConditions: [{type: Failed, status: "True"}]}]
    childComponents:
    - name: job
      ownerRef: batchset
      kind: {group: batch, version: v1, kind: Job}
      instanceIdPath: .spec.jobs[].name
      specDefinition:
        podTemplateSpecPath: .spec.jobs[].template.spec.template
      scaleDefinition:
        replicasPath: .spec.jobs[] | (.replicas // 1)
        podsPerReplicaPath: .spec.jobs[] | (.template.spec.parallelism // 1)
      podSelector:
        componentInstanceSelector: {idPath: '.metadata.labels["demo.example/job"]'}
"""

FRAGSERVE = """
apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {name: demo-fragserve}
spec:
  structureDefinition:
    rootComponent:
      name: fragserve
      kind: {group: demo.example, version: v1, kind: FragServe}
      statusDefinition:
        phaseDefinition: {path: .status.state}
        statusMappings:
          running: [{byPhase: Ready}]
          initializing: [{byPhase: NotReady}]
      specDefinition:
        fragmentedPodSpecDefinition:
          labelsPath: .spec.labels
          schedulerNamePath: .spec.schedulerName
          resourcesPath: .spec.resources
          containerPath: .spec.main
          nodeAffinityPath: .spec.affinity.nodeAffinity
          nodeSelectorPath: .spec.nodeSelector
          tolerationsPath: .spec.tolerations
      scaleDefinition:
        replicasPath: .spec.replicas
        minReplicasPath: .spec.autoscaling.min
"""

BATCHSET_OBJ: dict[str, Any] = {
    "apiVersion": "demo.example/v1", "kind": "BatchSet",
    "metadata": {"name": "train", "namespace": "team-a"},
    "spec": {"jobs": [
        {"name": "leader", "replicas": 1, "template": {"spec": {"parallelism": 1, "template": {
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                "limits": {"nvidia.com/gpu": 4}, "requests": {"cpu": "16", "memory": "128Gi"}}}],
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}}}},
        {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 3, "template": {
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {
                "requests": {"nvidia.com/gpu": "8"}}}]}}}}},
    ]},
    "status": {"conditions": [{"type": "Running", "status": "True"}]},
}

TRAINRUN_OBJ: dict[str, Any] = {
    "apiVersion": "demo.example/v1", "kind": "TrainRun",
    "metadata": {"name": "tr", "namespace": "ml"},
    "spec": {"roles": {
        "worker": {"count": 4, "minCount": 2, "podTemplate": {"spec": {"containers": [
            {"name": "w", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 2}}}]}}},
        "chief": {"podTemplate": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }},
    "status": {"stage": "Active", "conditions": [{"type": "AllRolesUp", "status": "True"}]},
}

FRAGSERVE_OBJ: dict[str, Any] = {
    "apiVersion": "demo.example/v1", "kind": "FragServe",
    "metadata": {"name": "svc"},
    "spec": {"autoscaling": {"min": 0}, "labels": {"a": "b"},
             "main": {"name": "main", "image": "x"},
             "resources": {"limits": {"nvidia.com/gpu": 1, "memory": "16Gi"}},
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                 "nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "nvidia.com/gpu.product", "operator": "In",
                      "values": ["NVIDIA-A100-SXM4-80GB"]}]}]}}},
             "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]},
    "status": {"state": "Ready"},
}


def as_format(text: str, fmt: str) -> str:
    """The same definition in the other upstream format (``karta`` or ``ri``)."""
    doc = yaml.safe_load(text)
    doc = copy.deepcopy(doc)
    if fmt == "ri":
        doc["apiVersion"], doc["kind"] = "optimization.nvidia.com/v1alpha1", "ResourceInterface"
    return yaml.safe_dump(doc)


def define(text: str, fmt: str = "karta") -> Definition:
    """Load one definition from YAML text."""
    (definition,) = load_text(as_format(text, fmt), source="test.yaml")
    return definition


def edit(text: str, change: Any) -> str:
    """Apply ``change(doc)`` to a definition document and return it as YAML."""
    doc = yaml.safe_load(text)
    change(doc)
    return yaml.safe_dump(doc)
