"""Scenario files for ``dispatcher simulate``: a fleet, a workload stream, policies, a seed.

A scenario is what an operator asks "what if" about. It is plain YAML; every error names the
file and the key (``scenario.yaml: generator.mix[1].runTime: expected ...``)::

    apiVersion: dispatcher.io/v1alpha1
    kind: Scenario
    name: two-members                  # optional, shown in reports
    seed: 7                            # same seed, same result
    duration: 24h                      # virtual time; services run until then
    policies: [most-free, best-fit]    # each policy replays the same stream
    fleet: ../clusters/local.yaml      # a fleet file (relative to this file) ...
    # fleet: {members: [...]}          # ... or the same format inline
    queue:                             # the controller's queue (config queue.*)
      backfillLimit: 50                # passed over this often by its namespace -> it blocks
      claimAfter: 5m                   # waited this long -> it claims a member (0: never)
    sampleInterval: 10m                # utilization/fragmentation sampling (default duration/200)
    workloads:                         # an explicit stream ...
    - at: 0s
      runTime: 2h                      # leave out for services: they run until the end
      priority: 10                     # higher first; default 0
      manifest: {apiVersion: jobset.x-k8s.io/v1alpha2, kind: JobSet, ...}
    - at: 5m
      file: workloads/serve.yaml       # or a manifest file, relative to this file
    - at: 1h
      count: 2000                      # a burst: this many copies ...
      every: 0.1s                      # ... this far apart (default 0: all at once)
      file: workloads/small.yaml
    generator:                         # ... and/or a generated one
      rate: 12/h                       # Poisson arrivals
      count: 300                       # stop after this many (else at `until`, else duration)
      until: 20h
      mix:
      - name: pretrain-64
        weight: 1
        file: workloads/jobset-64.yaml
        runTime: {lognormal: {median: 6h, sigma: 0.5}}
      - name: chat-8
        weight: 3
        file: workloads/isvc-8.yaml    # no runTime: a service
        priority: 100

Manifests are real objects of any kind the catalog knows; their ``dispatcher.io/cluster``,
``dispatcher.io/cluster-selector`` and ``dispatcher.io/policy`` annotations are honoured as
the controller honours them.

Run times: ``2h`` (fixed), ``{exponential: 1h}`` (mean), ``{lognormal: {median: 4h, sigma:
0.6}}``, ``{uniform: [30m, 2h]}``. Durations: seconds as numbers or ``90s``, ``30m``, ``2h``,
``1d``; rates ``N/s``, ``N/m``, ``N/h``, ``N/d``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dispatcher.fleet.fleetfile import FleetFileError, FleetSpec, load_fleet, parse_fleet
from dispatcher.placement.engine import POLICIES
from dispatcher.sim.quantities import RunTime, parse_duration, parse_rate

__all__ = [
    "DEFAULT_SCENARIO",
    "POLICIES",
    "Generator",
    "MixEntry",
    "QueueSpec",
    "RunTime",
    "Scenario",
    "ScenarioError",
    "WorkloadEntry",
    "load_scenario",
    "parse_scenario",
]

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_SCENARIO = DATA_DIR / "default-scenario.yaml"
_TOP_KEYS = {"apiVersion", "kind", "name", "seed", "duration", "policies", "fleet", "queue",
             "sampleInterval", "workloads", "generator"}


class ScenarioError(ValueError):
    """A scenario file is invalid; the message names the file and the key."""


@dataclass(frozen=True, kw_only=True)
class WorkloadEntry:
    """One explicit workload: its manifest, when it arrives, how long it runs (None: service)."""

    at: float
    manifest: Mapping[str, Any]
    run_time: float | None = None
    priority: int = 0
    where: str = ""
    count: int = 1
    """Copies of it (a burst), arriving ``every`` seconds apart from ``at``."""
    every: float = 0.0


@dataclass(frozen=True, kw_only=True)
class MixEntry:
    """One workload type of the generator's mix: a real manifest, a weight, a run time."""

    name: str
    weight: float
    manifest: Mapping[str, Any]
    run_time: RunTime | None = None
    priority: int = 0


