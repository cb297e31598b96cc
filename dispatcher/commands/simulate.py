"""``dispatcher simulate``: the dispatcher on a simulated fleet, in virtual time.

Thin shell over ``dispatcher.sim``: reads the scenario (or a trace), shows a progress bar on
a terminal, prints the per-policy tables or JSON, and writes ``--report DIR``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from dispatcher.output import Format
    from dispatcher.sim.runner import PolicyProgress, Simulation

__all__ = ["register", "run"]

DESCRIPTION = """\
Run the dispatcher's real cores (workload resolve, capacity model, gang placement, queue)
on a simulated fleet in virtual time: no cluster needed, no waiting. Each policy replays
the same workload stream; the tables compare them.

With no SCENARIO, a built-in scenario runs: three members (H100, A100, L40S nodes), a few
inference services, and three days of training jobs, sweeps and experiments.

Scenario file (YAML; errors name the file and the key):

  apiVersion: dispatcher.io/v1alpha1
  kind: Scenario
  seed: 7                         # same seed, same result
  duration: 24h                   # virtual time; services run until then
  policies: [most-free, best-fit]
  fleet: clusters/local.yaml      # a fleet file (relative to the scenario) or inline
  queue: {backfillLimit: 50}
  workloads:                      # explicit arrivals ...
  - {at: 0s, runTime: 2h, priority: 10, file: jobs/train.yaml}   # or manifest: {...}
  - {at: 5m, file: jobs/serve.yaml}                              # no runTime: a service
  generator:                      # ... and/or generated ones (Poisson arrivals)
    rate: 12/h                    # also: count: N, until: 20h
    mix:
    - {name: train, weight: 1, file: jobs/train.yaml,
       runTime: {lognormal: {median: 4h, sigma: 0.6}}}
    - {name: exp, weight: 5, file: jobs/exp.yaml, runTime: {exponential: 30m}}

Run times: 2h | {exponential: MEAN} | {lognormal: {median, sigma}} | {uniform: [LOW, HIGH]}.
Manifests may carry the dispatcher.io/cluster, dispatcher.io/cluster-selector and
dispatcher.io/policy annotations; they are honoured as in the controller.
See `python -c 'import dispatcher.sim.scenario as s; help(s)'` for every key.

Output: per policy, workloads dispatched and completed, queue wait p50/p95/p99, GPU
utilization (fleet and per member), stranded GPUs (free GPUs no waiting workload can use)
and workloads no member can ever run, with the reason.
"""

EPILOG = """\
examples:
  # the built-in scenario (the quickstart)
  dispatcher simulate

  # your own scenario, as JSON for scripts
  dispatcher simulate my-scenario.yaml -o json

  # compare policies on another seed and write charts and figures
  dispatcher simulate my-scenario.yaml --policy best-fit --policy most-free \\
      --seed 11 --report out/

  # replay a controller log (workload.resolved lines) against a fleet file
  dispatcher simulate --trace hub.log --fleet clusters/local.yaml --trace-run-time 1h

  # a self-contained copy of the built-in scenario to edit
  dispatcher simulate --print-default > my-scenario.yaml
