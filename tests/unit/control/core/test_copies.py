"""build_copy and rejections on plain data: what a member must not receive, and what is final.

Covered: the Job's generated selector and template labels are dropped (kept with
``manualSelector``), server-owned metadata and status never travel, a definition's
``serverSetPaths`` that is not a path expression is a lint error, removal of several list
items keeps the right ones, which HTTP answers are permanent, and ``after_rejection``'s
table. The real member's verdict on such copies is in tests/integration/test_copies_real.py.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dispatcher.control.core.copies import Rejection, build_copy, stamped
from dispatcher.control.core.decide import ActionKind, Rules, after_rejection
from dispatcher.control.core.record import DispatchRecord
from dispatcher.kube.errors import error_for_status
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.paths import strip_server_set

CATALOG = Catalog.builtin()
GENERATED = ("controller-uid", "batch.kubernetes.io/controller-uid", "job-name",
             "batch.kubernetes.io/job-name")


def hub_job(**spec: Any) -> dict[str, Any]:
    """A Job as the hub's apiserver stores it after ``kubectl create job eval``."""
    labels = {"app": "eval", **{k: ("uid-1" if "uid" in k else "eval") for k in GENERATED}}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "eval", "namespace": "team-a", "uid": "uid-1",
                     "resourceVersion": "42", "generation": 1,
                     "creationTimestamp": "2026-11-30T10:00:00Z",
                     "labels": {"app": "eval"},
                     "managedFields": [{"manager": "kubectl-create"}],
                     "finalizers": ["dispatcher.io/dispatch"]},
        "spec": {"selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": "uid-1"}},
                 "backoffLimit": 6, "completions": 1, "parallelism": 1,
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [{"name": "eval", "image": "busybox"}],
                                       "restartPolicy": "Never"}},
                 **spec},
        "status": {"active": 1},
    }


def test_job_copy_drops_what_the_hub_generated() -> None:
    hub = hub_job()
    before = copy.deepcopy(hub)
    out = build_copy(hub, hub_id="hub-a", definition=CATALOG.find("batch/v1", "Job"))
    assert hub == before  # the input is not modified
    assert "selector" not in out["spec"]
    labels = out["spec"]["template"]["metadata"]["labels"]
    assert not set(GENERATED) & set(labels)
    assert labels["app"] == "eval" and labels["dispatcher.io/hub-uid"] == "uid-1"
    assert "status" not in out
    for key in ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields",
                "finalizers"):
        assert key not in out["metadata"], key
    assert out["spec"]["backoffLimit"] == 6  # the hub's defaults travel; they are valid


def test_job_with_manual_selector_keeps_the_users_selector() -> None:
    hub = hub_job(manualSelector=True)
    out = build_copy(hub, hub_id="hub-a", definition=CATALOG.find("batch/v1", "Job"))
    assert out["spec"]["selector"] == hub["spec"]["selector"]
    assert set(GENERATED) <= set(out["spec"]["template"]["metadata"]["labels"])


def _definition(paths: list[str]) -> str:
    items = "\n".join(f"    - {p!r}" for p in paths)
    return f"""
apiVersion: optimization.nvidia.com/v1alpha1
kind: ResourceInterface
metadata: {{name: thing}}
spec:
  structureDefinition:
    rootComponent:
      name: thing
      kind: {{group: example.com, version: v1, kind: Thing}}
      statusDefinition:
        phaseDefinition: {{path: .status.phase}}
        statusMappings:
          running: [{{byPhase: Running}}]
  copyDefinition:
    serverSetPaths:
{items}
"""


def test_server_set_paths_remove_list_items_without_shifting_others() -> None:
    (definition,) = load_text(_definition(['.spec.items[1, 3]', '.spec.gone']),
                              source="t.yaml")
    obj = {"spec": {"items": ["a", "b", "c", "d", "e"], "gone": 1, "kept": 2}}
    strip_server_set(obj, definition)
    assert obj == {"spec": {"items": ["a", "c", "e"], "kept": 2}}


def test_server_set_path_that_is_not_a_path_is_a_lint_error() -> None:
    with pytest.raises(Exception, match=r"copyDefinition.serverSetPaths\[0\].*not a path"):
        load_text(_definition(['.spec.a // 1']), source="t.yaml")


