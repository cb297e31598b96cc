"""``dispatcher inspect --status-trace``: recorded frames of one object, read one by one.

The recording in ``traces/`` is Workload Map's e2e recording of a real JobSet operator
(see its header); the catalog's frames files are replayed with their sample as the base.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatcher.cli import main
from dispatcher.workloads.statustrace import TraceError, agrees, frames_of

HERE = Path(__file__).parent
RECORDING = HERE / "traces" / "jobset-resumed.recording.yaml"
CATALOG = HERE / "catalog"
FRAMES = sorted(CATALOG.glob("*/*.frames.yaml"))


def _trace(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, Any]:
    code = main(["inspect", *args, "-o", "json"])
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


def test_a_recording_reads_frame_by_frame_next_to_upstreams_reading(
        capsys: pytest.CaptureFixture[str]) -> None:
    code, rows = _trace(["--status-trace", str(RECORDING)], capsys)
    assert code == 0
    assert [(r["frame"], r.get("status"), r.get("action")) for r in rows] == [
        ("#0", "suspended", None), ("#1", None, "Resume"), ("#2", "suspended", None),
        ("#3", "initializing", None), ("#4", "initializing", None), ("#5", "running", None)]
    assert [r.get("upstream") for r in rows] == [
        ["suspended"], None, ["suspended"], ["unknown"], ["unknown"],
        ["initializing", "running"]]
    # upstream's Undefined is no reading to agree or disagree with
    assert [r.get("agrees") for r in rows] == [True, None, True, None, None, True]


def test_the_table_says_same_or_why_it_differs(capsys: pytest.CaptureFixture[str]) -> None:
    sample = CATALOG / "job" / "indexed-tail"
    assert main(["inspect", "--status-trace", f"{sample}.frames.yaml",
                 "--base", f"{sample}.yaml"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FRAME", "STATUS", "STATUSES", "UPSTREAM", "READING"]
    tail = next(line for line in lines if line.startswith("index 0 done"))
    assert "[running, degraded]" in tail  # a label is text, not markup
    assert " running " in tail and "differs: every pod the Job controller wants" in tail


@pytest.mark.parametrize("frames", FRAMES, ids=[f"{p.parent.name}/{p.name}" for p in FRAMES])
def test_every_catalog_frame_reads_as_it_expects_through_the_trace(
        frames: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 0: every frame reads its ``expect``, and one that differs from its ``upstream``
    reading says why (3 otherwise)."""
    base = frames.with_name(frames.name.removesuffix(".frames.yaml") + ".yaml")
    code, rows = _trace(["--status-trace", str(frames), "--base", str(base)], capsys)
    assert code == 0, rows
    assert all(r["status"] == r["expect"] for r in rows)


def test_a_frame_read_otherwise_than_it_says_without_a_reason_exits_3(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    frames = tmp_path / "f.yaml"
    frames.write_text(yaml.safe_dump([{"name": "no status", "expect": "running",
                                       "status": None}]))
    code, rows = _trace(["--status-trace", str(frames), "--base",
                         str(CATALOG / "jobset" / "typical.yaml")], capsys)
    assert code == 3 and rows[0]["status"] == "pending"


def test_a_json_watch_stream_is_a_trace(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    """``kubectl get -w -o json`` prints one JSON object after another."""
    obj = yaml.safe_load((CATALOG / "jobset" / "typical.yaml").read_text())
    first = {**obj, "status": {"replicatedJobsStatus": [
        {"name": "workers", "active": 2, "ready": 0, "failed": 0, "succeeded": 0}]}}
    second = {**obj, "status": {"replicatedJobsStatus": [
        {"name": "workers", "active": 2, "ready": 2, "failed": 0, "succeeded": 0}]}}
    stream = tmp_path / "watch.json"
    stream.write_text(json.dumps(obj, indent=2) + "\n" + json.dumps(first, indent=2) + "\n"
                      + json.dumps(second))
    code, rows = _trace(["--status-trace", str(stream)], capsys)
    assert code == 0 and [r["status"] for r in rows] == ["pending", "running", "running"]
    assert "upstream" not in rows[0]


def test_frames_of_two_objects_are_refused(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    a = yaml.safe_load((CATALOG / "jobset" / "typical.yaml").read_text())
    b = {**a, "metadata": {**a["metadata"], "name": "other"}}
    trace = tmp_path / "t.yaml"
    trace.write_text(yaml.safe_dump_all([a, b]))
    assert main(["inspect", "--status-trace", str(trace)]) == 1
    assert "more than one object" in capsys.readouterr().err
    with pytest.raises(TraceError, match="no frames"):
        frames_of("")


def test_trace_and_files_are_exclusive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(CATALOG / "jobset" / "typical.yaml"),
                 "--status-trace", str(RECORDING)]) == 1
    assert main(["inspect", "--base", str(RECORDING), str(RECORDING)]) == 1
    assert "--base goes with --status-trace" in capsys.readouterr().err


def test_agreement_counts_any_matched_upstream_status() -> None:
    assert agrees("running", ("running", "degraded")) is True
    assert agrees("degraded", ("running",)) is False
    assert agrees("initializing", ("unknown",)) is None and agrees("running", ()) is None
