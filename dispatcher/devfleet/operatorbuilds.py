"""What the dev fleet builds besides the control plane: the workload operators of a real
member (``OPERATORS``) and the peer systems compared with the dispatcher (``PEERS``), each a
wrapper module under ``deploy/local/<name>/`` with the CRDs, webhook manifests and release
files it carries (``devfleet/binaries.py`` builds them)."""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["OPERATORS", "PEERS", "OperatorBuild"]


@dataclass(frozen=True, kw_only=True)
class OperatorBuild:
    """How to build one workload operator: its wrapper module ``deploy/local/<name>``."""

    name: str
    module: str
    """The Go module (its version is the wrapper's require line)."""
    package: str
    """The main package to build."""
    crds: tuple[str, ...]
    """CRD YAML files inside the module, copied next to the binary; ``module:path`` names a
    file of another module of the build (Knative's networking and caching CRDs ship in
    their own modules, at the versions serving pins)."""
    webhooks: str = ""
    """The module's webhook manifests (copied as ``webhooks.yaml``), "" when it has none."""
    files: tuple[str, ...] = ()
    """Other release manifests (ConfigMaps, runtimes, webhooks; ``module:path`` as for
    ``crds``), copied into ``files/`` for the operator's preparer."""
    wrapper: str = ""
    """Its wrapper module's directory under ``deploy/local`` ("": ``name``)."""
    minors: tuple[str, ...] = ()
    """The Kubernetes minors whose clusters run this build (empty: every minor)."""

    @property
    def directory(self) -> str:
        return self.wrapper or self.name


_JOBSET = OperatorBuild(name="jobset", module="sigs.k8s.io/jobset", package="sigs.k8s.io/jobset",
                        crds=("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",),
                        webhooks="config/components/webhook/manifests.yaml")

OPERATORS: tuple[OperatorBuild, ...] = (
    # A JobSet's pod templates are typed by the k8s.io/api its release was built with: its
    # CRD schema prunes, and its controller's Go types drop, a pod field of a newer minor.
    # v0.11.0 (k8s.io/api v0.35) carries 1.35's spec.workloadRef; v0.12.0 (v0.36) carries
    # 1.36+'s spec.schedulingGroup. Each cluster runs the one of its minor, as a platform
    # upgrading a member upgrades its operators with it.
    replace(_JOBSET, minors=("1.35",)),
    replace(_JOBSET, wrapper="jobset-v0.12", minors=("1.37",)),
    OperatorBuild(name="lws", module="sigs.k8s.io/lws", package="sigs.k8s.io/lws/cmd",
                  crds=("config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",),
                  webhooks="config/webhook/manifests.yaml"),
    OperatorBuild(name="kuberay", module="github.com/ray-project/kuberay/ray-operator",
                  package="github.com/ray-project/kuberay/ray-operator",
                  crds=("config/crd/bases/ray.io_rayclusters.yaml",
                        "config/crd/bases/ray.io_rayjobs.yaml",
                        "config/crd/bases/ray.io_rayservices.yaml")),
    OperatorBuild(name="training-operator", module="github.com/kubeflow/training-operator",
                  package="github.com/kubeflow/training-operator/cmd/training-operator.v1",
                  crds=("manifests/base/crds/kubeflow.org_pytorchjobs.yaml",
                        "manifests/base/crds/kubeflow.org_tfjobs.yaml"),
                  webhooks="manifests/base/webhook/manifests.yaml"),
    # The wrapper's own main package: upstream's cmd/mpi-operator with its health port
    # made configurable (see deploy/local/mpi-operator/README.md).
    OperatorBuild(name="mpi-operator", module="github.com/kubeflow/mpi-operator",
                  package="example.invalid/dispatcher/local/mpi-operator/cmd/mpi-operator",
                  crds=("manifests/base/kubeflow.org_mpijobs.yaml",)),
    # KServe's manager (RawDeployment mode: see servingoperators._kserve); every CRD of v0.15.2
    # (no LLMInferenceService at that version), its config and model-server runtimes.
    OperatorBuild(name="kserve", module="github.com/kserve/kserve",
                  package="github.com/kserve/kserve/cmd/manager",
                  crds=tuple(f"config/crd/full/serving.kserve.io_{plural}.yaml"
                             for plural in ("clusterservingruntimes",
                                            "clusterstoragecontainers", "inferencegraphs",
                                            "inferenceservices", "localmodelcaches",
                                            "localmodelnodegroups", "localmodelnodes",
                                            "servingruntimes", "trainedmodels")),
                  webhooks="config/webhook/manifests.yaml",
                  files=("config/configmap/inferenceservice.yaml",
                         "config/runtimes/kserve-huggingfaceserver.yaml",
                         "config/runtimes/kserve-sklearnserver.yaml",
                         "config/runtimes/kustomization.yaml")),
    # Knative Serving's controller and webhook in one process: the wrapper's own main
    # (see deploy/local/knative-serving/README.md); the networking and caching CRDs come
    # from the modules of the versions serving pins.
    OperatorBuild(name="knative-serving", module="knative.dev/serving",
                  package="example.invalid/dispatcher/local/knative-serving/cmd/knative-serving",
                  crds=(*(f"config/core/300-resources/{name}.yaml"
                          for name in ("configuration", "domain-mapping", "metric",
                                       "podautoscaler", "revision", "route", "service")),
                        *(f"knative.dev/networking:config/{name}.yaml"
                          for name in ("certificate", "domain-claim", "ingress",
                                       "serverlessservice")),
                        "knative.dev/caching:config/image.yaml"),
                  files=(*(f"config/core/configmaps/{name}.yaml"
                           for name in ("autoscaler", "certmanager", "defaults", "deployment",
                                        "domain", "features", "gc", "leader-election",
                                        "logging", "observability", "tracing")),
                         "knative.dev/networking:config/config-network.yaml",
                         *(f"config/core/webhooks/{name}.yaml"
                           for name in ("configmap-validation", "defaulting",
                                        "resource-validation")))),
)
"""The operators of a real member, in start order."""

PEERS: tuple[OperatorBuild, ...] = (
    # Every CRD of the release (MultiKueue's too) and its webhook manifests; the profile
    # registers only the webhooks of Kueue's own kinds and of the integrations it enables.
    OperatorBuild(name="kueue", module="sigs.k8s.io/kueue", package="sigs.k8s.io/kueue/cmd/kueue",
                  crds=tuple(f"config/components/crd/bases/kueue.x-k8s.io_{plural}.yaml"
                             for plural in ("admissionchecks", "clusterqueues", "cohorts",
                                            "localqueues", "multikueueclusters",
                                            "multikueueconfigs", "provisioningrequestconfigs",
                                            "resourceflavors", "topologies",
                                            "workloadpriorityclasses", "workloads")),
                  webhooks="config/components/webhook/manifests.yaml"),
)
"""Other multi-cluster systems run beside the dispatcher for comparison (built on demand)."""
