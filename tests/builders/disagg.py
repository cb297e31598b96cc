"""A tenant's definition of JobSets that serve one model in two roles (disaggregated
inference: a ``prefill`` and a ``decode`` replicated job), written with upstream's
``gangScheduling.podGroup`` of two ``subGroups``: each role is a gang of its own, and the
two start together (``DISAGG_DEFINITION``); ``disagg_jobset`` builds such a JobSet.
"""

from __future__ import annotations

from typing import Any

from tests.builders import gpu_pod

__all__ = ["DISAGG_DEFINITION", "disagg_jobset"]


def _role(role: str) -> str:
    where = f'.spec.replicatedJobs[] | select(.name == "{role}")'
    return f"""    - name: {role}
      ownerRef: serve
      kind: {{group: batch, version: v1, kind: Job}}
      specDefinition:
        podTemplateSpecPath: '{where} | .template.spec.template'
      scaleDefinition:
        replicasPath: '{where} | (.replicas // 1)'
        podsPerReplicaPath: '{where} | (.template.spec.parallelism // 1)'
      podSelector:
        componentTypeSelector:
          keyPath: '.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"]'
          value: {role}
"""


DISAGG_DEFINITION = f"""apiVersion: run.ai/v1alpha1
kind: Karta
metadata: {{name: disagg-jobset}}
spec:
  structureDefinition:
    rootComponent:
      name: serve
      kind: {{group: jobset.x-k8s.io, version: v1alpha2, kind: JobSet}}
      statusDefinition:
        conditionsDefinition: {{path: .status.conditions}}
        statusMappings:
          running:
          - byExpression:
              expression: '([.status.replicatedJobsStatus[]? | .active // 0] | add // 0) > 0'
              expectedResult: "true"
          completed: [{{byConditions: [{{type: Completed, status: "True"}}]}}]
          failed: [{{byConditions: [{{type: Failed, status: "True"}}]}}]
    childComponents:
{_role("prefill")}{_role("decode")}  optimizationInstructions:
    gangScheduling:
      podGroup:
        name: serve
        subGroups:
        - componentName: prefill
        - componentName: decode
  copyDefinition:
    hubHold:
      managedBy: {{path: .spec.managedBy, controllers: [jobset.sigs.k8s.io/jobset-controller]}}
    memberGangs: [workload-api, podgroup-v1alpha2, podgroup-v1beta1, coscheduling]
"""


def disagg_jobset(name: str, *, namespace: str | None = None, prefill: int = 1,
                  decode: int = 2, gpus: int = 1) -> dict[str, Any]:
    """A JobSet of a ``prefill`` and a ``decode`` Job (``prefill`` and ``decode`` pods
    at once, ``gpus`` GPUs each; its pods run until the node's kubelet ends them)."""
    def role(role: str, pods: int) -> dict[str, Any]:
        return {"name": role, "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "backoffLimit": 0,
            "template": {"spec": gpu_pod(gpus, restartPolicy="Never")}}}}
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": meta,
            "spec": {"replicatedJobs": [role("prefill", prefill), role("decode", decode)]}}
