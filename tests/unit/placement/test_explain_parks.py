"""``dispatcher explain`` and the controller agree on a workload the controller parks.

Both go through ``control.core.placing.place``: the controller's placement of a Job object over
the dev fleet file's members, and ``dispatcher explain -f JOB --fleet FLEET`` of the same
object. Covered: a junk ``dispatcher.io/priority`` (parked before any member is asked:
explain exits 1 and says it parks, with the controller's message, where it used to say
"fits"), a Job no member could ever run (parked Unplaceable after the members were asked:
the per-member table, exit 3, and the controller's parking message), and the members a
Dispatch excluded (live mode passes them): the same decision as the controller's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.commands.explain import explain_objects
from dispatcher.control.core.names import PendingReason
from dispatcher.control.core.placing import QueueStep, place
from dispatcher.fleet.fleetfile import load_fleet
from dispatcher.placement.offline import fleet_snapshots
from tests.unit.control.placing_builders import CATALOG, given, job

FLEET = Path(__file__).resolve().parents[3] / "clusters" / "local.yaml"


def controller(obj: dict[str, Any], *, excluded: tuple[str, ...] = ()) -> Any:
    return place(given(obj, fleet=fleet_snapshots(load_fleet(FLEET)), excluded=excluded))


def explain(tmp_path: Path, obj: dict[str, Any], *args: str) -> int:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(obj))
    return main(["explain", "-f", str(path), "--fleet", str(FLEET), *args])


def test_a_junk_priority_parks_in_both(tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    obj = job(gpus=1, parallelism=1, annotations={"dispatcher.io/priority": "ten"})
    parked = controller(obj)
    assert parked.queue is QueueStep.PARK
    assert parked.reason is PendingReason.INVALID_ANNOTATION
    assert explain(tmp_path, obj) == 1
    err = capsys.readouterr().err
    assert f"parked (InvalidAnnotation): {parked.decision.summary}" in err
    # the same Job without the annotation fits: explain said so before, the priority aside
    assert explain(tmp_path, job(gpus=1, parallelism=1)) == 0


def test_a_job_no_member_could_ever_run_parks_in_both(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    obj = job(gpus=8, parallelism=9)  # 72 GPUs on 8-GPU nodes: more than any member has
    parked = controller(obj)
    assert parked.reason is PendingReason.UNPLACEABLE and parked.queue is QueueStep.PARK
    assert explain(tmp_path, obj) == 3
    out = capsys.readouterr().out
    assert "chosen: none" in out and "member-1" in out and "member-2" in out
    assert f"parked (Unplaceable): {parked.decision.summary}" in out
    assert explain(tmp_path, obj, "-o", "json") == 3
    report = json.loads(capsys.readouterr().out)
    assert report["parked"] == {"reason": "Unplaceable", "message": parked.decision.summary}
    assert report["decision"]["chosen"] is None


def test_excluded_members_as_the_dispatch_records_them() -> None:
    obj = job(gpus=4, parallelism=1)
    members = fleet_snapshots(load_fleet(FLEET))
    uid = obj["metadata"]["uid"]
    seen = []
    for excluded in ((), ("member-1",), ("member-1", "member-2")):
        placement = controller(obj, excluded=excluded)
        reports, _ = explain_objects(
            [obj], members=members, catalog=CATALOG, policy=None, default_policy="most-free",
            source="test", excluded={uid: excluded})
        (report,) = reports
        decision = report["_decision"]
        assert decision.chosen == placement.decision.chosen, excluded
        assert (report["parked"] is not None) == (placement.queue is QueueStep.PARK)
        for name in excluded:
            assert decision.verdict(name).reason == \
                "not ready: excluded: an earlier attempt there failed"
        seen.append(decision.chosen)
    assert seen[0] is not None and seen[1] not in (None, seen[0]) and seen[2] is None
