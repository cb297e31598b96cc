"""The dev fleet's hub modes, offline: the fleet file's ``hub:`` section, the profiles a
state file records (and reads from an older file), the argument checks of ``up`` that run
before anything is built or started, and what ``dispatcher dev up --help`` teaches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatcher import cli
from dispatcher.devfleet import devfleet
from dispatcher.devfleet.controlplane import (
    DEDICATED_CONTROLLERS,
    KCM_CONTROLLERS,
    ControlPlanes,
    FleetState,
)
from dispatcher.fleet.fleetfile import (
    DEFAULT_HUB_POOLS,
    FleetFileError,
    load_fleet,
    node_manifests,
    parse_fleet,
)

FLEETS = [Path(__file__).parents[2] / "integration" / "fleet.yaml",
          Path(__file__).parents[3] / "clusters" / "local.yaml"]
MEMBER = {"name": "member-1", "nodePools": [{"name": "a", "count": 1, "gpus": 4}]}


def test_without_a_hub_section_the_hub_gets_the_default_pool() -> None:
    fleet = parse_fleet({"members": [MEMBER]})
    assert fleet.hub.name == "hub"
    assert fleet.hub.node_pools == DEFAULT_HUB_POOLS
    names = [n["metadata"]["name"] for n in node_manifests(fleet.hub)]
    assert names == ["hub-h100-0", "hub-h100-1"]


def test_the_hub_section_declares_its_pools_and_nothing_else() -> None:
    fleet = parse_fleet({"members": [MEMBER], "hub": {"nodePools": [
        {"name": "l40s", "count": 3, "gpus": 4, "gpuProduct": "NVIDIA-L40S"}]}})
    assert [(p.name, p.count, p.gpus, p.gpu_product) for p in fleet.hub.node_pools] == [
        ("l40s", 3, 4, "NVIDIA-L40S")]
    assert parse_fleet({"members": [MEMBER], "hub": {"nodePools": []}}).hub.node_pools == ()
    with pytest.raises(FleetFileError, match=r"hub: unknown key.*labels"):
        parse_fleet({"members": [MEMBER], "hub": {"labels": {"a": "b"}}})
    with pytest.raises(FleetFileError, match=r"hub.nodePools\[0\].count"):
        parse_fleet({"members": [MEMBER], "hub": {"nodePools": [{"name": "x", "count": -1}]}})
    assert fleet.members == parse_fleet({"members": [MEMBER]}).members


@pytest.mark.parametrize("path", FLEETS, ids=lambda p: p.name)
def test_the_shipped_fleet_files_declare_a_small_h100_hub_pool(path: Path) -> None:
    pools = load_fleet(path).hub.node_pools
    assert sum(p.count * p.gpus for p in pools) == 16
    assert {p.gpu_product for p in pools} == {"NVIDIA-H100-80GB-HBM3"}


def test_the_dedicated_controllers_are_known_and_run_no_workload() -> None:
    assert "job-controller" not in DEDICATED_CONTROLLERS
    assert {"namespace-controller", "garbage-collector-controller",
            "serviceaccount-controller"} <= set(DEDICATED_CONTROLLERS)
    assert KCM_CONTROLLERS.startswith("*,")  # a real cluster: every default one


def _state_file(root: Path, clusters: list[dict[str, object]], **extra: object) -> None:
    proc = {"pid": 1, "argv": ["x"], "log": "l"}
    root.mkdir(parents=True, exist_ok=True)
    (root / "state.json").write_text(json.dumps({
        "root": str(root), "etcd": proc, "etcd_url": "http://e", "kubeconfig": "k",
        "clusters": [{"server": "s", "token": "t", "ca_file": "c", "kubeconfig": "k",
                      "etcd_prefix": "/p", "process": proc, **c} for c in clusters],
        **extra}))


def test_a_state_written_before_hub_modes_is_read_by_what_runs(tmp_path: Path) -> None:
    kcm = {"pid": 2, "argv": ["kcm"], "log": "l", "role": "kube-controller-manager"}
    _state_file(tmp_path, [{"name": "hub"}, {"name": "member-1", "components": [kcm]}])
    state = FleetState.read(tmp_path)
    assert state is not None
    assert state.hub_mode == ""
    assert [c.profile for c in state.clusters] == ["light", "real"]


def test_profiles_and_the_hub_mode_round_trip(tmp_path: Path) -> None:
    _state_file(tmp_path, [{"name": "hub", "profile": "dedicated"},
                           {"name": "member-1", "profile": "light"}], hub_mode="dedicated")
    state = FleetState.read(tmp_path)
    assert state is not None
    state.write()
    again = FleetState.read(tmp_path)
    assert again == state
    assert again.hub_mode == "dedicated"
    hub = again.cluster("hub")
    assert hub.controllers and not hub.real
    assert not again.cluster("member-1").controllers


def test_a_cluster_cannot_be_real_and_dedicated(tmp_path: Path) -> None:
    planes = ControlPlanes(root=tmp_path, binaries=None)
    with pytest.raises(ValueError, match="both real and dedicated"):
        planes.up(names=["hub"], real=["hub"], dedicated=["hub"])
    with pytest.raises(ValueError, match="not among"):
        planes.up(names=["hub"], dedicated=["other"])


def test_up_refuses_a_shared_hub_without_real_members_and_unknown_modes(
        tmp_path: Path) -> None:
    fleet = parse_fleet({"members": [MEMBER]})
    with pytest.raises(ValueError, match="needs real members"):
        devfleet.up(root=tmp_path, fleet=fleet, hub="shared")
    with pytest.raises(ValueError, match="not one of dedicated, shared"):
        devfleet.up(root=tmp_path, fleet=fleet, hub="bare")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="may not be called 'hub'"):
        devfleet.up(root=tmp_path, fleet=parse_fleet({"members": [{"name": "hub"}]}))
    assert not (tmp_path / "state.json").exists()


def test_dev_up_help_teaches_both_hub_modes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["dev", "up", "--help"])
    text = capsys.readouterr().out
    assert "--hub {dedicated,shared}" in text
    assert "dedicated (default)" in text and "shared  " in text
    assert "Choose it" in text


def test_dev_up_refuses_light_with_a_shared_hub(capsys: pytest.CaptureFixture[str],
                                                tmp_path: Path) -> None:
    code = cli.main(["dev", "--state", str(tmp_path), "up", "--light", "--hub", "shared",
                     "--fleet", str(FLEETS[0])])
    assert code == 2
    assert "--hub shared" in capsys.readouterr().err
