"""Resolve the same objects through the same upstream definitions, in Go and in Python.

Sides (one JSON line each):

* ``go-naive``: the upstream Go library (github.com/run-ai/karta) used as its README shows;
  its jq runner parses and compiles every expression on every call;
* ``go-compiled``: the same library calls through a runner that compiles each expression
  once (benchmarks/golib/main.go);
* ``python-upstream``: this project's engine (``dispatcher.workloads``) with the upstream
  example definitions;
* ``python-catalog``: this project's built-in catalog (``definitions/*.yaml``).

The upstream definitions are the library's own examples (docs/examples/*.yaml), read from
the karta module's directory (``go list -m -json``); the objects are this project's catalog
samples (tests/unit/workloads/catalog/) of the kinds those examples describe that every side
resolves. The Go program is built once and cached under ``~/.cache/dispatcher/bin/golib-<key>``
(key: Go version, go.mod, go.sum, Go sources and, when set, the GOWORK file). Rounds
alternate the four sides; each side runs on one core (the Go program with GOMAXPROCS=1).

    python benchmarks/golib.py [--rounds 5] [--passes 20] [--rebuild]
    python benchmarks/golib.py --public [--rounds 3] [--passes 20]

``--public`` measures the public entry the way an outside caller meets it, per kind, with
the upstream examples of tests/unit/workloads/upstream/ on both sides: every example object
of tests/unit/workloads/test_upstream.py (``--objects cases``, the default: empty specs, so
several kinds end in an error) or every catalog sample of the kinds those examples describe
(``--objects samples``), those whose resolve ends in an error included (the error is
rendered, as the Go program renders ``err.Error()``), through
``dispatcher.workloads.resolve.resolve_with`` (the definition by ``Catalog.require``). The
Python side runs twice: ``warm`` (a warm-up pass, then passes over the same objects: every
memo stays) and ``cleared`` (before every pass each ``functools`` cache of
``dispatcher.workloads`` is cleared and the objects are fresh deep copies, so no memo
keyed by a value or an id can hit). Times are CPU time (user and system, the Go program's
whole process, the Python process's), so that other work on a shared machine does not
count. Each kind's line gives the mean µs per object of
``go-compiled`` (``-errors``: its failing objects timed up to their error) and of both
Python runs, with ``ratio_*`` = Go's time / Python's (above 1: Python ahead); also the
built-in catalog on the same objects. Objects go to both sides as JSON (what an apiserver
sends); ``--yaml-objects`` gives Python the YAML-parsed ones (timestamps as datetimes).

The karta module has to be reachable through the Go module proxy, or through a Go workspace
(``GOWORK=/path/go.work`` with a ``use`` of benchmarks/golib and a ``replace`` of
github.com/run-ai/karta by a local checkout): see benchmarks/golib/README.md.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import functools
import gc
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODULE = ROOT / "benchmarks" / "golib"
UPSTREAM = ROOT / "tests" / "unit" / "workloads" / "upstream"
KARTA = "github.com/run-ai/karta"
SIDES = ("go-naive", "go-compiled", "python-upstream", "python-catalog")


def _go_env() -> dict[str, str]:
    env = {**os.environ, "GOTOOLCHAIN": "local", "CGO_ENABLED": "0"}
    if os.environ.get("GOWORK", "off") == "off":
        env["GOFLAGS"] = "-mod=mod"  # -mod=mod is refused in workspace mode
    return env


def build(*, rebuild: bool = False) -> Path:
    """The cached Go program, built when missing; BuildError says what failed."""
    from dispatcher.devfleet.binaries import BuildError, _key, cache_root

    digest = hashlib.sha256(_key(MODULE).encode())  # Go version, go.mod, go.sum
    for source in sorted(MODULE.glob("*.go")):
        digest.update(source.read_bytes())
    gowork = os.environ.get("GOWORK", "off")
    if gowork != "off" and Path(gowork).is_file():
        digest.update(Path(gowork).read_bytes())
    target = cache_root() / f"golib-{digest.hexdigest()[:12]}"
    binary = target / "golib"
    if rebuild and target.exists():
        shutil.rmtree(target)
    if binary.exists():
        return binary
    target.mkdir(parents=True, exist_ok=True)
    partial = target / "golib.partial"
    print(f"# building {MODULE.relative_to(ROOT)} (first build takes minutes) -> {binary}",
          file=sys.stderr, flush=True)
    proc = subprocess.run(["go", "build", "-trimpath", "-o", str(partial), "."], cwd=MODULE,
                          env=_go_env(), capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"go build in {MODULE} failed (exit {proc.returncode}):\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    partial.rename(binary)
    return binary


def karta_module() -> tuple[str, Path]:
    """Version and directory of the karta module the Go program was built with."""
    from dispatcher.devfleet.binaries import BuildError

    proc = subprocess.run(["go", "list", "-m", "-json", KARTA], cwd=MODULE, env=_go_env(),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BuildError(f"go list -m {KARTA} failed: {proc.stderr.strip()}")
    info = json.loads(proc.stdout)
    where = (info.get("Replace") or {}).get("Dir") or info.get("Dir")
    if not where:
        raise BuildError(f"{KARTA} {info.get('Version')} is not downloaded")
    return str(info.get("Version")), Path(where)


def upstream_definitions(karta: Path, into: Path) -> tuple[Any, list[str]]:
    """Copy the upstream examples this project's engine loads into ``into``; their catalog
    and, for the summary, what was left out and why."""
    from dispatcher.workloads.catalog import Catalog
    from dispatcher.workloads.errors import DefinitionError

    into.mkdir(parents=True, exist_ok=True)
    skipped = []
    for path in sorted((karta / "docs" / "examples").glob("*.yaml")):
        try:
            Catalog.load([path])
        except DefinitionError as error:
            skipped.append(f"{path.name}: {str(error).splitlines()[0][-160:]}")
            continue
        shutil.copyfile(path, into / path.name)
    return Catalog.load([into]), skipped


def _json_default(value: object) -> str:
    if isinstance(value, datetime.datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    raise TypeError(f"not JSON: {type(value).__name__}")


def go_check(binary: Path, defs: Path, objects_file: Path) -> list[dict[str, Any]]:
    """What the Go program makes of each object (``-check``)."""
    proc = subprocess.run([str(binary), "-definitions", str(defs), "-objects", str(objects_file),
                           "-check"], capture_output=True, text=True, check=True)
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


def go_round(binary: Path, defs: Path, objects_file: Path, *, mode: str,
             passes: int, errors: bool = False, cpu: bool = False) -> tuple[list[int], float]:
    """One run of the Go program on one core: per-call times (ns) and elapsed seconds (with
    ``cpu``, the timed loop's CPU seconds); ``errors``: objects whose resolve fails are
    timed too (else the program refuses them)."""
    env = {**os.environ, "GOMAXPROCS": "1"}
    proc = subprocess.run([str(binary), "-definitions", str(defs), "-objects", str(objects_file),
                           "-mode", mode, "-passes", str(passes),
                           *(["-errors"] if errors else [])],
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"golib -mode {mode} failed: {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    return [int(s) for s in out["samples_ns"]], out["cpu_ns" if cpu else "elapsed_ns"] / 1e9


def python_round(call: Callable[[Mapping[str, Any]], object], objects: list[Mapping[str, Any]],
                 *, passes: int) -> tuple[list[int], float]:
    """Warm-up, then ``passes`` timed passes over the objects, one call at a time."""
    for obj in objects:
        call(obj)
    clock = time.perf_counter_ns
    samples: list[int] = []
    started = clock()
    for _ in range(passes):
        for obj in objects:
            t0 = clock()
            call(obj)
            samples.append(clock() - t0)
    return samples, (clock() - started) / 1e9


def clear_memos() -> int:
    """Clear every memo of the engine's modules (each ``functools`` cache, and any other
    module-level object with a ``cache_clear``); how many there were."""
    cleared = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("dispatcher.workloads"):
            continue
        for value in list(vars(module).values()):
            clear = getattr(value, "cache_clear", None)
            if isinstance(value, functools._lru_cache_wrapper) or (
                    callable(clear) and not isinstance(value, type)):
                value.cache_clear()
                cleared += 1
    return cleared


def public_round(call: Callable[[Mapping[str, Any]], object], objects: list[Mapping[str, Any]],
                 *, passes: int, cleared: bool) -> float:
    """CPU seconds per call over ``passes`` passes: ``cleared``, each pass on its own fresh
    copies of the objects (all made before the first pass, so that copying neither runs
    nor leaves garbage in the timing), every memo cleared before it (untimed); else after
    a warm-up pass, on the same objects."""
    clock = time.process_time_ns
    spent = 0
    if cleared:
        batches = [copy.deepcopy(objects) for _ in range(passes)]
    else:
        batches = [objects] * passes
        for obj in objects:
            call(obj)
    gc.collect()
    for batch in batches:
        if cleared:
            clear_memos()
        started = clock()
        for obj in batch:
            call(obj)
        spent += clock() - started
    return spent / 1e9 / (passes * len(objects))


def public_call(catalog: Any) -> Callable[[Mapping[str, Any]], object]:
    """``resolve_with`` through ``catalog``'s definition of the object (a dict lookup, as
    ``resolve`` does it); an error is rendered as text, as Go's ``err.Error()``."""
    from dispatcher.workloads.errors import WorkloadError
    from dispatcher.workloads.resolve import resolve_with

    def call(obj: Mapping[str, Any]) -> object:
        definition = catalog.require(obj)
        try:
            return resolve_with(definition, obj)
        except WorkloadError as error:
            return str(error)

    return call


