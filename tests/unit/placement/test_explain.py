"""``dispatcher explain`` offline: manifest through the built-in catalog, fleet file members."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatcher.cli import main
from dispatcher.commands.explain import explain_demand, fleet_snapshots
from dispatcher.fleet.fleetfile import load_fleet

from .builders import demand, jobset_file, shape

FLEET = Path(__file__).resolve().parents[3] / "clusters" / "local.yaml"




def test_table_names_the_choice_and_every_members_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "-f", jobset_file(tmp_path, replicas=3), "--fleet", str(FLEET)])
    out = capsys.readouterr().out
    assert code == 0
    assert "chosen: member-1; nodes: member-1-h100-0 (8 GPUs, 1 pod(s))" in out
    assert "taints the pods do not tolerate: dedicated=research:NoSchedule" in out


def test_json_decision(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "-f", jobset_file(tmp_path, replicas=4), "--fleet", str(FLEET),
                 "--policy", "best-fit", "-o", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["workload"]["kind"] == "JobSet"
    decision = data["decision"]
    assert decision["chosen"] == "member-1" and decision["gpus"] == 32
    assert decision["policy"] == "best-fit"
    assert [m["member"] for m in decision["members"]] == ["member-1", "member-2"]
    assert sum(a["gpus"] for a in decision["assignment"]) == 32


def test_nothing_fits_exits_3_with_numeric_reason(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "-f", jobset_file(tmp_path, replicas=5), "--fleet", str(FLEET)])
    out = capsys.readouterr().out
    assert code == 3
    assert "room for 4 of 5 pods of 8 GPUs" in out
    assert "chosen: none" in out


def test_unknown_pin_is_an_error_not_a_fallback(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = jobset_file(tmp_path, replicas=1, annotations={"dispatcher.io/cluster": "member-9"})
    assert main(["explain", "-f", path, "--fleet", str(FLEET)]) == 1
    assert "pinned member 'member-9'" in capsys.readouterr().err


def test_selector_annotation_applies(tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = jobset_file(tmp_path, replicas=1,
                   annotations={"dispatcher.io/cluster-selector": "region=eu-west"})
    assert main(["explain", "-f", path, "--fleet", str(FLEET), "-o", "json"]) == 3
    members = json.loads(capsys.readouterr().out)["decision"]["members"]
    assert members[0]["reason"] == (
        "selector region=eu-west does not match (member has region=us-east)")


def test_fleet_is_required_until_live_mode_exists(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-f", jobset_file(tmp_path, replicas=1)]) == 1
    assert "--fleet" in capsys.readouterr().err


def test_explain_demand_over_fleet_file_members() -> None:
    members = fleet_snapshots(load_fleet(FLEET))
    decision = explain_demand(demand([shape(4, 4, product="NVIDIA-A100-SXM4-80GB")]),
                              members=members)
    assert decision.chosen == "member-2"
    assert decision.verdict("member-2").fits == 1
    assert decision.verdict("member-1").reason == (
        "no nodes with product NVIDIA-A100-SXM4-80GB")


def test_policy_precedence_flag_then_annotation_then_the_configured_default() -> None:
    members = fleet_snapshots(load_fleet(FLEET))
    gang = demand([shape(1, 1)])
    assert explain_demand(gang, members=members).policy == "most-free"
    assert explain_demand(gang, members=members, default_policy="best-fit").policy == \
        "best-fit"
    annotated = {"dispatcher.io/policy": "most-free"}
    assert explain_demand(gang, members=members, annotations=annotated,
                          default_policy="best-fit").policy == "most-free"
    assert explain_demand(gang, members=members, annotations=annotated, policy="best-fit",
                          default_policy="most-free").policy == "best-fit"


def test_show_copy_prints_the_copy_and_its_gang_objects_for_the_chosen_member(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The copy the controller would create (``control.core.copyplan``): stamped, joined to the
    member's gang mechanism, with the Workload created before it."""
    path = jobset_file(tmp_path, replicas=2)
    code = main(["explain", "-f", path, "--fleet", str(FLEET), "--show-copy",
                 "--gang-mechanism", "workload-api", "-o", "json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    copy = data["copy"]
    assert copy["member"] == data["decision"]["chosen"] == "member-1"
    assert copy["gangMechanism"] == "workload-api"
    body = copy["object"]
    assert body["kind"] == "JobSet" and body["metadata"]["labels"]["dispatcher.io/origin"]
    (workload,) = copy["gangObjects"]
    assert workload["kind"] == "Workload"
    pod = body["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["workloadRef"]["name"] == workload["metadata"]["name"]
    assert main(["explain", "-f", path, "--fleet", str(FLEET), "--show-copy"]) == 0
    out = capsys.readouterr().out
    assert "copy on member-1 (namespace team-a; gang mechanism none" in out
    assert out.count("\n---\n") == 1 and "kind: JobSet" in out  # no gang object without one


def test_show_copy_says_why_a_copy_would_not_be_written(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A refused one is said, not built (placing parks such a workload first, so the
    report is called as the CLI calls it, past placement)."""
    import yaml

    from dispatcher.commands.explain import copy_report, print_table
    from dispatcher.workloads.catalog import Catalog

    obj = yaml.safe_load(Path(jobset_file(tmp_path, replicas=1)).read_text())
    obj["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["nodeName"] = "x"
    catalog = Catalog.builtin()
    member = fleet_snapshots(load_fleet(str(FLEET)))[0]
    decision = explain_demand(demand([shape(1, 8)]), members=[member])
    copy = copy_report(obj, catalog.resolve(obj), catalog=catalog, member=member,
                       decision=decision, control=None)
    assert copy["member"] == "member-1" and "nodeName" in copy["refused"]
    print_table({"workload": {"kind": "JobSet", "name": "train"}, "_decision": decision,
                 "copy": copy}, wide=False)
    assert "copy on member-1: not written: PodTemplateRefused" in capsys.readouterr().out


def test_gang_mechanism_is_offline_only(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "-n", "team-a", "jobset/train", "--gang-mechanism", "none"]) == 1
    assert "offline only" in capsys.readouterr().err
