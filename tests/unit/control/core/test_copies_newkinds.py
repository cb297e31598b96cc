"""Copies of the kinds added for issue 25, built from objects as the hub stores them.

A bare Pod: what the hub's admission wrote (priority, preemptionPolicy, the ServiceAccount
token volume and its mounts) is left out, the tenant's own fields (nodeName, volumes,
tolerations) stay, the hub uid label lands on the pod itself. Holds come off the copy:
a CronJob's and an LLMInferenceService's pause set by the webhook, never a user's own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from dispatcher.control.core.copies import build_copy
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.holds import HOLD_ANNOTATION

CATALOG = Catalog.builtin()
SAMPLES = Path(__file__).parents[2] / "workloads" / "catalog"


def _hub(obj: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"].update(uid="u-1", resourceVersion="7", generation=1,
                           creationTimestamp="2026-11-29T10:00:00Z")
    return out


def test_a_pod_copy_drops_what_the_hub_admission_wrote() -> None:
    pod = _hub(yaml.safe_load((SAMPLES / "pod" / "hub-defaulted.yaml").read_text()))
    pod["spec"]["volumes"].append({"name": "data", "emptyDir": {}})
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "data", "mountPath": "/d"})
    out = build_copy(pod, hub_id="hub-a", definition=CATALOG.find("v1", "Pod"))
    spec = out["spec"]
    assert "priority" not in spec and "preemptionPolicy" not in spec
    assert spec["volumes"] == [{"name": "data", "emptyDir": {}}]
    assert spec["containers"][0]["volumeMounts"] == [{"name": "data", "mountPath": "/d"}]
    assert spec["containers"][1].get("volumeMounts", []) == []
    assert spec["tolerations"] == pod["spec"]["tolerations"]  # the tenant's to keep
    assert out["metadata"]["labels"]["dispatcher.io/hub-uid"] == "u-1"
    assert "uid" not in out["metadata"]
    pinned = copy.deepcopy(pod)
    pinned["spec"]["nodeName"] = "gpu-7"  # the tenant's: kept, and the pod policy refuses it
    assert build_copy(pinned, hub_id="hub-a",
                      definition=CATALOG.find("v1", "Pod"))["spec"]["nodeName"] == "gpu-7"


def test_a_cronjob_copy_is_unsuspended_only_when_the_webhook_suspended_it() -> None:
    cron = _hub(yaml.safe_load((SAMPLES / "cronjob" / "typical.yaml").read_text()))
    definition = CATALOG.find("batch/v1", "CronJob")
    held = copy.deepcopy(cron)
    held["spec"]["suspend"] = True
    held["metadata"]["annotations"] = {HOLD_ANNOTATION: ".spec.suspend"}
    assert "suspend" not in build_copy(held, hub_id="hub-a", definition=definition)["spec"]
    own = copy.deepcopy(cron)
    own["spec"]["suspend"] = True
    assert build_copy(own, hub_id="hub-a", definition=definition)["spec"]["suspend"] is True


def test_an_llminferenceservice_copy_loses_the_stop_the_webhook_set() -> None:
    svc = _hub(yaml.safe_load((SAMPLES / "llminferenceservice" / "typical.yaml").read_text()))
    svc["metadata"]["annotations"] = {
        "serving.kserve.io/stop": "true", "team": "a",
        HOLD_ANNOTATION: '.metadata.annotations."serving.kserve.io/stop"'}
    out = build_copy(svc, hub_id="hub-a",
                     definition=CATALOG.find("serving.kserve.io/v1alpha2", "LLMInferenceService"))
    annotations = out["metadata"]["annotations"]
    assert "serving.kserve.io/stop" not in annotations and HOLD_ANNOTATION not in annotations
    assert annotations["team"] == "a"
    # the dispatcher's pod labels go to the pods through spec.labels (propagated by KServe)
    assert out["spec"]["labels"]["dispatcher.io/hub-uid"] == "u-1"
    assert out["spec"]["router"]["scheduler"]["labels"]["dispatcher.io/hub-uid"] == "u-1"
