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

The karta module has to be reachable through the Go module proxy, or through a Go workspace
(``GOWORK=/path/go.work`` with a ``use`` of benchmarks/golib and a ``replace`` of
github.com/run-ai/karta by a local checkout): see benchmarks/golib/README.md.
"""

from __future__ import annotations

import argparse
import datetime
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
             passes: int) -> tuple[list[int], float]:
    """One run of the Go program on one core: per-call times (ns) and elapsed seconds."""
    env = {**os.environ, "GOMAXPROCS": "1"}
    proc = subprocess.run([str(binary), "-definitions", str(defs), "-objects", str(objects_file),
                           "-mode", mode, "-passes", str(passes)],
                          env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"golib -mode {mode} failed: {proc.stderr.strip()}")
    out = json.loads(proc.stdout)
    return [int(s) for s in out["samples_ns"]], out["elapsed_ns"] / 1e9


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
