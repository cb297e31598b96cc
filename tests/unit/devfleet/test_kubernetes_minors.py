"""A dev cluster per Kubernetes minor, offline: the fleet file's ``kubernetes`` section, the
flags each minor's components start with (1.37 dropped a gate and the cloud controllers,
which would stop its kube-scheduler and kube-controller-manager at start-up) and which
operator build runs on which minor."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatcher.devfleet.binaries import KUBERNETES_MODULES, OperatorBinary, minor_of
from dispatcher.devfleet.components import (
    GANG_FLAGS,
    apiserver_argv,
    gang_flags,
    kcm_controllers,
)
from dispatcher.devfleet.operatorbuilds import OPERATORS
from dispatcher.devfleet.state import LIGHT, REAL
from dispatcher.fleet.fleetfile import FleetFileError, KubernetesSpec, parse_fleet

MEMBER = {"name": "m", "nodePools": [{"name": "a", "count": 1, "gpus": 4}]}


def _flag(argv: list[str], name: str) -> str | None:
    return next((a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}=")), None)


def test_the_fleet_file_names_a_minor_and_gates_per_cluster() -> None:
    fleet = parse_fleet({"members": [
        {**MEMBER, "kubernetes": {"version": "v1.37",
                                  "featureGates": {"GenericWorkload": False}}},
        {**MEMBER, "name": "n"}],
        "hub": {"kubernetes": {"version": "1.37"}}})
    assert fleet.members[0].kubernetes == KubernetesSpec(
        version="1.37", feature_gates={"GenericWorkload": False})
    assert fleet.members[1].kubernetes == KubernetesSpec()
    assert fleet.hub.kubernetes.version == "1.37" and fleet.hub.node_pools  # default pools
    with pytest.raises(FleetFileError, match=r"members\[0\].kubernetes.version: .*1.37"):
        parse_fleet({"members": [{**MEMBER, "kubernetes": {"version": "1.37.2"}}]})
    with pytest.raises(FleetFileError, match=r"featureGates.GenericWorkload: expected bool"):
        parse_fleet({"members": [{**MEMBER, "kubernetes": {
            "featureGates": {"GenericWorkload": "yes"}}}]})
    with pytest.raises(FleetFileError, match=r"kubernetes: unknown key.*gates"):
        parse_fleet({"members": [{**MEMBER, "kubernetes": {"gates": {}}}]})


def test_every_minor_the_dev_fleet_builds_has_its_flags() -> None:
    assert set(GANG_FLAGS) == set(KUBERNETES_MODULES)
    assert minor_of("v1.37.2") == "1.37"


def test_1_37_serves_v1beta1_and_names_no_removed_gate_or_controller() -> None:
    flags = gang_flags("1.37")
    assert flags.runtime_config == "scheduling.k8s.io/v1beta1=true"
    assert "GangScheduling" not in flags.scheduler({})  # removed in 1.37: a start-up error
    assert flags.kcm({}) == "GenericWorkload=true"  # or PodGroups never lose their finalizer
    assert "cloud" not in kcm_controllers("1.37") and "service-lb" not in kcm_controllers(
        "1.37")
    assert "-cloud-node-lifecycle-controller" in kcm_controllers("")  # 1.35 still has them


def test_1_35_keeps_its_flags_and_a_gate_turned_off_turns_its_dependant_off() -> None:
    flags = gang_flags("")
    assert flags.apiserver({}) == "GenericWorkload=true"
    assert flags.scheduler({}) == "GenericWorkload=true,GangScheduling=true"
    assert flags.kcm({}) == ""
    off = {"GenericWorkload": False}
    assert flags.scheduler(off) == "GenericWorkload=false"
    assert gang_flags("1.37").apiserver(off) == "GenericWorkload=false"


def test_the_apiserver_argv_follows_the_profile_minor_and_gates(tmp_path: Path) -> None:
    def argv(profile: str, minor: str, **gates: bool) -> list[str]:
        return apiserver_argv(tmp_path / "kube-apiserver", tmp_path, etcd_url="http://e",
                              prefix="/p", port=1, profile=profile, minor=minor,
                              feature_gates=gates)
    real = argv(REAL, "1.37")
    assert _flag(real, "runtime-config") == "scheduling.k8s.io/v1beta1=true"
    assert _flag(real, "feature-gates") == "GenericWorkload=true"
    assert _flag(argv(REAL, "1.37", GenericWorkload=False),
                 "feature-gates") == "GenericWorkload=false"
    light = argv(LIGHT, "1.37")
    assert _flag(light, "runtime-config") is None and _flag(light, "feature-gates") is None
    # CompositePodGroup is served only in v1alpha3 (pkg/registry/scheduling/rest, v1.37.2)
    composite = argv(REAL, "1.37", CompositePodGroup=True, TopologyAwareWorkloadScheduling=True)
    assert _flag(composite, "runtime-config") == \
        "scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true"
    assert _flag(argv(REAL, "1.37", CompositePodGroup=False),
                 "runtime-config") == "scheduling.k8s.io/v1beta1=true"


def test_each_minor_runs_the_jobset_built_on_its_own_pod_api() -> None:
    """JobSet v0.11.0 (k8s.io/api v0.35) keeps 1.35's workloadRef, v0.12.0 (v0.36) 1.36+'s
    schedulingGroup: a member runs the one whose pod template carries its gang field."""
    jobsets = [op for op in OPERATORS if op.name == "jobset"]
    for minor in KUBERNETES_MODULES:
        assert sum(1 for op in jobsets if not op.minors or minor in op.minors) == 1
    assert {op.directory for op in jobsets} == {"jobset", "jobset-v0.12"}
    built = OperatorBinary(name="jobset", binary=Path("j"), version="v0.12.0",
                           crds_dir=Path("c"), minors=("1.37",))
    assert built.runs_on("1.37") and not built.runs_on("1.35")
    lws = next(op for op in OPERATORS if op.name == "lws")
    assert all(OperatorBinary(name="lws", binary=Path("l"), version="v", crds_dir=Path("c"),
                              minors=lws.minors).runs_on(m) for m in KUBERNETES_MODULES)
