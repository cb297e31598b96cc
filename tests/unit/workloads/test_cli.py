"""``dispatcher inspect`` and ``dispatcher definitions``: output shapes and exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import yaml

from dispatcher.cli import main

from .shapes import BATCHSET, BATCHSET_OBJ, FRAGSERVE, FRAGSERVE_OBJ, TRAINRUN


@pytest.fixture
def defs(tmp_path: Path) -> Path:
    folder = tmp_path / "defs"
    folder.mkdir()
    (folder / "batchset.yaml").write_text(BATCHSET)
    (folder / "fragserve.yaml").write_text(FRAGSERVE)
    return folder


def _write(tmp_path: Path, name: str, *docs: object) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_inspect_one_object_json_is_the_design_shape(
        tmp_path: Path, defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "a.yaml", BATCHSET_OBJ)
    assert main(["inspect", str(path), "--definitions", str(defs), "-o", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["definition"] == "demo-batchset" and out["pods"] == 7 and out["gpus"] == 52


def test_inspect_several_objects_gives_a_list_and_yaml(
        tmp_path: Path, defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "a.yaml", BATCHSET_OBJ, FRAGSERVE_OBJ)
    assert main(["inspect", str(path), "--definitions", str(defs), "-o", "yaml"]) == 0
    out = yaml.safe_load(capsys.readouterr().out)
    assert [o["kind"] for o in out] == ["BatchSet", "FragServe"]


def test_inspect_table_and_stdin(defs: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(
        {"kind": "List", "items": [BATCHSET_OBJ]})))
    assert main(["inspect", "-", "--definitions", str(defs)]) == 0
    header, row, blank, unit_header, unit = capsys.readouterr().out.strip().splitlines()
    assert header.split() == ["KIND", "NAME", "DEFINITION", "STATUS", "PODS", "GPUS", "GANGS"]
    assert row.split() == ["BatchSet", "train", "demo-batchset", "running", "7", "52", "1"]
    assert blank == ""
    assert unit_header.split() == ["OBJECT", "GANG", "UNIT", "PODS", "MIN", "PODS", "GPUS"]
    assert unit.split() == ["BatchSet/train", "train", "gang", "7", "7", "52"]


def test_inspect_lists_every_unit_and_counts_only_gangs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A definition with a per-replica gang and independent pods (BatchSet: leader 1 pod x
    4 GPUs, workers 2 replicas x 3 pods x 8 GPUs)."""
    defs = tmp_path / "units.yaml"
    defs.write_text(BATCHSET + """  optimizationInstructions:
    gangScheduling:
      gangsPath: >-
        {name: "lead", independent: true, members: [{component: "job", id: "leader", pods: 1}]},
        {name: "w-{0}", counts: [2], members: [{component: "job", id: "workers", pods: 3}]}
""")
    path = _write(tmp_path, "a.yaml", BATCHSET_OBJ)
    assert main(["inspect", str(path), "--definitions", str(defs), "-o", "wide"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[1].split()[:7] == ["BatchSet", "train", "demo-batchset", "running", "7",
                                    "52", "2"]
    assert [line.split() for line in lines[4:]] == [
        ["BatchSet/train", "lead", "pods", "1", "1", "4", "1x4xNVIDIA-H100-80GB-HBM3"],
        ["BatchSet/train", "w-0", "gang", "3", "3", "24", "3x8xany"],
        ["BatchSet/train", "w-1", "gang", "3", "3", "24", "3x8xany"]]
    assert main(["inspect", str(path), "--definitions", str(defs), "-o", "json"]) == 0
    gangs = json.loads(capsys.readouterr().out)["gangs"]
    assert [(g["name"], g["independent"], g["minPods"]) for g in gangs] == [
        ("lead", True, 1), ("w-0", False, 3), ("w-1", False, 3)]


def test_inspect_without_definition_exits_2_naming_kind_and_definitions(
        tmp_path: Path, defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "a.yaml", {"apiVersion": "x.io/v1", "kind": "Thing",
                                       "metadata": {"name": "t"}}, BATCHSET_OBJ)
    code = main(["inspect", str(path), "--definitions", str(defs), "--no-builtin",
                 "-o", "json"])
    captured = capsys.readouterr()
    assert code == 2
    assert "x.io/v1" in captured.err and "Thing" in captured.err
    assert "demo-batchset" in captured.err and "demo-fragserve" in captured.err
    assert json.loads(captured.out)["kind"] == "BatchSet"  # the others still print


def test_inspect_bad_input_is_a_clear_error_not_a_traceback(
        tmp_path: Path, defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("kind: [\n")
    bad_types = dict(BATCHSET_OBJ, spec={"jobs": "not a list"})
    typed = _write(tmp_path, "typed.yaml", bad_types)
    code = main(["inspect", str(broken), str(typed), str(tmp_path / "missing.yaml"),
                 "--definitions", str(defs)])
    err = capsys.readouterr().err
    assert code == 1
    assert "broken.yaml: cannot read manifests" in err
    assert "BatchSet/train" in err and "Cannot iterate over string" in err
    assert "missing.yaml" in err and "Traceback" not in err


def test_inspect_with_invalid_definitions_exits_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(TRAINRUN.replace("keys[]", "keys[]["))
    path = _write(tmp_path, "a.yaml", BATCHSET_OBJ)
    assert main(["inspect", str(path), "--definitions", str(bad)]) == 1
    assert "instanceIdPath" in capsys.readouterr().err


def test_definitions_list_json(defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "list", "--definitions", str(defs), "-o", "json"]) == 0
    items = json.loads(capsys.readouterr().out)
    names = [i["name"] for i in items]
    assert "demo-batchset" in names and "demo-fragserve" in names
    batchset = items[names.index("demo-batchset")]
    assert (batchset["apiVersion"], batchset["kind"]) == ("demo.example/v1", "BatchSet")


def test_definitions_lint_lists_every_error(
        tmp_path: Path, defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["definitions", "lint", str(defs)]) == 0
    assert "ok: 2 definitions in 2 files" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text(TRAINRUN.replace("keys[]", "keys[][").replace("ownerRef: trainrun",
                                                                   "ownerRef: nobody"))
    assert main(["definitions", "lint", str(bad), str(defs)]) == 1
    err = capsys.readouterr().err
    assert "instanceIdPath" in err and "non-existing component 'nobody'" in err
    assert "1 of 3 files have errors" in err


def test_definitions_lint_prints_one_line_per_problem_once(
        tmp_path: Path, defs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # two libjq errors in one expression, a multi-line expression, and a file named twice
    bad = tmp_path / "bad.yaml"
    bad.write_text(TRAINRUN.replace("keys[]", "keys[] | nosuch | other").replace(
        "ownerRef: trainrun", "ownerRef: nobody"))
    assert main(["definitions", "lint", str(bad), str(tmp_path / "." / "bad.yaml")]) == 1
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == len(set(lines)), "a problem is reported once"
    jq_lines = [line for line in lines if "failed to parse JQ" in line]
    assert len(jq_lines) == 1
    assert jq_lines[0].count("keys[] | nosuch | other") == 1  # the expression, once
    assert "nosuch/0 is not defined" in jq_lines[0] and "; jq: error: other/0" in jq_lines[0]
    assert "compile error" not in jq_lines[0] and "^" not in jq_lines[0]
    assert all(line.startswith(str(bad)) for line in lines[:-1])
    assert lines[-1] == "1 of 1 files have errors"
