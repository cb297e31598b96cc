"""Report charts for ``dispatcher simulate --report DIR``, drawn with matplotlib (Agg backend).

Three PNGs, sized and labelled to be pasted into a report as they are: GPU utilization over
time per member (one panel per policy), the queue-wait CDF per policy, and stranded GPUs over
time per policy. Only plain ``RunResult`` data comes in; nothing here knows the engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from dispatcher.sim.results import RunResult, percentile

__all__ = ["stranded_chart", "utilization_chart", "wait_cdf_chart", "write_charts"]

# Figures are built with the object API (no pyplot): no global state, no GUI backend,
# PNGs rendered by Agg.
_STYLE: dict[str, Any] = {"axes.spines.top": False, "axes.spines.right": False,
                          "axes.grid": True, "grid.alpha": 0.3, "font.size": 10,
                          "axes.titleweight": "bold", "savefig.dpi": 120}


def _hours_axis(duration: float) -> tuple[float, str]:
    """Scale and unit for a time axis: hours up to 3 days, else days."""
    return (86400.0, "days") if duration > 3 * 86400 else (3600.0, "hours")


def utilization_chart(results: Sequence[RunResult], path: Path, *, title: str) -> Path:
    """GPU utilization (%) over virtual time, one line per member, one panel per policy."""
    fig = Figure(figsize=(10, 3.2 * len(results) + 0.6))
    axes = fig.subplots(len(results), 1, sharex=True, squeeze=False)
    scale, unit = _hours_axis(results[0].duration)
    for ax, result in zip(axes[:, 0], results, strict=True):
        times = [s.t / scale for s in result.samples]
        for member in result.member_gpus:
            values = [100.0 * s.utilization.get(member, 0.0) for s in result.samples]
            ax.plot(times, values, linewidth=1.0, alpha=0.85,
                    label=f"{member} ({result.member_gpus[member]} GPUs)")
        fleet = [100.0 * sum(s.utilization[m] * result.member_gpus[m] for m in s.utilization)
                 / max(1, sum(result.member_gpus.values())) for s in result.samples]
        ax.plot(times, fleet, color="black", linewidth=2.0, linestyle="--",
                label=f"fleet (mean {100 * result.utilization:.0f}%)")
        ax.set_title(f"policy {result.policy}: fleet mean {100 * result.utilization:.1f}%",
                     fontsize=10)
        ax.set_ylabel("GPUs in use (%)")
        ax.set_ylim(0, 105)
        ax.set_xlim(0, result.duration / scale)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    labels = [label.split(" (mean")[0] for label in labels]
    fig.legend(handles, labels, loc="upper center", ncols=len(labels), frameon=False,
               bbox_to_anchor=(0.5, 0.965), fontsize=9)
    axes[-1, 0].set_xlabel(f"virtual time ({unit})")
    fig.suptitle(f"GPU utilization per member — {title}", fontweight="bold")
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path)
    return path


def wait_cdf_chart(results: Sequence[RunResult], path: Path, *, title: str) -> Path:
    """Share of dispatched workloads that waited at most x minutes, one line per policy."""
    fig = Figure(figsize=(8, 4.8))
    ax = fig.subplots()
    longest = 1.0
    lowest = 100.0
    for result in results:
        waits = sorted(w / 60.0 for w in result.waits)
        if not waits:
            continue
        longest = max(longest, waits[-1])
        shares = [100.0 * (i + 1) / len(waits) for i in range(len(waits))]
        xs = [max(w, 0.1) for w in waits]
        p95 = (percentile(result.waits, 95) or 0.0) / 60.0  # same figure as the table
        at_once = 100.0 * sum(1 for w in waits if w <= 0) / len(waits)
        lowest = min(lowest, at_once)
        ax.step(xs, shares, where="post", linewidth=1.8,
                label=f"{result.policy}: n={len(waits)}, {at_once:.0f}% at once, "
                      f"p95 {p95:.0f} min")
    ax.set_xscale("log")
    ax.set_xlim(0.1, max(longest * 1.5, 10.0))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
    # Most workloads often start at once: start the y axis just below that share so the
    # part that differs between policies fills the chart.
    floor = 10.0 * math.floor(min(lowest, 100.0) / 10.0) if lowest > 50 else 0.0
    ax.set_ylim(floor, 100.5)
    ax.set_xlabel("queue wait (minutes, log scale; no wait drawn at the left edge)")
    ax.set_ylabel("dispatched workloads started within x (%)"
                  + (f"\n(axis starts at {floor:.0f}%)" if floor else ""))
    ax.set_title(f"Queue wait CDF per policy — {title}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path)
    return path


def stranded_chart(results: Sequence[RunResult], path: Path, *, title: str) -> Path:
    """Free GPUs no waiting workload can use, over time, one line per policy."""
    fig = Figure(figsize=(10, 4))
    ax = fig.subplots()
    scale, unit = _hours_axis(results[0].duration)
    for result in results:
        times = [s.t / scale for s in result.samples]
        values = [float(s.stranded) if s.stranded is not None else float("nan")
                  for s in result.samples]
        mean, _ = result.fragmentation()
        label = result.policy + (f" (mean {mean:.0f})" if mean is not None else "")
        ax.plot(times, values, linewidth=1.4, label=label)
    ax.set_xlim(0, results[0].duration / scale)
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"virtual time ({unit})")
    ax.set_ylabel("stranded GPUs\n(gaps: nothing waiting)")
    ax.set_title(f"Free GPUs no waiting workload can use — {title}")
    ax.legend(loc="upper right")
    fig.tight_layout()
    fig.savefig(path)
    return path


def write_charts(results: Sequence[RunResult], directory: Path, *, title: str) -> list[Path]:
    """All charts into ``directory`` (created); returns the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(_STYLE):  # type: ignore[arg-type]
        return [utilization_chart(results, directory / "utilization.png", title=title),
                wait_cdf_chart(results, directory / "wait-cdf.png", title=title),
                stranded_chart(results, directory / "stranded-gpus.png", title=title)]
