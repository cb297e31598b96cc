"""The pod templates a copy's admission dry-run judges (``workloads.mutate.pod_templates``).

Issue 35: a privileged, hostNetwork, hostPID, ``hostPath: /`` LLMInferenceService reached a
member, because kinds declared in fragments gave no pod to dry-run. The whole pod spec
their ``containersPath`` lives in is judged now; a kind whose ``containersPath`` builds
its list (KServe's InferenceService model container) still gives none, without an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.mutate import pod_templates

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