@dataclass(frozen=True, kw_only=True)
class Generator:
    """Poisson arrivals at ``rate`` per second, drawn from ``mix`` by weight."""

    rate: float
    mix: tuple[MixEntry, ...]
    count: int | None = None
    until: float | None = None


@dataclass(frozen=True, kw_only=True)
class QueueSpec:
    """The queue's knobs, as the controller's: ``queue.backfillLimit`` (how often a waiting
    workload may be passed over by later ones of its namespace before it blocks them) and
    ``queue.claimAfter`` (how long it waits before it claims a member; 0: never)."""

    backfill_limit: int = 50
    claim_after_s: float = 300.0


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """A whole scenario, validated."""

    name: str
    source: str
    seed: int
    duration: float
    policies: tuple[str, ...]
    fleet: FleetSpec
    workloads: tuple[WorkloadEntry, ...] = ()
    generator: Generator | None = None
    queue: QueueSpec = QueueSpec()
    sample_interval: float = 0.0


class _Reader:
    """Validation helpers that prefix every message with the file and the key path."""

    def __init__(self, *, source: str, base: Path | None) -> None:
        self.source = source
        self.base = base

    def fail(self, key: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}: {key}: {message}" if key
                             else f"{self.source}: {message}")

    def mapping(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__} {value!r}")
        return value

    def keys(self, raw: dict[str, Any], key: str, allowed: set[str]) -> None:
        unknown = set(raw) - allowed
        if unknown:
            where = f"{key}." if key else ""
            first = sorted(unknown)[0]
            allowed_keys = ", ".join(sorted(allowed))
            raise self.fail(f"{where}{first}", f"unknown key (allowed: {allowed_keys})")

    def integer(self, value: Any, key: str, *, minimum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {value!r}")
        return value

    def number(self, value: Any, key: str, *, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or (
                positive and value <= 0) or value < 0:
            raise self.fail(key, f"expected a {'positive' if positive else 'non-negative'} "
                                 f"number, got {value!r}")
        return float(value)

    def duration(self, value: Any, key: str) -> float:
        try:
            return parse_duration(value)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def rate(self, value: Any, key: str) -> float:
        try:
            return parse_rate(value)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None

    def path(self, value: Any, key: str) -> Path:
        if not isinstance(value, str) or not value:
            raise self.fail(key, f"expected a file path, got {value!r}")
        path = Path(value)
        if not path.is_absolute() and self.base is not None:
            path = self.base / path
        return path

    def manifest(self, raw: dict[str, Any], key: str) -> dict[str, Any]:
        """The ``manifest:`` (inline) or ``file:`` (one YAML document) of an entry."""
        if ("manifest" in raw) == ("file" in raw):
            raise self.fail(key, "give exactly one of manifest (inline) or file (a path)")
        if "manifest" in raw:
            manifest = self.mapping(raw["manifest"], f"{key}.manifest")
            where = f"{key}.manifest"
        else:
            path = self.path(raw["file"], f"{key}.file")
            try:
                manifest = yaml.safe_load(path.read_text())
            except OSError as exc:
                raise self.fail(f"{key}.file", f"cannot read {path}: {exc.strerror}") from None
            except yaml.YAMLError as exc:
                raise self.fail(f"{key}.file", f"{path} is not valid YAML: {exc}") from None
            manifest = self.mapping(manifest, f"{key}.file")
            where = f"{key}.file"
        for field in ("apiVersion", "kind"):
            if not isinstance(manifest.get(field), str):
                raise self.fail(where, f"the manifest has no {field}")
        return manifest

    def run_time(self, value: Any, key: str) -> RunTime | None:
        if value is None or value == "untilEnd":
            return None
        if not isinstance(value, dict):
            return RunTime(distribution="fixed", a=self.duration(value, key))
        if len(value) != 1:
            raise self.fail(key, "expected one of: a duration, {exponential: MEAN}, "
                                 "{lognormal: {median, sigma}}, {uniform: [LOW, HIGH]}")
        (kind, arg), = value.items()
        if kind == "fixed":
            return RunTime(distribution="fixed", a=self.duration(arg, f"{key}.fixed"))
        if kind == "exponential":
            return RunTime(distribution="exponential", a=self.duration(arg, f"{key}.exponential"))
        if kind == "lognormal":
            spec = self.mapping(arg, f"{key}.lognormal")
            self.keys(spec, f"{key}.lognormal", {"median", "sigma"})
            return RunTime(distribution="lognormal",
                           a=self.duration(spec.get("median"), f"{key}.lognormal.median"),
                           b=self.number(spec.get("sigma", 0.5), f"{key}.lognormal.sigma"))
        if kind == "uniform":
            if not isinstance(arg, list) or len(arg) != 2:
                raise self.fail(f"{key}.uniform", f"expected [LOW, HIGH], got {arg!r}")
            low = self.duration(arg[0], f"{key}.uniform[0]")
            high = self.duration(arg[1], f"{key}.uniform[1]")
            if high < low:
                raise self.fail(f"{key}.uniform", f"HIGH {arg[1]!r} is below LOW {arg[0]!r}")
            return RunTime(distribution="uniform", a=low, b=high)
        raise self.fail(f"{key}.{kind}", "unknown distribution (fixed, exponential, "
                                         "lognormal, uniform)")


def _fleet(reader: _Reader, value: Any) -> FleetSpec:
    try:
        if isinstance(value, str):
            return load_fleet(reader.path(value, "fleet"))
        if isinstance(value, dict):
            return parse_fleet({"kind": "Fleet", **value}, source=f"{reader.source}: fleet")
    except FleetFileError as exc:
        raise ScenarioError(str(exc) if isinstance(value, dict)
                            else f"{reader.source}: fleet: {exc}") from None
    raise reader.fail("fleet", "expected a fleet file path or an inline fleet "
                               "({members: [...]})")


def _workloads(reader: _Reader, value: Any) -> tuple[WorkloadEntry, ...]:
    if not isinstance(value, list):
        raise reader.fail("workloads", f"expected a list, got {type(value).__name__}")
    entries = []
    for i, item in enumerate(value):
        key = f"workloads[{i}]"
        raw = reader.mapping(item, key)
        reader.keys(raw, key, {"at", "runTime", "priority", "manifest", "file", "count",
                               "every"})
        run_time = reader.run_time(raw.get("runTime"), f"{key}.runTime")
        if run_time is not None and run_time.distribution != "fixed":
            raise reader.fail(f"{key}.runTime", "an explicit workload takes a fixed duration")
        entries.append(WorkloadEntry(
            at=reader.duration(raw.get("at", 0), f"{key}.at"),
            manifest=reader.manifest(raw, key),
            run_time=None if run_time is None else run_time.a,
            priority=reader.integer(raw.get("priority", 0), f"{key}.priority"),
            where=f"{reader.source}: {key}",
            count=reader.integer(raw.get("count", 1), f"{key}.count", minimum=1),
            every=reader.duration(raw.get("every", 0), f"{key}.every")))
    return tuple(entries)


def _generator(reader: _Reader, value: Any) -> Generator:
    raw = reader.mapping(value, "generator")
    reader.keys(raw, "generator", {"rate", "count", "until", "mix"})
    if "rate" not in raw:
        raise reader.fail("generator.rate", "required (arrivals, e.g. 20/h)")
    mix_raw = raw.get("mix")
    if not isinstance(mix_raw, list) or not mix_raw:
        raise reader.fail("generator.mix", "expected a non-empty list of workload types")
    mix = []
    names: set[str] = set()
    for i, item in enumerate(mix_raw):
        key = f"generator.mix[{i}]"
        entry = reader.mapping(item, key)
        reader.keys(entry, key, {"name", "weight", "manifest", "file", "runTime", "priority"})
        manifest = reader.manifest(entry, key)
        meta = manifest.get("metadata")
        default = meta.get("name") if isinstance(meta, dict) else None
        name = entry.get("name", default or f"mix-{i}")
        if not isinstance(name, str) or name in names:
            raise reader.fail(f"{key}.name", f"expected a unique name, got {name!r}")
        names.add(name)
        mix.append(MixEntry(
            name=name,
            weight=reader.number(entry.get("weight", 1), f"{key}.weight", positive=True),
            manifest=manifest,
            run_time=reader.run_time(entry.get("runTime"), f"{key}.runTime"),
            priority=reader.integer(entry.get("priority", 0), f"{key}.priority")))
    count = raw.get("count")
    until = raw.get("until")
    return Generator(
        rate=reader.rate(raw["rate"], "generator.rate"),
        mix=tuple(mix),
        count=None if count is None else reader.integer(count, "generator.count", minimum=0),
        until=None if until is None else reader.duration(until, "generator.until"))


def parse_scenario(data: Any, *, source: str = "<scenario>",
                   base: Path | None = None) -> Scenario:
    """Validate a parsed scenario document; relative paths resolve against ``base``."""
    reader = _Reader(source=source, base=base)
    raw = reader.mapping(data, "")
    reader.keys(raw, "", _TOP_KEYS)
    if raw.get("kind", "Scenario") != "Scenario":
        raise reader.fail("kind", f"expected Scenario, got {raw.get('kind')!r}")
    if "fleet" not in raw:
        raise reader.fail("fleet", "required (a fleet file path or {members: [...]})")
    if "duration" not in raw:
        raise reader.fail("duration", "required (virtual time to simulate, e.g. 24h)")
    duration = reader.duration(raw["duration"], "duration")
    if duration <= 0:
        raise reader.fail("duration", "must be longer than 0s")
    policies_raw = raw.get("policies", ["most-free"])
    if isinstance(policies_raw, str):
        policies_raw = [policies_raw]
    if not isinstance(policies_raw, list) or not policies_raw:
        raise reader.fail("policies", f"expected a non-empty list, got {policies_raw!r}")
    for i, policy in enumerate(policies_raw):
        if policy not in POLICIES:
            raise reader.fail(f"policies[{i}]", f"unknown policy {policy!r} "
                                                f"(known: {', '.join(POLICIES)})")
    queue_raw = reader.mapping(raw.get("queue") or {}, "queue")
    for old in ("backfill", "starvationLimit"):
        if old in queue_raw:
            raise reader.fail(f"queue.{old}", "replaced by queue.backfillLimit (the "
                                              "controller's queue: see docs/operator-guide.md)")
    reader.keys(queue_raw, "queue", {"backfillLimit", "claimAfter"})
    workloads = _workloads(reader, raw["workloads"]) if "workloads" in raw else ()
    generator = _generator(reader, raw["generator"]) if "generator" in raw else None
    if not workloads and generator is None:
        raise reader.fail("workloads", "a scenario needs workloads, a generator, or both")
    interval = raw.get("sampleInterval")
    sample = (duration / 200 if interval is None
              else reader.duration(interval, "sampleInterval"))
    if sample <= 0:
        raise reader.fail("sampleInterval", "must be longer than 0s")
    return Scenario(
        name=str(raw.get("name") or Path(source).stem),
        source=source,
        seed=reader.integer(raw.get("seed", 0), "seed"),
        duration=duration,
        policies=tuple(dict.fromkeys(policies_raw)),
        fleet=_fleet(reader, raw["fleet"]),
        workloads=workloads,
        generator=generator,
        queue=QueueSpec(backfill_limit=reader.integer(
            queue_raw.get("backfillLimit", 50), "queue.backfillLimit", minimum=0),
            claim_after_s=reader.duration(queue_raw.get("claimAfter", 300),
                                          "queue.claimAfter")),
        sample_interval=sample,
    )


def load_scenario(path: str | Path | None = None) -> Scenario:
    """Read and validate a scenario file; None loads the built-in default scenario."""
    path = Path(path) if path is not None else DEFAULT_SCENARIO
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not valid YAML: {exc}") from None
    return parse_scenario(data, source=str(path), base=path.parent)
