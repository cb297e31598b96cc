"""The pod templates a copy's admission dry-run judges (``workloads.mutate.pod_templates``).

Issue 35: a privileged, hostNetwork, hostPID, ``hostPath: /`` LLMInferenceService reached a
member, because kinds declared in fragments gave no pod to dry-run. The whole pod spec
their ``containersPath`` lives in is judged now. A kind whose ``containersPath`` builds
its list (KServe's InferenceService model container) locates none: its pod is the object
its path-shaped fragments share (the predictor inlines a PodSpec) with the containers the
resolution built (``Resolution.built``).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.mutate import pod_templates
from dispatcher.workloads.resolve import resolve

CATALOG = Catalog.builtin()
SAMPLES = Path(__file__).parent / "catalog"


def _sample(path: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((SAMPLES / path).read_text())
    return loaded


def test_a_fragmented_kinds_whole_pod_spec_is_judged() -> None:
    obj = _sample("llminferenceservice/typical.yaml")
    obj["spec"]["template"].update(hostNetwork=True, hostPID=True, volumes=[
        {"name": "root", "hostPath": {"path": "/"}}])
    obj["spec"]["template"]["containers"][0]["securityContext"] = {"privileged": True}
    templates = pod_templates(obj, CATALOG.require(obj))
    main = [t for t in templates if t.spec.get("hostPID")]
    assert len(main) == 1, [t.component for t in templates]
    spec = main[0].spec
    assert spec["hostNetwork"] is True
    assert spec["volumes"] == [{"name": "root", "hostPath": {"path": "/"}}]
    assert spec["containers"][0]["securityContext"] == {"privileged": True}
    # the router's scheduler is a pod of its own, judged too
    assert any(t.spec["containers"][0].get("image", "").startswith("ghcr.io/llm-d")
               for t in templates)


def test_a_containers_list_that_is_built_locates_nothing_and_breaks_nothing() -> None:
    obj = _sample("inferenceservice/typical.yaml")
    assert pod_templates(obj, CATALOG.require(obj)) == []


def test_a_built_containers_list_is_judged_in_the_pod_spec_it_is_built_for() -> None:
    """Issue 35: a privileged, hostNetwork, ``hostPath: /`` InferenceService predictor was
    submitted without a dry-run (its model container is built by the definition)."""
    obj = _sample("inferenceservice/typical.yaml")
    predictor = obj["spec"]["predictor"]
    predictor.update(hostNetwork=True, volumes=[{"name": "root", "hostPath": {"path": "/"}}],
                     containers=[{"name": "sidecar", "image": "registry.invalid/s:1"}])
    predictor["model"]["securityContext"] = {"privileged": True}
    resolution = resolve(obj, catalog=CATALOG)
    (template,) = pod_templates(obj, CATALOG.require(obj), built=resolution.built)
    assert template.component == "predictor"
    spec = template.spec
    assert spec["hostNetwork"] is True
    assert spec["volumes"] == [{"name": "root", "hostPath": {"path": "/"}}]
    model, sidecar = spec["containers"]
    assert model["name"] == "kserve-container"
    assert model["securityContext"] == {"privileged": True}
    assert sidecar["name"] == "sidecar"


def test_built_containers_without_a_shared_pod_spec_are_judged_as_assembled() -> None:
    """A definition whose fragments name no common pod spec: the assembled pod alone."""
    obj = _sample("inferenceservice/typical.yaml")
    definition = CATALOG.require(obj)
    predictor = next(c for c in definition.components if c.name == "predictor")
    assert predictor.spec is not None
    bare = replace(definition, components=tuple(
        replace(c, spec=replace(c.spec, fragments=tuple(
            (k, e) for k, e in c.spec.fragments if k == "containersPath")))
        if c is predictor and c.spec is not None else c for c in definition.components))
    built = (("predictor", {"containers": [{"name": "kserve-container", "image": "x"}]}),)
    (template,) = pod_templates(obj, bare, built=built)
    assert template.spec == {"containers": [{"name": "kserve-container", "image": "x"}]}