@pytest.mark.parametrize(("status", "permanent"), [
    (400, True), (403, True), (404, True), (413, True), (422, True),
    (401, False), (409, False), (410, False), (429, False), (500, False), (503, False),
])
def test_which_answers_are_final(status: int, permanent: bool) -> None:
    assert error_for_status(status=status, message="m").permanent is permanent


RECORD = DispatchRecord(name="job-eval", namespace="team-a", workload_uid="uid-1",
                        phase="Placed", cluster="m1", attempt=1)


def test_rejected_with_another_member_left_is_requeued_without_it() -> None:
    action = after_rejection(RECORD, Rules(), member="m1", message="HTTP 422 Invalid: x",
                             alternatives=("m2",))
    assert action.kind is ActionKind.REQUEUE and action.member == "m1"
    assert "m1 rejected the copy: HTTP 422 Invalid: x" in action.reason
    assert "m2" in action.reason


def test_rejected_with_no_member_left_fails() -> None:
    action = after_rejection(RECORD, Rules(), member="m1", message="HTTP 422 Invalid: x",
                             alternatives=())
    assert action.kind is ActionKind.FAIL
    assert action.reason.endswith("no other member could take it")


def test_rejected_on_the_last_attempt_fails() -> None:
    last = DispatchRecord(name="job-eval", namespace="team-a", workload_uid="uid-1",
                          phase="Placed", cluster="m1", attempt=3)
    action = after_rejection(last, Rules(max_attempts=3), member="m1", message="x",
                             alternatives=("m2",))
    assert action.kind is ActionKind.FAIL


def test_rejection_message_is_one_bounded_line() -> None:
    rejection = Rejection.of("m1", status=422, reason="Invalid",
                             message="first\nsecond " + "x" * 5000)
    assert "\n" not in rejection.message and len(rejection.message) <= 600
    assert rejection.describe().startswith("HTTP 422 Invalid: first second")


def _jobset_with_smuggled_stamps() -> dict[str, Any]:
    """A JobSet whose child Job template carries another workload's stamps (finding 3)."""
    victim = {"dispatcher.io/origin": "hub-a", "dispatcher.io/hub-uid": "victim-uid"}
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "attacker", "namespace": "team-b", "uid": "attacker-uid"},
            "spec": {"replicatedJobs": [{"name": "w", "replicas": 1, "template": {
                "metadata": {"labels": {**victim, "team": "b"}, "annotations": {
                    "dispatcher.io/hub-uid": "victim-uid",
                    "dispatcher.io/hub-object": "Job.batch/eval"}},
                "spec": {"template": {"metadata": {"labels": dict(victim)}, "spec": {
                    "containers": [{"name": "c", "image": "busybox"}]}}}}}]}}


def test_nested_templates_lose_every_dispatcher_stamp() -> None:
    out = build_copy(_jobset_with_smuggled_stamps(), hub_id="hub-a",
                     definition=CATALOG.find("jobset.x-k8s.io/v1alpha2", "JobSet"))
    job_template = out["spec"]["replicatedJobs"][0]["template"]
    assert job_template["metadata"]["labels"] == {"team": "b"}
    assert job_template["metadata"]["annotations"] == {}
    pod_labels = job_template["spec"]["template"]["metadata"]["labels"]
    # only our own stamp, for the attacker's own uid (pods are attributed to their workload)
    assert pod_labels == {"dispatcher.io/hub-uid": "attacker-uid"}
    assert stamped(out, hub_id="hub-a") == "attacker-uid"


def test_a_child_with_inherited_stamps_is_not_a_copy() -> None:
    hub = hub_job()
    copy_ = build_copy(hub, hub_id="hub-a", definition=CATALOG.find("batch/v1", "Job"))
    assert stamped(copy_, hub_id="hub-a") == "uid-1"
    # an operator created a Pod (or any child) copying the Job's labels and annotations
    child = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "eval-x7k2p", "labels": copy_["metadata"]["labels"],
        "annotations": copy_["metadata"]["annotations"]}}
    assert stamped(child, hub_id="hub-a") is None
    renamed = {**copy_, "metadata": {**copy_["metadata"], "name": "other"}}
    assert stamped(renamed, hub_id="hub-a") is None
