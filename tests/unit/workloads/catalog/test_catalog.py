"""The built-in catalog against hand-computed expectations.

Every ``<kind>/<case>.yaml`` here is a manifest as a framework's users write it; next to it,
``<case>.expected.json`` holds what the framework's own controller creates (pods, GPUs,
gangs, pod shapes), worked out by hand from the framework's source (see NOTES.md), and
optionally ``<case>.frames.yaml``: status subtrees the controller writes, each with the
generic status it must read as. The engine is never used to produce an expectation.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatcher.cli import main
from dispatcher.workloads.catalog import Catalog
from dispatcher.workloads.definitions import load_text
from dispatcher.workloads.errors import EvaluationError, ObjectError
from dispatcher.workloads.mutate import mutate_pods
from dispatcher.workloads.resolve import resolve

HERE = Path(__file__).parent
DEFINITIONS = Path(__file__).parents[4] / "definitions"
FORMATS = {
    "Karta": "apiVersion: run.ai/v1alpha1\nkind: Karta\n",
    "ResourceInterface": "apiVersion: optimization.nvidia.com/v1alpha1\nkind: ResourceInterface\n",
}
SAMPLES = sorted(p for p in HERE.glob("*/*.yaml") if not p.name.endswith(".frames.yaml"))
SHAPE_KEYS = ("gpus", "gpuProduct", "cpu", "memory")


def _load(path: Path) -> dict[str, Any]:
    with path.open(encoding="utf-8") as handle:
        obj = yaml.safe_load(handle)
    assert isinstance(obj, dict), f"{path}: not one object"
    return obj


def _expected(sample: Path) -> dict[str, Any]:
    path = sample.with_name(sample.name.removesuffix(".yaml") + ".expected.json")
    assert path.is_file(), f"{sample.name} has no {path.name}"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _frames(sample: Path) -> list[dict[str, Any]]:
    path = sample.with_name(sample.name.removesuffix(".yaml") + ".frames.yaml")
    if not path.is_file():
        return []
    with path.open(encoding="utf-8") as handle:
        frames = yaml.safe_load(handle)
    assert isinstance(frames, list), f"{path}: a list of frames"
    return frames


def _shapes(shapes: list[Mapping[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Pod shapes as a multiset of identical pods, whatever way they are split or ordered."""
    counts: Counter[tuple[Any, ...]] = Counter()
    for shape in shapes:
        counts[tuple(shape.get(key) for key in SHAPE_KEYS)] += int(shape["count"])
    return counts


