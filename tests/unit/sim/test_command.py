"""``dispatcher simulate`` end to end (in-process, no cluster)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.sim.scenario import parse_scenario
from dispatcher.workloads.trace import resolved_event
from tests.unit.sim.helpers import demand

ROOT = Path(__file__).resolve().parents[3]
JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"},
       "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {"containers": [
           {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 4}}}]}}}}


def scenario_file(tmp_path: Path, **changes: Any) -> Path:
    doc: dict[str, Any] = {
        "kind": "Scenario", "seed": 3, "duration": "10h", "policies": ["most-free", "best-fit"],
        "fleet": str(ROOT / "clusters" / "local.yaml"),
        "generator": {"rate": "6/h", "mix": [
            {"name": "train", "manifest": JOB, "runTime": {"exponential": "1h"}}]}}
    doc.update(changes)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["simulate", *argv, "-o", "json", "--no-progress"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_scenario_as_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys, str(scenario_file(tmp_path)))
    assert [p["policy"] for p in out["policies"]] == ["most-free", "best-fit"]
    assert out["fleet"] == {"members": 2, "nodes": 14, "gpus": 72}
    for policy in out["policies"]:
        assert policy["submitted"] == out["workloads"] > 20
        assert policy["dispatched"] + policy["pendingAtEnd"] == policy["submitted"]
        assert 0 < policy["gpuUtilization"] < 1
        assert set(policy["members"]) == {"member-1", "member-2"}
        [train] = policy["workloads"]
        assert (train["template"], train["kind"], train["gpus"]) == ("train", "Job", 8)
        assert train["dispatched"] == policy["dispatched"]


def test_same_seed_same_output_other_seed_differs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(scenario_file(tmp_path))
    first = run_json(capsys, path)
    again = run_json(capsys, path)
    other = run_json(capsys, path, "--seed", "4")
    for doc in (first, again, other):
        doc.pop("wallSeconds")
    assert first == again
    assert first != other


def test_builtin_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    out = run_json(capsys)
    assert out["scenario"] == "default"
    assert out["fleet"]["members"] == 3
    assert {"JobSet", "PyTorchJob", "RayJob", "LeaderWorkerSet", "InferenceService",
            "Deployment", "Job"} <= set(out["kinds"])
    first = out["policies"][0]
    [xl] = [u for u in first["unplaceable"] if u["template"] == "pretrain-xl"]
    assert xl["gpus"] == 256
    assert "us-west: no nodes with product NVIDIA-H100-80GB-HBM3" in xl["reason"]
    assert first["completed"] > 500


def test_table_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = tmp_path / "report"
    assert main(["simulate", str(scenario_file(tmp_path)), "--report", str(report)]) == 0
    out = capsys.readouterr().out
    assert "WAIT-P95" in out and "most-free" in out and "best-fit" in out
    assert "MEMBER" in out and "member-1" in out
    for name in ("utilization.png", "wait-cdf.png", "stranded-gpus.png"):
        assert (report / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((report / "summary.json").read_text())
    decisions = json.loads((report / "decisions.json").read_text())
    assert len(decisions["best-fit"]) == summary["policies"][1]["dispatched"]


@pytest.mark.parametrize(("changes", "needle"), [
    ({"duration": "soon"}, "duration"),
    ({"policies": ["cheapest"]}, "policies[0]"),
    ({"generator": {"rate": "6/h", "mix": [{"manifest": {"apiVersion": "x/v1",
                                                         "kind": "Unknown"}}]}},
     "generator.mix[0]: cannot resolve Unknown"),
])
def test_bad_scenarios_exit_2_naming_the_key(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str],
                                             changes: dict[str, Any], needle: str) -> None:
    path = scenario_file(tmp_path, **changes)
    assert main(["simulate", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and needle in err, err


def test_trace_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "hub.log"
    lines = ["controller started"]
    for i in range(6):
        lines.append(json.dumps(resolved_event(
            ts=f"2026-11-29T10:{i:02d}:00Z", uid=f"u{i}", namespace="a", name=f"w{i}",
            api_version="batch/v1", kind="Job", definition="batch-job",
            demand=demand((2, 8)))))
    lines.append(json.dumps({"event": "workload.finished", "ts": "2026-11-29T10:30:00Z",
                             "uid": "u0"}))
    trace.write_text("\n".join(lines) + "\n")
    out = run_json(capsys, "--trace", str(trace), "--fleet",
                   str(ROOT / "clusters" / "local.yaml"), "--trace-run-time", "1h",
                   "--policy", "best-fit", "--duration", "6h")
    [policy] = out["policies"]
    assert policy["policy"] == "best-fit"
    # local.yaml has four 8-GPU nodes that take these pods (member-1's H100s; member-2's
    # 8-GPU nodes are tainted): two workloads at a time, u0 ends at 30m, the rest run 1h.
    assert out["durationSeconds"] == 6 * 3600
    assert policy["dispatched"] == 6
    assert policy["completed"] == 6
    assert policy["waitSeconds"]["max"] > 0
    # Without --duration the replay drains: u0 runs 0-30m, u1 1m-1h01m, then each waits for
    # one of the two slots: u2 30m-1h30m, u3 1h01m-2h01m, u4 1h30m-2h30m, u5 2h01m-3h01m.
    drained = run_json(capsys, "--trace", str(trace), "--fleet",
                       str(ROOT / "clusters" / "local.yaml"), "--trace-run-time", "1h",
                       "--policy", "best-fit")
    assert drained["durationSeconds"] == 3 * 3600 + 60
    assert drained["policies"][0]["completed"] == 6
    assert drained["policies"][0]["waitSeconds"]["max"] == 2 * 3600 - 4 * 60


def test_trace_needs_a_fleet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.log"
    trace.write_text("")
    assert main(["simulate", "--trace", str(trace)]) == 2
    assert "--fleet" in capsys.readouterr().err


def test_print_default_is_a_self_contained_scenario(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--print-default"]) == 0
    doc = yaml.safe_load(capsys.readouterr().out)
    scenario = parse_scenario(doc, source="copy.yaml", base=None)
    assert scenario.generator is not None
    assert all("kind" in mix.manifest for mix in scenario.generator.mix)


def test_same_seed_same_result_across_processes(tmp_path: Path) -> None:
    # Different hash seeds change set and dict-of-str iteration orders between processes;
    # the result must not depend on them.
    import os
    import subprocess
    import sys

    path = str(scenario_file(tmp_path))
    outputs = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run(
            [sys.executable, "-m", "dispatcher.cli", "simulate", path, "-o", "json",
             "--report", str(tmp_path / f"r{hash_seed}")],
            env=env, capture_output=True, text=True, check=True, cwd=ROOT)
        doc = json.loads(done.stdout)
        doc.pop("wallSeconds")
        outputs.append((doc, (tmp_path / f"r{hash_seed}" / "decisions.json").read_text()))
    assert outputs[0] == outputs[1]
