"""The pure parts of KServe's and Knative Serving's set-up on a real member: the config
they read, the runtimes an InferenceService resolves to, and webhook configurations that
the operators' own reconcilers leave pointed at loopback.

The manifests are shaped as the releases ship them (kserve v0.15.2 ``config/``, knative.dev/
serving v0.50.0 ``config/core/``), trimmed to the fields these functions read."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml

from dispatcher.devfleet import operators, servingoperators
from dispatcher.devfleet.binaries import OPERATORS, OperatorBinary


def _op(tmp_path: Path, name: str, files: dict[str, object]) -> OperatorBinary:
    op = OperatorBinary(name=name, binary=tmp_path / name, version="v0",
                        crds_dir=tmp_path / "crds")
    op.files_dir.mkdir(parents=True)
    for file, docs in files.items():
        (op.files_dir / file).write_text(yaml.safe_dump_all(
            docs if isinstance(docs, list) else [docs]))
    return op


def test_kserve_defaults_to_raw_deployment_and_renders_runtime_images(tmp_path: Path) -> None:
    op = _op(tmp_path, "kserve", {
        "inferenceservice.yaml": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": "inferenceservice-config", "namespace": "kserve"}, "data": {
            "_example": "...", "deploy": '{\n  "defaultDeploymentMode": "Serverless"\n}',
            "ingress": '{"ingressClassName": "istio"}'}},
        "kustomization.yaml": {"images": [
            {"name": "huggingfaceserver", "newName": "kserve/huggingfaceserver",
             "newTag": "latest"},
            {"name": "kserve-sklearnserver", "newName": "kserve/sklearnserver",
             "newTag": "latest"}]},
        "kserve-huggingfaceserver.yaml": {
            "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
            "metadata": {"name": "kserve-huggingfaceserver"},
            "spec": {"containers": [{"name": "kserve-container",
                                     "image": "huggingfaceserver:replace"}]}},
        "kserve-sklearnserver.yaml": {
            "apiVersion": "serving.kserve.io/v1alpha1", "kind": "ClusterServingRuntime",
            "metadata": {"name": "kserve-sklearnserver"},
            "spec": {"containers": [{"name": "kserve-container",
                                     "image": "kserve-sklearnserver:replace"}]}},
    })
    config = servingoperators.kserve_config(op)
    assert json.loads(config["data"]["deploy"]) == {"defaultDeploymentMode": "RawDeployment"}
    assert "_example" not in config["data"]
    assert config["data"]["ingress"] == '{"ingressClassName": "istio"}'  # the rest as shipped
    assert config["metadata"] == {"name": "inferenceservice-config", "namespace": "kserve"}
    images = {r["metadata"]["name"]: r["spec"]["containers"][0]["image"]
              for r in servingoperators.kserve_runtimes(op)}
    assert images == {"kserve-huggingfaceserver": "kserve/huggingfaceserver:latest",
                      "kserve-sklearnserver": "kserve/sklearnserver:latest"}


DEFAULTING = {
    "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
    "metadata": {"name": "webhook.serving.knative.dev",
                 "labels": {"app.kubernetes.io/name": "knative-serving"}},
    "webhooks": [{"name": "webhook.serving.knative.dev", "admissionReviewVersions": ["v1"],
                  "clientConfig": {"service": {"name": "webhook",
                                               "namespace": "knative-serving"}},
                  "failurePolicy": "Fail", "sideEffects": "None",
                  "rules": [{"apiGroups": ["serving.knative.dev"], "apiVersions": ["*"],
                             "operations": ["CREATE", "UPDATE"],
                             "resources": ["services"]}]}]}


def test_knative_webhooks_keep_their_names_rules_and_point_at_loopback(tmp_path: Path) -> None:
    """knative.dev/pkg's defaulting reconciler rewrites, in the configuration named like
    itself, the entry of that same name (and fails without a service reference): the entry
    must be named otherwise, the configuration not (its reconciler would retry forever)."""
    validation = {**DEFAULTING, "kind": "ValidatingWebhookConfiguration",
                  "metadata": {"name": "validation.webhook.serving.knative.dev"},
                  "webhooks": [{**DEFAULTING["webhooks"][0],  # type: ignore[index]
                                "name": "validation.webhook.serving.knative.dev"}]}
    config = {**validation, "metadata": {"name": "config.webhook.serving.knative.dev"},
              "webhooks": [{**validation["webhooks"][0],  # type: ignore[index]
                            "name": "config.webhook.serving.knative.dev"}]}
    op = _op(tmp_path, "knative-serving", {
        "defaulting.yaml": DEFAULTING, "resource-validation.yaml": validation,
        "configmap-validation.yaml": [config, {"apiVersion": "v1", "kind": "Secret",
                                               "metadata": {"name": "webhook-certs"}}]})
    configs = {c["metadata"]["name"]: c
               for c in servingoperators.knative_webhooks(op, port=4443, ca_pem=b"PEM")}
    assert set(configs) == set(servingoperators.KNATIVE_WEBHOOK_PATHS)
    for name, path in servingoperators.KNATIVE_WEBHOOK_PATHS.items():
        (hook,) = configs[name]["webhooks"]
        assert hook["name"] != name and hook["name"].endswith(name)
        assert hook["clientConfig"] == {"url": f"https://127.0.0.1:4443{path}",
                                        "caBundle": base64.b64encode(b"PEM").decode()}
        assert hook["rules"] == DEFAULTING["webhooks"][0]["rules"]  # type: ignore[index]


def test_knative_config_sets_the_queue_image_tag_skips_and_podspec_features(
        tmp_path: Path) -> None:
    def configmap(name: str, data: dict[str, str]) -> dict[str, object]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "knative-serving",
                             "labels": {"app.kubernetes.io/component": "controller"},
                             "annotations": {"knative.dev/example-checksum": "1"}},
                "data": data}
    op = _op(tmp_path, "knative-serving", {
        "deployment.yaml": configmap("config-deployment", {
            "queue-sidecar-image": "ko://knative.dev/serving/cmd/queue", "_example": "..."}),
        "features.yaml": configmap("config-features", {"_example": "..."}),
        "gc.yaml": configmap("config-gc", {"_example": "..."}),
        "defaulting.yaml": DEFAULTING})
    configs = {c["metadata"]["name"]: c for c in servingoperators.knative_configmaps(op)}
    assert set(configs) == {"config-deployment", "config-features", "config-gc"}
    deployment = configs["config-deployment"]["data"]
    assert deployment["queue-sidecar-image"].startswith("gcr.io/knative-releases/")
    skipped = deployment["registries-skipping-tag-resolving"].split(",")
    assert {"kind.local", "ko.local", "dev.local", "index.docker.io"} <= set(skipped)
    assert configs["config-features"]["data"] == servingoperators.KNATIVE_FEATURES
    assert configs["config-gc"]["data"] == {}  # the examples are documentation only
    assert configs["config-gc"]["metadata"]["labels"] == {
        "app.kubernetes.io/component": "controller"}  # the config webhook selects on it


def test_every_operator_has_a_preparer() -> None:
    assert {op.name for op in OPERATORS} == set(operators.PREPARERS)