def _gangs(gangs: list[Mapping[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Units by name; an expectation without ``independent`` means a gang."""
    return {g["name"]: (g["pods"], g["minPods"], g["gpus"], g.get("independent", False),
                        _shapes(g["podShapes"]))
            for g in gangs}


def _components(components: list[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    return {c["name"]: sorted(c["instances"], key=lambda i: str(i["id"])) for c in components}


@pytest.fixture(scope="module")
def catalog() -> Catalog:
    return Catalog.builtin()


def _ids(samples: list[Path]) -> list[str]:
    return [f"{p.parent.name}/{p.stem}" for p in samples]


def test_there_are_samples() -> None:
    assert len(SAMPLES) >= 30


@pytest.mark.parametrize("sample", SAMPLES, ids=_ids(SAMPLES))
def test_sample_resolves_as_computed_by_hand(sample: Path, catalog: Catalog) -> None:
    want = _expected(sample)
    got = resolve(_load(sample), catalog=catalog).to_dict()
    for key in ("definition", "pods", "gpus", "status"):
        if key in want:
            assert got[key] == want[key], key
    if "statuses" in want:
        assert got["statuses"] == want["statuses"]
    assert _gangs(got["gangs"]) == _gangs(want["gangs"])
    if "components" in want:
        assert _components(got["components"]) == _components(want["components"])
    # Totals agree with the gangs they summarise.
    assert got["pods"] == sum(g["pods"] for g in got["gangs"])
    assert got["gpus"] == sum(g["gpus"] for g in got["gangs"])


def _frame_cases() -> Iterator[Any]:
    for sample in SAMPLES:
        for index, frame in enumerate(_frames(sample)):
            yield pytest.param(sample, frame,
                               id=f"{sample.parent.name}/{sample.stem}[{index}] {frame['name']}")


@pytest.mark.parametrize(("sample", "frame"), list(_frame_cases()))
def test_status_frame(sample: Path, frame: dict[str, Any], catalog: Catalog) -> None:
    obj = _load(sample)
    if frame.get("status") is None:
        obj.pop("status", None)
    else:
        obj["status"] = frame["status"]
    result = resolve(obj, catalog=catalog)
    assert result.status == frame["expect"], result.statuses
    if "statuses" in frame:
        assert list(result.statuses) == frame["statuses"]
    if "upstream" in frame:  # upstream's reading of this frame (issue 41)
        note = result.to_dict().get("upstreamDiffers")
        if frame["upstream"] == frame["expect"]:
            assert note is None, note
        else:  # a deliberate difference says why, about the workload's state
            assert isinstance(note, str) and len(note) > 40, note


def test_inspect_reads_every_frame_as_decided(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    """What a user sees: each frame written out as the object the member holds and given to
    ``dispatcher inspect -o json`` (built-in catalog, one call) reads as its frame says."""
    paths, wanted = [], []
    for sample in SAMPLES:
        for index, frame in enumerate(_frames(sample)):
            obj = _load(sample)
            if frame.get("status") is None:
                obj.pop("status", None)
            else:
                obj["status"] = frame["status"]
            path = tmp_path / f"{sample.parent.name}-{sample.stem}-{index}.yaml"
            path.write_text(yaml.safe_dump(obj), encoding="utf-8")
            paths.append(str(path))
            wanted.append((path.name, frame["name"], frame["expect"]))
    assert main(["inspect", *paths, "-o", "json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert [(name, what, r["status"]) for (name, what, _), r in zip(wanted, results, strict=True)] \
        == wanted


def test_every_catalog_kind_has_samples_and_frames(catalog: Catalog) -> None:
    sampled: dict[tuple[str, str], int] = Counter()
    framed: set[tuple[str, str]] = set()
    for sample in SAMPLES:
        obj = _load(sample)
        key = (obj["apiVersion"], obj["kind"])
        sampled[key] += 1
        if _frames(sample):
            framed.add(key)
    kinds = {(gvk.api_version, gvk.kind) for gvk in catalog.kinds()}
    assert kinds, "empty catalog"
    assert kinds - set(sampled) == set(), "catalog kinds without samples"
    assert {k for k in kinds if sampled[k] < 2} == set(), "kinds with fewer than two samples"
    assert kinds - framed == set(), "catalog kinds without status frames"


def test_every_frame_status_is_a_generic_status() -> None:
    generic = {"pending", "initializing", "running", "degraded", "completed", "failed",
               "suspended", "unknown"}
    for sample in SAMPLES:
        for frame in _frames(sample):
            assert frame["expect"] in generic, (sample.name, frame["name"])


@pytest.mark.parametrize("sample", SAMPLES, ids=_ids(SAMPLES))
def test_mutation_keeps_the_demand(sample: Path, catalog: Catalog) -> None:
    """The definitions' write paths only touch pod fields: stamping the dispatcher's pod
    fields never invents a component (a RayJob cluster, a submitter template) or changes
    what the workload needs, and the labels land where the definition reads them."""
    obj = _load(sample)
    definition = catalog.require(obj)
    out = mutate_pods(obj, definition, labels={"dispatcher.io/origin": "hub-1"},
                      annotations={"dispatcher.io/uid": "0000"}, scheduler_name="kai-scheduler",
                      node_selector={"pool": "gpu"}, priority_class_name="high",
                      tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists",
                                    "effect": "NoSchedule"}])
    before = resolve(obj, catalog=catalog).to_dict()
    after = resolve(out, catalog=catalog).to_dict()
    assert _gangs(after["gangs"]) == _gangs(before["gangs"])
    assert _components(after["components"]) == _components(before["components"])
    assert out != obj


def _broken(draw: st.DrawFn, value: Any, depth: int = 0) -> Any:
    """``value`` with random parts dropped, nulled or replaced by a wrong type."""
    action = draw(st.sampled_from(["keep", "keep", "keep", "recurse", "null", "wrong"]))
    if action == "null":
        return None
    if action == "wrong":
        return draw(st.one_of(st.integers(-3, 3), st.text(max_size=3), st.booleans(),
                              st.just([]), st.just({})))
    if isinstance(value, dict) and depth < 12:
        return {k: _broken(draw, v, depth + 1) for k, v in value.items()
                if draw(st.integers(0, 9)) > 0}
    if isinstance(value, list) and depth < 12:
        return [_broken(draw, v, depth + 1) for v in value]
    return value


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_broken_samples_fail_cleanly(data: st.DataObject) -> None:
    """Every definition copes with mangled objects: a result or a clear error, never a crash."""
    catalog = Catalog.builtin()
    sample = data.draw(st.sampled_from(SAMPLES))
    obj = _load(sample)
    spec = data.draw(st.composite(lambda draw: _broken(draw, obj.get("spec")))())
    status = data.draw(st.composite(lambda draw: _broken(draw, obj.get("status")))())
    mangled = {**obj, "spec": spec, "status": status}
    try:
        result = resolve(mangled, catalog=catalog)
    except (ObjectError, EvaluationError) as error:
        assert str(error)
        return
    assert result.demand.pods >= 0
    assert result.status in {"pending", "initializing", "running", "degraded", "completed",
                             "failed", "suspended", "unknown"}


def _in_other_format(path: Path) -> str:
    """The definition file with its document header switched to the other upstream GVK."""
    text = path.read_text(encoding="utf-8")
    for this, other in (("Karta", "ResourceInterface"), ("ResourceInterface", "Karta")):
        if FORMATS[this] in text:
            return text.replace(FORMATS[this], FORMATS[other])
    raise AssertionError(f"{path.name}: no upstream header")


def test_catalog_has_both_upstream_formats() -> None:
    texts = [p.read_text(encoding="utf-8") for p in DEFINITIONS.glob("*.yaml")]
    for header in FORMATS.values():
        assert any(header in text for text in texts), header


def test_either_upstream_format_gives_the_same_results(catalog: Catalog) -> None:
    """Karta and ResourceInterface share one spec: swapping the header changes nothing."""
    swapped = Catalog([d for path in sorted(DEFINITIONS.glob("*.yaml"))
                       for d in load_text(_in_other_format(path), source=str(path))])
    assert len(swapped) == len(catalog)
    for sample in SAMPLES:
        obj = _load(sample)
        frames = [None, *(f["status"] for f in _frames(sample))]
        for status in frames:
            probe = {**obj, "status": status} if status is not None else obj
            assert (resolve(probe, catalog=swapped).to_dict()
                    == resolve(probe, catalog=catalog).to_dict()), sample.name
