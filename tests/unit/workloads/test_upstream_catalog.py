"""Upstream definitions, old and current, load and evaluate unchanged (issue 25, item 3).

``upstream/*.yaml`` are the run-ai/karta ``docs/examples`` (see test_upstream.py);
``upstream/workload-map/*.yaml`` the current ones: every ``docs/catalog/*.yaml`` of
dsx-ai-factory/workload-map the index holds, copied unchanged, and the Go catalog entries
``pkg/catalog/kartas/*.go`` rendered to YAML (``go.*``; the entries the workload-map index
lacks, Pod, NIMCache, NIMService and JobSet, from dsx-ai-factory/karta and run-ai/karta),
each with its origin (repository, path, commit) and licence in its header.

Each loads with our loader as it is (one definition per file, its document unchanged), and
is run over every catalog sample of its kind (``catalog/*/*.yaml``): the pods and GPUs it
gives equal ours, or differ as ``DIFFERENT`` records, every entry with the cause that
``catalog/NOTES.md`` ("Upstream definitions on our samples") explains from the operator's
code (in each case ours follows the operator). A workload the upstream definition cannot
read gives a clear ``WorkloadError`` (its class is recorded), never a crash. Every status
frame evaluates to a generic status with either definition; for the kinds new in this
round, where upstream reads a frame otherwise, ``STATUS_DIFFERENT`` holds our reading, the
operator's, and upstream's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import WorkloadError
from dispatcher.workloads.model import GENERIC_OF_KEY, GenericStatus
from dispatcher.workloads.resolve import resolve, status_of

HERE = Path(__file__).parent
UPSTREAM = HERE / "upstream"
SAMPLES = sorted(p for p in (HERE / "catalog").glob("*/*.yaml")
                 if not p.name.endswith(".frames.yaml"))
FILES = sorted(UPSTREAM.glob("*.yaml")) + sorted((UPSTREAM / "workload-map").glob("*.yaml"))

WM = "workload-map/"
# (upstream file, our sample) -> (upstream's (pods, GPUs) or the WorkloadError it raises, cause)
DIFFERENT: dict[tuple[str, str], tuple[Any, str]] = {
    ("dynamo", "dynamographdeployment/merged-resources"): ((1, 0), "dynamo-resources"),
    ("dynamo", "dynamographdeployment/multinode-autoscaled"): ((8, 0), "dynamo-resources"),
    ("dynamo", "dynamographdeployment/typical"): ((4, 0), "dynamo-resources"),
    ("jobset", "jobset/tricky"): ((4, 24), "jobset-counts"),
    ("jobset", "jobset/typical"): ((2, 16), "jobset-counts"),
    ("jobset", "jobset/zero-replicas"): ((1, 2), "jobset-counts"),
    ("knative-serving", "knative-service/legacy-minscale-sidecar"):
        ((1, 1), "knative-legacy-min-scale"),
    ("knative-serving", "knative-service/scale-to-zero"): ("TemplateError", "knative-template"),
    ("knative-serving", "knative-service/typical"): ("EvaluationError", "knative-template"),
    ("kserve", "inferenceservice/model-sidecar-explainer"): ((3, 2), "kserve-model-block"),
    ("kserve", "inferenceservice/typical"): ((2, 0), "kserve-model-block"),
    ("lws", "leaderworkerset/leader-only"): ((3, 0), "lws-leader-template"),
    ("milvus", "milvus/cluster-26-hpa"): ("TemplateError", "milvus-components"),
    ("milvus", "milvus/cluster-pre26"): ((5, 0), "milvus-components"),
    ("milvus", "milvus/typical"): ((2, 0), "milvus-components"),
    ("nimservice", "nimservice/autoscaled-auto-gpu"): ((5, 0), "nimservice-replicas-gpus"),
    ("nimservice", "nimservice/multinode"): ((1, 0), "nimservice-replicas-gpus"),
    ("pytorch", "pytorchjob/elastic"): ((5, 16), "training-replica-types"),
    ("pytorch", "pytorchjob/lowercase-keys"): ((2, 0), "training-replica-types"),
    ("raycluster", "raycluster/autoscaling-groups"): ((16, 26), "ray-desired-replicas"),
    ("rayjob", "rayjob/existing-cluster"): ("EvaluationError", "rayjob-submitter-hosts"),
    ("rayjob", "rayjob/sidecar-multihost"): ("EvaluationError", "rayjob-submitter-hosts"),
    ("rayjob", "rayjob/typical"): ("EvaluationError", "rayjob-submitter-hosts"),
    (WM + "agents-x-k8s-io-sandbox-v1beta1", "sandbox/suspended"): ((0, 0), "suspended-pods"),
    (WM + "go.apps-nvidia-com-nimservice-v1alpha1", "nimservice/autoscaled-auto-gpu"):
        ((5, 0), "nimservice-replicas-gpus"),
    (WM + "go.apps-nvidia-com-nimservice-v1alpha1", "nimservice/multinode"):
        ((1, 0), "nimservice-replicas-gpus"),
    (WM + "go.batch-job-v1", "job/sidecar-gpu"): ((5, 15), "job-completions"),
    (WM + "go.grove-io-podcliqueset-v1alpha1", "podcliqueset/no-replicas"):
        ((2, 16), "grove-replicas"),
    (WM + "go.grove-io-podcliqueset-v1alpha1", "podcliqueset/scaling-group"):
        ((18, 40), "grove-replicas"),
    (WM + "go.jobset-x-k8s-io-jobset-v1alpha2", "jobset/tricky"):
        ("EvaluationError", "jobset-counts"),
    (WM + "go.jobset-x-k8s-io-jobset-v1alpha2", "jobset/zero-replicas"):
        ("EvaluationError", "jobset-counts"),
    (WM + "go.kubeflow-org-mpijob-v2beta1", "mpijob/workers-default"):
        ((2, 9), "mpijob-worker-default"),
    (WM + "go.kubeflow-org-pytorchjob-v1", "pytorchjob/elastic"):
        ((5, 16), "training-replica-types"),
    (WM + "go.kubeflow-org-pytorchjob-v1", "pytorchjob/lowercase-keys"):
        ((2, 0), "training-replica-types"),
    (WM + "go.nvidia-com-dynamographdeployment-v1alpha1", "dynamographdeployment/merged-resources"):
        ((1, 0), "dynamo-resources"),
    (WM + "go.nvidia-com-dynamographdeployment-v1alpha1",
     "dynamographdeployment/multinode-autoscaled"): ((8, 0), "dynamo-resources"),
    (WM + "go.nvidia-com-dynamographdeployment-v1alpha1", "dynamographdeployment/typical"):
        ((4, 0), "dynamo-resources"),
    (WM + "go.ray-io-raycluster-v1", "raycluster/autoscaling-groups"):
        ((16, 26), "ray-desired-replicas"),
    (WM + "go.serving-kserve-io-inferenceservice-v1beta1",
     "inferenceservice/model-sidecar-explainer"): ((3, 2), "kserve-model-block"),
    (WM + "go.serving-kserve-io-inferenceservice-v1beta1", "inferenceservice/typical"):
        ((2, 0), "kserve-model-block"),
    (WM + "leaderworkerset-x-k8s-io-leaderworkerset-v1", "leaderworkerset/leader-only"):
        ((3, 0), "lws-leader-template"),
    (WM + "milvus-io-milvus-v1beta1", "milvus/cluster-26-hpa"):
        ("TemplateError", "milvus-components"),
    (WM + "milvus-io-milvus-v1beta1", "milvus/cluster-pre26"): ((22, 5), "milvus-components"),
    (WM + "milvus-io-milvus-v1beta1", "milvus/typical"): ((18, 1), "milvus-components"),
    (WM + "ray-io-rayjob-v1", "rayjob/existing-cluster"):
        ("EvaluationError", "rayjob-submitter-hosts"),
    (WM + "ray-io-rayjob-v1", "rayjob/sidecar-multihost"): ((3, 16), "rayjob-submitter-hosts"),
    (WM + "ray-io-rayjob-v1", "rayjob/typical"): ((3, 2), "rayjob-submitter-hosts"),
    (WM + "serving-knative-dev-service-v1", "knative-service/legacy-minscale-sidecar"):
        ((1, 1), "knative-legacy-min-scale"),
    (WM + "serving-knative-dev-service-v1", "knative-service/scale-to-zero"):
        ("TemplateError", "knative-template"),
    (WM + "serving-knative-dev-service-v1", "knative-service/typical"):
        ("TemplateError", "knative-template"),
    (WM + "serving-kserve-io-llminferenceservice-v1alpha1",
     "llminferenceservice-v1alpha1/autoscaled-zero"): ("TemplateError", "llmisvc-presets"),
    (WM + "serving-kserve-io-llminferenceservice-v1alpha1", "llminferenceservice-v1alpha1/typical"):
        ("TemplateError", "llmisvc-presets"),
    (WM + "serving-kserve-io-llminferenceservice-v1alpha2", "llminferenceservice/multinode-disagg"):
        ("TemplateError", "llmisvc-presets"),
    (WM + "serving-kserve-io-llminferenceservice-v1alpha2", "llminferenceservice/typical"):
        ("TemplateError", "llmisvc-presets"),
}

# (sample, frame) -> (upstream's reading, ours) for the kinds new in this round
STATUS_DIFFERENT: dict[tuple[str, str], tuple[str, str]] = {
    ("cronjob/typical", "created, waiting for the first scheduled time (no status yet)"):
        ("initializing", "running"),
    ("cronjob/typical", "last run failed (an older success is kept)"): ("running", "degraded"),
    ("cronjob/typical", "the first run failed"): ("running", "degraded"),
    ("pod/typical", "running, readiness probe not passed yet"): ("running", "initializing"),
    ("pod/typical", "a container crashed and waits to restart"): ("running", "degraded"),
    ("sandbox/typical", "pod exited successfully"): ("initializing", "completed"),
    ("sandbox/typical", "pod failed"): ("initializing", "failed"),
    ("sandbox/typical", "expired (shutdownTime reached, resources torn down)"):
        ("unknown", "completed"),
    ("sandbox/typical", "reconcile error"): ("initializing", "unknown"),
    **{(f"{folder}/typical", frame): reading
       for folder in ("llminferenceservice", "llminferenceservice-v1alpha1")
       for frame, reading in (("pods up, gateway not programmed", ("failed", "degraded")),
                              ("a baseRef config missing on this member",
                               ("failed", "initializing")))},
}
NEW_KINDS = {"cronjob": "go.batch-cronjob-v1", "pod": "go.core-pod-v1",
             "nimcache": "go.apps-nvidia-com-nimcache-v1alpha1",
             "sandbox": "agents-x-k8s-io-sandbox-v1beta1",
             "llminferenceservice": "serving-kserve-io-llminferenceservice-v1alpha2",
             "llminferenceservice-v1alpha1": "serving-kserve-io-llminferenceservice-v1alpha1",
             "dynamographdeployment-v1beta1": "go.nvidia-com-dynamographdeployment-v1beta1"}


def _name(path: Path) -> str:
    return str(path.relative_to(UPSTREAM).with_suffix(""))


def _catalog(path: Path) -> Catalog:
    return Catalog(load_text(path.read_text(encoding="utf-8"), source=str(path)))


def _load(path: Path) -> dict[str, Any]:
    obj = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(obj, dict)
    return obj


def _pairs() -> list[tuple[Path, Path]]:
    out = []
    for path in FILES:
        definition = _catalog(path).definitions[0]
        for sample in SAMPLES:
            obj = _load(sample)
            if (obj["apiVersion"], obj["kind"]) == (definition.api_version, definition.kind):
                out.append((path, sample))
    return out


PAIRS = _pairs()


@pytest.mark.parametrize("path", FILES, ids=[_name(p) for p in FILES])
def test_loads_unchanged(path: Path) -> None:
    (definition,) = _catalog(path).definitions
    documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert documents == [definition.document]
    assert definition.hold is None  # upstream has no copyDefinition: refused on a shared hub


def test_the_current_format_is_all_here() -> None:
    """The constructs workload-map added since the run-ai/karta examples are in the copies
    (so loading them is tested): additionalChildKinds, suspendDefinition, replica
    selectors, value and matchLabels type selectors, min/max replica paths, fragmented
    pod specs with imagePath and resourceClaimsPath, a matcher with both conditions and an
    expression, the suspending/resuming keys, and the Pending/Progressing keys of the
    dsx-ai-factory/karta variant."""
    text = "\n".join(p.read_text(encoding="utf-8") for p in UPSTREAM.glob("workload-map/*.yaml"))
    for construct in ("additionalChildKinds:", "suspendDefinition:", "replicaSelector:",
                      "matchLabels:", "value: ", "minReplicasPath:", "maxReplicasPath:",
                      "fragmentedPodSpecDefinition:", "imagePath:", "resourceClaimsPath:",
                      "suspending:", "resuming:", "progressing:", "pending:",
                      "groupByKeyPaths:", "podSpecPath:"):
        assert construct in text, construct
    assert GENERIC_OF_KEY["progressing"] == GenericStatus.INITIALIZING


def test_every_new_kind_has_an_upstream_definition() -> None:
    names = {_name(p).removeprefix("workload-map/") for p in FILES}
    assert set(NEW_KINDS.values()) <= names
    assert len(FILES) >= 30


@pytest.mark.parametrize(("path", "sample"), PAIRS,
                         ids=[f"{_name(p)}:{s.parent.name}/{s.stem}" for p, s in PAIRS])
def test_pods_and_gpus_agree_with_ours_or_differ_as_noted(path: Path, sample: Path) -> None:
    obj = _load(sample)
    ours = resolve(obj, catalog=Catalog.builtin()).demand
    try:
        theirs = resolve(obj, catalog=_catalog(path)).demand
        got: Any = (theirs.pods, theirs.gpus)
    except WorkloadError as error:
        assert str(error)
        got = type(error).__name__
    key = (_name(path), f"{sample.parent.name}/{sample.stem}")
    if key in DIFFERENT:
        assert got == DIFFERENT[key][0]
        assert got != (ours.pods, ours.gpus)
    else:
        assert got == (ours.pods, ours.gpus)


def test_every_recorded_difference_is_still_one_and_explained() -> None:
    keys = {(_name(p), f"{s.parent.name}/{s.stem}") for p, s in PAIRS}
    assert set(DIFFERENT) <= keys
    notes = (HERE / "catalog" / "NOTES.md").read_text(encoding="utf-8")
    for _, cause in DIFFERENT.values():
        assert f"`{cause}`" in notes, cause


def _frames(sample: Path) -> list[dict[str, Any]]:
    path = sample.with_name(sample.stem + ".frames.yaml")
    return yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else []


@pytest.mark.parametrize(("path", "sample"), PAIRS,
                         ids=[f"{_name(p)}:{s.parent.name}/{s.stem}" for p, s in PAIRS])
def test_every_frame_has_a_status_with_either_definition(path: Path, sample: Path) -> None:
    upstream, ours = _catalog(path), Catalog.builtin()
    sample_id = f"{sample.parent.name}/{sample.stem}"
    new = NEW_KINDS.get(sample.parent.name) == _name(path).removeprefix("workload-map/")
    for frame in _frames(sample):
        obj = _load(sample)
        if frame.get("status") is None:
            obj.pop("status", None)
        else:
            obj["status"] = frame["status"]
        theirs, mine = status_of(obj, catalog=upstream).status, status_of(obj, catalog=ours).status
        assert theirs in set(GenericStatus) and mine == frame["expect"]
        if new:
            expected = STATUS_DIFFERENT.get((sample_id, frame["name"]))
            assert (theirs, mine) == (expected or (mine, mine)), frame["name"]


@pytest.mark.parametrize(("definition", "reading"), [
    ("workload-map/go.kubeflow-org-pytorchjob-v1", "running"),
    ("pytorch", "initializing")])
def test_a_running_pytorchjob_through_each_upstream_definition(definition: str,
                                                              reading: str) -> None:
    """Issue 41: the recorded running frame (pytorchjob/typical "running (recorded)") reads
    running with ours and with upstream's current definition (pytorch.go). The old
    run-ai/karta example maps running only with Succeeded and Failed present and False;
    the training operator appends conditions as they happen (v1.8.1 pkg/util/status.go
    setCondition), and upstream's own library never matches an absent condition
    (reference §3.4, pinned by its tests): upstream reads it initializing with that file
    too. The difference is the old file's, not the engine's."""
    sample = HERE / "catalog" / "pytorchjob" / "typical.yaml"
    (frame,) = [f for f in _frames(sample) if f["name"] == "running (recorded)"]
    obj = _load(sample)
    obj["status"] = frame["status"]
    assert status_of(obj, catalog=Catalog.builtin()).status == "running"
    assert status_of(obj, catalog=_catalog(UPSTREAM / f"{definition}.yaml")).status == reading