def case_objects() -> list[dict[str, Any]]:
    """The example objects of tests/unit/workloads/test_upstream.py, one per case: each
    upstream definition's kind with an empty spec and the status its operator writes."""
    from tests.unit.workloads.test_upstream import CASES

    return [{"apiVersion": api_version, "kind": kind, "metadata": {"name": "x"}, "spec": {},
             "status": status} for _, api_version, kind, _, status, _ in CASES]


def main_public(args: argparse.Namespace, binary: Path, version: str, karta: Path) -> int:
    """``--public``: per kind, go-compiled next to ``resolve_with`` warm and memo-cleared."""
    import resolve as resolve_bench

    from dispatcher.workloads.catalog import Catalog
    from dispatcher.workloads.errors import WorkloadError

    builtin = Catalog.builtin()
    where = resolve_bench.machine()
    sides = ("go-compiled", "python-warm", "python-cleared", "catalog-warm", "catalog-cleared")
    lines = []
    with tempfile.TemporaryDirectory(prefix="golib-public-") as tmp:
        defs = UPSTREAM  # karta's docs/examples (mpijob.yaml with its lost line breaks back)
        upstream = Catalog.load([defs])
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for obj in (case_objects() if args.objects == "cases"
                    else resolve_bench.sample_objects()):
            if upstream.find(str(obj.get("apiVersion")), str(obj["kind"])) is not None:
                by_kind.setdefault(str(obj["kind"]), []).append(obj)
        print(f"# golib --public: karta {version}; {len(upstream)} upstream definitions "
              f"({defs.relative_to(ROOT)}); {sum(map(len, by_kind.values()))} objects "
              f"({args.objects}) of {len(by_kind)} kinds; {args.rounds} rounds x "
              f"{args.passes} passes; {where}", file=sys.stderr)
        total: dict[str, float] = dict.fromkeys(sides, 0.0)
        upstream_total: dict[str, float] = dict.fromkeys(sides[:3], 0.0)
        count = upstream_count = 0
        for kind, given in sorted(by_kind.items()):
            text = json.dumps(given, default=_json_default)
            objects_file = Path(tmp) / f"{kind}.json"
            objects_file.write_text(text)
            objects: list[Mapping[str, Any]] = list(given) if args.yaml_objects \
                else json.loads(text)
            go_errors = sum(1 for c in go_check(binary, defs, objects_file) if c.get("error"))
            calls = {"python": public_call(upstream), "catalog": public_call(builtin)}
            ours = builtin.find(str(objects[0]["apiVersion"]), kind) is not None
            run = [side for side in sides if ours or not side.startswith("catalog")]
            errors = {}
            for name, catalog in (("python", upstream), ("catalog", builtin))[:1 + ours]:
                failed = 0
                for item in objects:
                    try:
                        catalog.resolve(item)
                    except WorkloadError:
                        failed += 1
                errors[name] = failed
            spent: dict[str, list[float]] = {side: [] for side in run}
            for _ in range(args.rounds):
                for side in run:
                    if side == "go-compiled":
                        samples, elapsed = go_round(binary, defs, objects_file, mode="compiled",
                                                    passes=args.passes, errors=True, cpu=True)
                        spent[side].append(elapsed / len(samples))
                    else:
                        engine, how = side.split("-")
                        spent[side].append(public_round(calls[engine], objects,
                                                        passes=args.passes,
                                                        cleared=how == "cleared"))
            best = {side: min(v) for side, v in spent.items()}  # noise only adds time
            for side in upstream_total:
                upstream_total[side] += best[side] * len(objects)
            upstream_count += len(objects)
            if ours:
                for side in sides:
                    total[side] += best[side] * len(objects)
                count += len(objects)
            lines.append(_public_line(kind, len(objects), best,
                                      errors={"go": go_errors, **errors}))
        # the kinds both catalogs define (the totals of python-* alone are in "upstream")
        lines.append(_public_line("all", count, {s: t / count for s, t in total.items()},
                                  errors={}))
        lines.append(_public_line("upstream", upstream_count,
                                  {s: t / upstream_count for s, t in upstream_total.items()},
                                  errors={}))
    for line in lines:
        print(json.dumps({"bench": "golib-public", **line, "rounds": args.rounds,
                          "passes": args.passes, "objects_from": "yaml" if args.yaml_objects
                          else "json", "karta": version,
                          "load_avg_1m": round(os.getloadavg()[0], 2), "machine": where}),
              flush=True)
    return 0


