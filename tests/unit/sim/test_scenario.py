from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatcher.sim.scenario import ScenarioError, load_scenario, parse_scenario

JOB = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
       "spec": {"template": {"spec": {"containers": [
           {"name": "c", "image": "i", "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}}}
FLEET = {"members": [{"name": "a", "nodePools": [{"name": "p", "count": 2, "gpus": 8}]}]}


def base(**changes: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {"apiVersion": "dispatcher.io/v1alpha1", "kind": "Scenario",
                           "seed": 1, "duration": "2h", "fleet": FLEET,
                           "workloads": [{"at": "1m", "runTime": "10m", "manifest": JOB}]}
    doc.update(changes)
    return doc


def test_builtin_default_scenario_loads() -> None:
    scenario = load_scenario()
    assert scenario.name == "default"
    assert {"most-free", "best-fit"} <= set(scenario.policies)
    assert len(scenario.fleet.members) >= 3
    products = {pool.gpu_product for m in scenario.fleet.members for pool in m.node_pools}
    assert {"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB", "NVIDIA-L40S"} <= products
    kinds = {entry.manifest["kind"] for entry in scenario.workloads}
    assert scenario.generator is not None
    kinds |= {mix.manifest["kind"] for mix in scenario.generator.mix}
    assert {"JobSet", "PyTorchJob", "RayJob", "LeaderWorkerSet", "InferenceService",
            "Deployment"} <= kinds


def test_minimal_scenario_values() -> None:
    scenario = parse_scenario(base(policies=["best-fit"], queue={"backfillLimit": 3}),
                              source="s.yaml")
    assert scenario.duration == 7200.0
    assert scenario.policies == ("best-fit",)
    assert scenario.queue.backfill_limit == 3
    assert scenario.workloads[0].at == 60.0
    assert scenario.workloads[0].run_time == 600.0
    assert scenario.sample_interval == pytest.approx(7200.0 / 200)


def test_fleet_and_manifest_files_resolve_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump({"kind": "Fleet", **FLEET}))
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.yaml").write_text(yaml.safe_dump(JOB))
    doc = base(fleet="fleet.yaml", workloads=[{"at": 0, "file": "jobs/j.yaml"}])
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    scenario = load_scenario(path)
    assert scenario.fleet.members[0].name == "a"
    assert scenario.workloads[0].manifest["kind"] == "Job"
    assert scenario.workloads[0].run_time is None  # no runTime: a service


@pytest.mark.parametrize(("changes", "key"), [
    ({"duration": "forever"}, "duration"),
    ({"duration": 0}, "duration"),
    ({"policies": ["fastest"]}, "policies[0]"),
    ({"seed": "x"}, "seed"),
    ({"colour": 1}, "colour"),
    ({"queue": {"backfillLimit": -1}}, "queue.backfillLimit"),
    ({"queue": {"backfill": 16}}, "queue.backfill"),
    ({"queue": {"starvationLimit": 32}}, "queue.starvationLimit"),
    ({"workloads": [{"at": "soon", "manifest": JOB}]}, "workloads[0].at"),
    ({"workloads": [{"at": 0}]}, "workloads[0]"),
    ({"workloads": [{"at": 0, "manifest": {"kind": "Job"}}]}, "workloads[0].manifest"),
    ({"workloads": [{"at": 0, "manifest": JOB, "runTime": {"exponential": "1h"}}]},
     "workloads[0].runTime"),
    ({"workloads": [{"at": 0, "file": "missing.yaml"}]}, "workloads[0].file"),
    ({"workloads": [], "generator": {"mix": [{"manifest": JOB}]}}, "generator.rate"),
    ({"generator": {"rate": "fast", "mix": [{"manifest": JOB}]}}, "generator.rate"),
    ({"generator": {"rate": "1/h", "mix": []}}, "generator.mix"),
    ({"generator": {"rate": "1/h", "mix": [{"manifest": JOB, "weight": 0}]}},
     "generator.mix[0].weight"),
    ({"generator": {"rate": "1/h", "mix": [{"manifest": JOB, "runTime": {"gauss": 1}}]}},
     "generator.mix[0].runTime.gauss"),
    ({"generator": {"rate": "1/h", "mix": [
        {"manifest": JOB, "runTime": {"lognormal": {"median": "1h", "sigma": -1}}}]}},
     "generator.mix[0].runTime.lognormal.sigma"),
    ({"generator": {"rate": "1/h", "mix": [
        {"manifest": JOB, "runTime": {"uniform": ["2h", "1h"]}}]}},
     "generator.mix[0].runTime.uniform"),
    ({"fleet": {"members": [{"name": "a", "nodePools": [{"name": "p", "count": -1}]}]}},
     "fleet: members[0].nodePools[0].count"),
    ({"fleet": 3}, "fleet"),
])
def test_errors_name_the_file_and_key(changes: dict[str, Any], key: str) -> None:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(base(**changes), source="my.yaml", base=Path("/nonexistent"))
    message = str(info.value)
    assert message.startswith("my.yaml: "), message
    assert f" {key}" in message or f"{key}:" in message, message


def test_unreadable_and_invalid_files(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("duration: [unclosed\n")
    with pytest.raises(ScenarioError, match=r"bad\.yaml: not valid YAML"):
        load_scenario(bad)


def _mutate(value: Any, rng: random.Random) -> Any:
    """Replace one random leaf of a nested document with junk."""
    junk = rng.choice([None, -1, "zz", [], {}, True, 1e9, "5/h", {"a": 1}])
    if isinstance(value, dict) and value:
        key = rng.choice(sorted(value))
        return {**value, key: _mutate(value[key], rng) if rng.random() < 0.7 else junk}
    if isinstance(value, list) and value:
        i = rng.randrange(len(value))
        return [*value[:i], _mutate(value[i], rng), *value[i + 1:]]
    return junk


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_broken_documents_give_scenario_errors_only(seed: int) -> None:
    rng = random.Random(seed)
    doc = base(generator={"rate": "2/h", "count": 3, "mix": [
        {"name": "m", "manifest": JOB, "runTime": {"lognormal": {"median": "1h", "sigma": 1}}}]})
    broken = _mutate(doc, rng)
    try:
        parse_scenario(broken, source="fuzz.yaml")
    except ScenarioError as exc:
        assert str(exc).startswith("fuzz.yaml")


def test_mix_name_defaults_survive_odd_metadata() -> None:
    odd = {**JOB, "metadata": ["not", "a", "mapping"]}
    scenario = parse_scenario(base(generator={"rate": "1/h", "mix": [{"manifest": odd}]}),
                              source="s.yaml")
    assert scenario.generator is not None
    assert scenario.generator.mix[0].name == "mix-0"
