"""The Kueue profile's pure parts: flavors and quotas from a fleet file, the ClusterQueues,
the Kueue ``Configuration`` and which of the release's webhooks are registered."""

from __future__ import annotations

from pathlib import Path

import yaml

from dispatcher.control.nominator import DISPATCHER_NAME
from dispatcher.devfleet import kueue, multikueue
from dispatcher.devfleet.binaries import OperatorBinary
from dispatcher.fleet.fleetfile import load_fleet

FLEET = Path(__file__).parents[2] / "integration" / "fleet.yaml"


def test_one_flavor_per_product_and_taint_with_the_fleets_gpus() -> None:
    total = {f.name: gpus for f, gpus in multikueue.flavors(load_fleet(FLEET)).items()}
    assert total == {"nvidia-h100-80gb-hbm3": 16, "nvidia-l40s": 4,
                     "nvidia-a100-sxm4-80gb": 16,
                     "nvidia-h100-80gb-hbm3-dedicated-research": 8}


def test_a_tainted_flavor_carries_the_taint_and_the_product_label() -> None:
    flavor = next(f for f in multikueue.flavors(load_fleet(FLEET)) if f.taints)
    spec = flavor.manifest()["spec"]
    assert spec["nodeLabels"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert spec["nodeTaints"] == [{"key": "dedicated", "value": "research",
                                   "effect": "NoSchedule"}]


def test_a_worker_queue_holds_only_its_members_gpus_and_no_check() -> None:
    fleet = load_fleet(FLEET)
    queue = multikueue.cluster_queue(multikueue._member_quotas(fleet.member("member-2")),
                                     check=None)
    flavors = queue["spec"]["resourceGroups"][0]["flavors"]
    assert {f["name"]: f["resources"][0]["nominalQuota"] for f in flavors} == {
        "nvidia-a100-sxm4-80gb": 16, "nvidia-h100-80gb-hbm3-dedicated-research": 8}
    assert "admissionChecksStrategy" not in queue["spec"]
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta2"


def test_the_manager_queue_is_gated_by_the_multikueue_check() -> None:
    queue = multikueue.cluster_queue(multikueue.flavors(load_fleet(FLEET)),
                                     check=multikueue.CHECK)
    assert queue["spec"]["admissionChecksStrategy"] == {
        "admissionChecks": [{"name": "multikueue"}]}


def test_config_sets_client_limits_only_when_tuned(tmp_path: Path) -> None:
    default = kueue.config(webhook_port=1, health_port=2, cert_dir=tmp_path,
                           limits=kueue.ClientLimits())
    tuned = kueue.config(webhook_port=1, health_port=2, cert_dir=tmp_path,
                         limits=kueue.ClientLimits(qps=200, burst=400))
    assert "clientConnection" not in default
    assert tuned["clientConnection"] == {"qps": 200, "burst": 400}
    assert default["integrations"] == {"frameworks": ["batch/job", "jobset.x-k8s.io/jobset"]}
    assert default["internalCertManagement"] == {"enable": False}
    assert default["webhook"]["host"] == "127.0.0.1"
    assert "manageJobsWithoutQueueName" not in default


def test_the_manager_hands_workloads_to_our_dispatcher_only_when_asked(tmp_path: Path
                                                                        ) -> None:
    ours = kueue.config(webhook_port=1, health_port=2, cert_dir=tmp_path,
                        limits=kueue.ClientLimits(dispatcher_name=DISPATCHER_NAME))
    assert ours["multiKueue"] == {"dispatcherName": "dispatcher.io/multikueue-dispatcher"}
    assert "multiKueue" not in kueue.config(webhook_port=1, health_port=2, cert_dir=tmp_path,
                                            limits=kueue.ClientLimits())


def test_a_members_own_kueue_manages_jobs_without_a_queue_name(tmp_path: Path) -> None:
    member = kueue.config(webhook_port=1, health_port=2, cert_dir=tmp_path,
                          limits=kueue.ClientLimits(), member=True)
    assert member["manageJobsWithoutQueueName"] is True
    assert member["integrations"]["frameworks"] == list(kueue.MEMBER_INTEGRATIONS)


def test_only_kueues_own_and_the_enabled_integrations_webhooks_are_registered(
        tmp_path: Path) -> None:
    hooks = [{"kind": "MutatingWebhookConfiguration",
              "apiVersion": "admissionregistration.k8s.io/v1",
              "metadata": {"name": "mutating-webhook-configuration"},
              "webhooks": [
                  {"name": f"m{plural}.kb.io", "clientConfig": {"service": {
                      "name": "s", "namespace": "n", "path": f"/mutate-{plural}"}},
                   "rules": [{"apiGroups": [group], "resources": [plural]}]}
                  for group, plural in (("batch", "jobs"), ("jobset.x-k8s.io", "jobsets"),
                                        ("", "pods"), ("apps", "deployments"),
                                        ("kueue.x-k8s.io", "workloads"),
                                        ("kubeflow.org", "pytorchjobs"))]}]
    (tmp_path / "crds").mkdir()
    (tmp_path / "webhooks.yaml").write_text(yaml.safe_dump_all(hooks))
    op = OperatorBinary(name="kueue", binary=tmp_path / "kueue", version="v0",
                        crds_dir=tmp_path / "crds")
    [config] = kueue._webhooks(op, port=9443, ca_pem=b"ca", groups=kueue.WEBHOOK_GROUPS)
    assert [h["name"] for h in config["webhooks"]] == [
        "mjobs.kb.io", "mjobsets.kb.io", "mworkloads.kb.io"]
    [member] = kueue._webhooks(op, port=9443, ca_pem=b"ca",
                               groups=kueue.MEMBER_WEBHOOK_GROUPS)
    assert [h["name"] for h in member["webhooks"]][-1] == "mpytorchjobs.kb.io"
    assert config["webhooks"][0]["clientConfig"]["url"] == "https://127.0.0.1:9443/mutate-jobs"
    assert config["metadata"]["name"] == "kueue-mutating-webhook-configuration"