def _public_line(kind: str, objects: int, best: Mapping[str, float], *,
                 errors: Mapping[str, int]) -> dict[str, Any]:
    go = best["go-compiled"]
    out: dict[str, Any] = {"kind": kind, "objects": objects}
    if errors:
        out["errors"] = dict(errors)
    out |= {f"{side}_us": round(t * 1e6, 1) for side, t in best.items()}
    out |= {f"ratio_{side.replace('-', '_')}": round(go / t, 2)
            for side, t in best.items() if side != "go-compiled"}
    return out


def figures(samples: list[int], elapsed: float) -> dict[str, Any]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {"objects_per_s": round(len(ordered) / elapsed),
            "median_us": round(statistics.median(ordered) / 1000, 1),
            "p99_us": round(p99 / 1000, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--passes", type=int, default=20, help="passes over the objects a round")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the Go program")
    parser.add_argument("--public", action="store_true",
                        help="per kind, every sample (errors too) through resolve_with, "
                             "memos warm and cleared")
    parser.add_argument("--objects", choices=("cases", "samples"), default="cases",
                        help="--public: test_upstream.py's example objects, or the catalog "
                             "samples of the upstream kinds")
    parser.add_argument("--yaml-objects", action="store_true",
                        help="--public: Python gets the YAML-parsed objects, not JSON ones")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import resolve as resolve_bench  # benchmarks/resolve.py: samples and machine()

    from dispatcher.devfleet.binaries import BuildError
    from dispatcher.workloads.catalog import Catalog
    from dispatcher.workloads.errors import WorkloadError

    try:
        binary = build(rebuild=args.rebuild)
        version, karta = karta_module()
    except BuildError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    if args.public:
        return main_public(args, binary, version, karta)
    builtin = Catalog.builtin()
    where = resolve_bench.machine()
    with tempfile.TemporaryDirectory(prefix="golib-bench-") as tmp:
        defs = Path(tmp) / "definitions"
        upstream, skipped = upstream_definitions(karta, defs)
        candidates = resolve_bench.load_objects(upstream)  # what the upstream definitions resolve

        def builtin_ok(obj: Mapping[str, Any]) -> bool:
            try:
                builtin.resolve(obj)
            except WorkloadError:
                return False
            return True

        candidates = [obj for obj in candidates if builtin_ok(obj)]
        objects_file = Path(tmp) / "objects.json"
        objects_file.write_text(json.dumps(candidates, default=_json_default))
        checked = go_check(binary, defs, objects_file)
        go_failed = [c for c in checked if c.get("error")]
        objects = [obj for obj, c in zip(candidates, checked, strict=True) if not c.get("error")]
        objects_file.write_text(json.dumps(objects, default=_json_default))
        kinds = sorted({str(obj["kind"]) for obj in objects})
        print(f"# golib: karta {version} ({karta}); {len(upstream)} upstream definitions; "
              f"{len(objects)} objects ({', '.join(kinds)}); {args.rounds} rounds x "
              f"{args.passes} passes; {where}", file=sys.stderr)
        for line in skipped:
            print(f"#   upstream example left out: {line}", file=sys.stderr)
        for c in go_failed:
            print(f"#   left out, the Go library fails on {c['kind']} {c['name']}: "
                  f"{c['error'][:200]}", file=sys.stderr)
        samples: dict[str, list[int]] = {side: [] for side in SIDES}
        elapsed = dict.fromkeys(SIDES, 0.0)
        for _ in range(args.rounds):
            for side in SIDES:
                if side.startswith("go-"):
                    got = go_round(binary, defs, objects_file, mode=side[3:],
                                   passes=args.passes)
                else:
                    catalog = upstream if side == "python-upstream" else builtin
                    got = python_round(catalog.resolve, objects, passes=args.passes)
                samples[side] += got[0]
                elapsed[side] += got[1]
    results = {side: figures(samples[side], elapsed[side]) for side in SIDES}
    for side in SIDES:
        print(json.dumps({"bench": "golib", "side": side, "objects": len(objects),
                          **results[side], "rounds": args.rounds, "passes": args.passes,
                          "karta": version, "load_avg_1m": round(os.getloadavg()[0], 2),
                          "machine": where}), flush=True)
    base = results["python-upstream"]["median_us"]
    for side in SIDES:
        r = results[side]
        print(f"#   {side:16} median {r['median_us']:8.1f} us  p99 {r['p99_us']:8.1f} us  "
              f"{r['objects_per_s']:7d} objects/s  ({base / r['median_us']:.2f}x "
              f"python-upstream's speed)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