"""


def register(subparsers: Any) -> None:
    """Add the ``simulate`` parser."""
    parser = subparsers.add_parser(
        "simulate", help="run the dispatcher on a simulated fleet in virtual time",
        description=DESCRIPTION, epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("scenario", nargs="?", metavar="SCENARIO",
                        help="scenario file (default: the built-in scenario)")
    parser.add_argument("--trace", metavar="FILE",
                        help="replay workload.resolved JSON lines (needs --fleet or SCENARIO "
                             "for the fleet)")
    parser.add_argument("--fleet", metavar="FILE",
                        help="fleet file to use instead of the scenario's")
    parser.add_argument("--policy", action="append", metavar="NAME",
                        help="policy to run (repeatable; default: the scenario's)")
    parser.add_argument("--seed", type=int, help="override the scenario's seed")
    parser.add_argument("--duration", metavar="D",
                        help="override the virtual duration (e.g. 12h); a --trace replay "
                             "without one runs until every workload has finished")
    parser.add_argument("--trace-run-time", metavar="D",
                        help="run time of replayed workloads with no recorded end "
                             "(default: until the end)")
    parser.add_argument("-o", "--output", choices=("table", "wide", "json", "yaml"),
                        default="table", help="output format (default: table)")
    parser.add_argument("--report", metavar="DIR", type=Path,
                        help="write summary.json, decisions.json and PNG charts into DIR")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (it is off anyway when stderr is not a TTY)")
    parser.add_argument("--print-default", action="store_true",
                        help="print the built-in scenario with its manifests inlined, "
                             "then exit")
    parser.set_defaults(run=run)


def _print_default() -> int:
    import yaml

    from dispatcher.sim.scenario import DEFAULT_SCENARIO

    data = yaml.safe_load(DEFAULT_SCENARIO.read_text())
    entries = list(data.get("workloads", [])) + list(data.get("generator", {}).get("mix", []))
    for entry in entries:
        if "file" in entry:
            path = DEFAULT_SCENARIO.parent / entry.pop("file")
            entry["manifest"] = yaml.safe_load(path.read_text())
    sys.stdout.write("# dispatcher simulate: the built-in scenario, manifests inlined\n")
    yaml.safe_dump(data, sys.stdout, sort_keys=False, width=100)
    return 0


def _progress_bar(enabled: bool) -> Any:
    from contextlib import nullcontext

    if not enabled or not sys.stderr.isatty():
        return nullcontext(None)
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("[bold]{task.description:<12}"), BarColumn(),
                    TextColumn("{task.fields[virtual]:>9} virtual"), TimeElapsedColumn(),
                    console=Console(file=sys.stderr), transient=True)


@dataclass(frozen=True)
class _Plan:
    """What ``run`` replays: ``go`` runs every policy (reporting progress), ``total`` is
    the virtual time the progress bar fills to."""

    total: float
    go: Callable[[PolicyProgress], Simulation]


def run(args: argparse.Namespace) -> int:
    """Run the simulation; exit 2 on a bad scenario or trace, 0 otherwise."""
    if args.print_default:
        return _print_default()
    from dispatcher.fleet.fleetfile import FleetFileError
    from dispatcher.sim.quantities import parse_duration
    from dispatcher.sim.scenario import ScenarioError
    from dispatcher.workloads.trace import TraceError

    try:
        duration = None if args.duration is None else parse_duration(args.duration)
        policies = _policies(args.policy)
        plan = (_trace_plan(args, duration=duration, policies=policies) if args.trace
                else _scenario_plan(args, duration=duration, policies=policies))
    except (ScenarioError, FleetFileError, TraceError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        simulation = _with_progress(plan, shown=not args.no_progress)
    except ScenarioError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    _emit(simulation, output=args.output, report=args.report)
    return 0


def _policies(names: Sequence[str] | None) -> tuple[str, ...] | None:
    """``--policy`` values, each checked against the policies placement knows."""
    if not names:
        return None
    from dispatcher.sim.cores import policies
    from dispatcher.sim.scenario import ScenarioError

    known = policies()
    for policy in names:
        if policy not in known:
            raise ScenarioError(f"--policy: unknown policy {policy!r} "
                                f"(known: {', '.join(known)})")
    return tuple(names)


def _trace_plan(args: argparse.Namespace, *, duration: float | None,
                policies: tuple[str, ...] | None) -> _Plan:
    """A replay of ``--trace`` over ``--fleet`` (or the SCENARIO's fleet and settings)."""
    from dispatcher.fleet.fleetfile import load_fleet
    from dispatcher.sim.quantities import parse_duration
    from dispatcher.sim.runner import run_policies
    from dispatcher.sim.scenario import ScenarioError, load_scenario

    trace_run = None if args.trace_run_time is None else parse_duration(args.trace_run_time)
    scenario = load_scenario(args.scenario) if args.scenario else None
    if args.fleet:
        fleet = load_fleet(args.fleet)
    elif scenario is not None:
        fleet = scenario.fleet
    else:
        raise ScenarioError("--trace: give the fleet with --fleet FILE or a SCENARIO")
    workloads = _trace_stream(args.trace, trace_run)
    # Without --duration (or a SCENARIO's), a replay runs until it drains.
    span = duration or (scenario.duration if scenario else None)
    guess = max((w.arrival + (w.run_time or 0.0) for w in workloads), default=0.0)
    interval = (span or max(guess, 1.0)) / 200
    chosen = policies or (scenario.policies if scenario else ("most-free", "best-fit"))

    def go(progress: PolicyProgress) -> Simulation:
        return run_policies(
            name=Path(args.trace).name, source=str(args.trace), seed=None, fleet=fleet,
            workloads=workloads, policies=chosen, duration=span,
            queue=scenario.queue if scenario else None, sample_interval=interval,
            progress=progress)
    return _Plan(total=span or guess, go=go)


def _scenario_plan(args: argparse.Namespace, *, duration: float | None,
                   policies: tuple[str, ...] | None) -> _Plan:
    """The SCENARIO (default: the built-in one), with --fleet, --seed, --duration."""
    from dataclasses import replace

    from dispatcher.fleet.fleetfile import load_fleet
    from dispatcher.sim.runner import run_scenario
    from dispatcher.sim.scenario import load_scenario

    scenario = load_scenario(args.scenario)
    if args.fleet:
        scenario = replace(scenario, fleet=load_fleet(args.fleet))
    if args.seed is not None:
        scenario = replace(scenario, seed=args.seed)
    if duration is not None:
        scenario = replace(scenario, duration=duration, sample_interval=duration / 200)
    return _Plan(total=scenario.duration,
                 go=lambda progress: run_scenario(scenario, policies=policies,
                                                  progress=progress))


def _with_progress(plan: _Plan, *, shown: bool) -> Simulation:
    """Run ``plan``, with a progress bar per policy when ``shown`` (and on a terminal)."""
    from dispatcher.sim.quantities import format_duration

    with _progress_bar(shown) as bar:
        tasks: dict[str, Any] = {}

        def progress(policy: str, t: float) -> None:
            if bar is None:
                return
            if policy not in tasks:
                tasks[policy] = bar.add_task(policy, total=plan.total, virtual="0s")
            bar.update(tasks[policy], completed=t, virtual=format_duration(t))

        return plan.go(progress)


def _emit(simulation: Simulation, *, output: str, report: Path | None) -> None:
    """The summary as ``output`` on stdout, and ``--report DIR`` written."""
    summary = simulation.summary()
    if report is not None:
        _write_report(simulation, summary, report)
    if output in ("json", "yaml"):
        from dispatcher.output import emit

        emit(summary, fmt=cast("Format", output))
    else:
        _print_tables(summary, wide=output == "wide")
        if report is not None:
            print(f"\nreport written to {report}/ "
                  "(summary.json, decisions.json, utilization.png, wait-cdf.png, "
                  "stranded-gpus.png)")


def _trace_stream(path: str, run_time: float | None) -> list[Any]:
    from dispatcher.sim.stream import stream_from_trace
    from dispatcher.workloads.trace import TraceError, read_trace

    try:
        with open(path, encoding="utf-8") as handle:
            trace = read_trace(handle, source=path)
    except OSError as exc:
        raise TraceError(f"{path}: cannot read: {exc.strerror}") from None
    if not trace:
        raise TraceError(f"{path}: no workload.resolved lines")
    return stream_from_trace(trace, default_run_time=run_time)


def _write_report(simulation: Simulation, summary: dict[str, Any], directory: Path) -> None:
    from dispatcher.sim.charts import write_charts

    directory.mkdir(parents=True, exist_ok=True)
    (directory / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    decisions = {
        result.policy: [{"uid": d.uid, "name": d.name, "member": d.member,
                         "startSeconds": round(d.start, 3), "waitSeconds": round(d.wait, 3),
                         "nodes": [{"node": n, "gpus": g} for n, g in d.nodes]}
                        for d in result.decisions]
        for result in simulation.results}
    (directory / "decisions.json").write_text(json.dumps(decisions) + "\n")
    timeline = {result.policy: [{"t": s.t, "utilization": dict(s.utilization),
                                 "strandedGpus": s.stranded, "freeGpus": s.free,
                                 "pending": s.pending} for s in result.samples]
                for result in simulation.results}
    (directory / "timeline.json").write_text(json.dumps(timeline) + "\n")
    write_charts(simulation.results, directory, title=f"scenario {simulation.name}")


def _minutes(seconds: float | None) -> str:
    from dispatcher.sim.quantities import format_duration

    return "-" if seconds is None else format_duration(seconds)


def _print_tables(summary: dict[str, Any], *, wide: bool) -> None:
    from dispatcher.output import table
    from dispatcher.sim.quantities import format_duration

    fleet = summary["fleet"]
    print(f"scenario {summary['scenario']}: {fleet['members']} members, {fleet['nodes']} "
          f"nodes, {fleet['gpus']} GPUs; {summary['workloads']} workloads "
          f"({summary['services']} services) over "
          f"{format_duration(summary['durationSeconds'])}"
          + (f", seed {summary['seed']}" if summary["seed"] is not None else "")
          + f"; simulated in {summary['wallSeconds']:.1f} s\n")
    rows = []
    for p in summary["policies"]:
        frag = p["fragmentation"]
        share = frag["strandedShareOfFree"]
        rows.append([
            p["policy"], p["submitted"], p["dispatched"], p["completed"], p["pendingAtEnd"],
            p["neverPlaceable"], _minutes(p["waitSeconds"]["p50"]),
            _minutes(p["waitSeconds"]["p95"]), _minutes(p["waitSeconds"]["p99"]),
            f"{100 * p['gpuUtilization']:.1f}%",
            "-" if frag["strandedGpusMean"] is None else
            f"{frag['strandedGpusMean']:.0f} ({100 * (share or 0):.0f}% of free)",
            *([p["gated"], p["placementCalls"]] if wide else [])])
    table(columns=["policy", "submitted", "dispatched", "completed", "pending",
                   "never-placeable", "wait-p50", "wait-p95", "wait-p99", "gpu-util",
                   "stranded-gpus", *(["gated", "placement-calls"] if wide else [])],
          rows=rows)
    for p in summary["policies"]:
        print(f"\npolicy {p['policy']}: GPU utilization {100 * p['gpuUtilization']:.1f}% "
              "of the fleet")
        table(columns=["member", "gpus", "gpu-util", "dispatched"],
              rows=[[name, m["gpus"], f"{100 * m['utilization']:.1f}%", m["dispatched"]]
                    for name, m in p["members"].items()])
        if wide:
            print()
            table(columns=["workload", "kind", "gpus", "dispatched", "wait-p50", "wait-p95"],
                  rows=[[w["template"], w["kind"], w["gpus"], w["dispatched"],
                         _minutes(w["waitP50"]), _minutes(w["waitP95"])]
                        for w in p["workloads"]])
    first = summary["policies"][0] if summary["policies"] else None
    if first and first["unplaceable"]:
        print("\nnever placeable (no member of the bare fleet can run them):")
        rows = []
        for u in first["unplaceable"]:
            reasons = list(u["reasons"].items()) or [("-", u["reason"])]
            for i, (member, reason) in enumerate(reasons):
                lead = [u["template"], u["kind"], u["gpus"], u["count"]] if i == 0 else [""] * 4
                rows.append([*lead, member, reason])
        table(columns=["workload", "kind", "gpus", "count", "member", "reason"], rows=rows)
