"""``dispatcher explain`` and ``dispatcher simulate`` with topology domains, offline.

The dev fleet (clusters/local.yaml) keeps member-1's four H100 nodes in two racks of two and
declares the level ``rack``. Covered: a JobSet of 2 x 8 GPUs with ``dispatcher.io/topology:
rack`` is placed in one rack, the table lists every member's racks with their numbers and
the chosen rack, JSON carries ``domains`` and ``rooms``; one of 3 x 8 GPUs fits member-1's
four free H100s (40 GPUs free with its L40S) but no rack: exit 3 with the best rack's
numbers; without the annotation the same JobSet is placed as before; a simulated run
reports the rack in its reasons.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dispatcher.cli import main
from dispatcher.control.core.placing import Ask, request_of
from dispatcher.control.core.queue import Entry
from dispatcher.fleet.fleetfile import load_fleet
from dispatcher.sim.cores import CoreBackend
from dispatcher.sim.engine import simulate
from dispatcher.sim.results import SimWorkload

from .builders import H100, demand, jobset_file, shape

FLEET = Path(__file__).resolve().parents[3] / "clusters" / "local.yaml"
TOPOLOGY = {"dispatcher.io/topology": "rack"}




def test_table_shows_each_members_racks_and_the_chosen_one(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "-f", jobset_file(tmp_path, replicas=2, annotations=TOPOLOGY),
                 "--fleet", str(FLEET)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "domains: rack r1 (gang train)" in out
    lines = [line.split() for line in out.splitlines()]
    assert ["member-1", "rack", "r1", "16", "2/2", "train", "chosen"] in lines
    assert ["member-1", "rack", "r2", "16", "2/2", "train", "-"] in lines
    assert "placed 2 pod(s) / 16 GPU(s) in 1 gang(s) on member-1 in rack r1" in out


def test_json_carries_domains_and_rooms(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "-f", jobset_file(tmp_path, replicas=2, annotations=TOPOLOGY),
                 "--fleet", str(FLEET), "-o", "json"])
    decision = json.loads(capsys.readouterr().out)["decision"]
    assert code == 0
    assert decision["domains"] == [{"gangs": ["train"], "level": "rack",
                                    "nodeLabel": "example.com/rack", "value": "r1"}]
    member = next(m for m in decision["members"] if m["member"] == "member-1")
    assert {(r["value"], r["pods"], r["wanted"]) for r in member["rooms"]} == {
        ("r1", 2, 2), ("r2", 2, 2)}


def test_no_rack_holds_it_although_the_member_could(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", "-f", jobset_file(tmp_path, replicas=3, annotations=TOPOLOGY),
                 "--fleet", str(FLEET)])
    out = capsys.readouterr().out
    assert code == 3
    assert ("no rack holds gang train (3 pods, 24 GPUs): best rack r1 holds 2 of 3 pods "
            "(16 GPUs free there); then r2 2 of 3; 2 racks, 40 GPUs free on the member") in out
    plain = main(["explain", "-f", jobset_file(tmp_path, replicas=3, annotations={}),
                  "--fleet", str(FLEET)])
    assert plain == 0  # the same JobSet without the annotation fits member-1's 4 H100s


def test_simulate_places_in_a_rack_and_says_why_not() -> None:
    spec = load_fleet(FLEET)
    annotations = tuple(sorted(TOPOLOGY.items()))

    def job(uid: str, at: float, pods: int) -> SimWorkload:
        return SimWorkload(uid=uid, namespace="default", name=uid, kind="JobSet",
                           api_version="jobset.x-k8s.io/v1alpha2", template=uid, arrival=at,
                           run_time=100.0, priority=0, annotations=annotations,
                           demand=demand([shape(pods, 8, product=H100)]))

    fits = job("fits", 0.0, 2)
    request = request_of(Ask(entry=Entry(uid="fits", priority=0, created=0.0),
                             demand=fits.demand, annotations=dict(annotations)),
                         default_policy="most-free", choice_only=True)
    assert request.topology is not None and request.topology.level == "rack"
    result = simulate(fleet=spec, workloads=[fits, job("too-big", 1.0, 3)],
                      backend=CoreBackend(spec), policy="most-free", duration=10.0,
                      sample_interval=1.0)
    [choice] = result.decisions
    assert choice.member == "member-1"
    assert {node.rsplit("-", 1)[0] for node, _ in choice.nodes} in (
        {"member-1-h100"}, {"member-1-h100-r2"})
    [too_big] = result.unplaceable
    assert "no rack holds gang g0 (3 pods, 24 GPUs)" in too_big.reasons["member-1"]
