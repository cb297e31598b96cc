"""Per-process CPU and memory from /proc, and apiserver request counters from /metrics.

Shared by the benchmarks that run the controller against a dev fleet (``dispatch``,
``scale``), so they measure processes and writes the same way:

- ``cpu_seconds``/``rss_mb`` read ``/proc/<pid>/stat`` and ``/proc/<pid>/status`` of a
  process *and its live descendants* (the controller may start bounded jq workers), Linux
  only;
- ``Processes`` names the fleet's processes (etcd, every kube-apiserver, the controller) and
  samples them all at once, so a case reports CPU per process over its own window;
- ``request_counts`` scrapes a kube-apiserver's ``apiserver_request_total`` with the
  cluster's admin token: requests by (verb, resource, code) since the apiserver started, so
  the difference over a window is what every client asked of that cluster (the apiserver's
  own lease renewals included: a few PUTs per 10 s, reported by resource so they can be
  told apart); ``writes`` sums it by verb and resource, ``conflicts`` keeps the 409s (a
  write sent with a resourceVersion the object had moved past: the writer reads again and
  retries).
"""

from __future__ import annotations

import os
import ssl
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from dispatcher.devfleet.controlplane import ClusterInfo, FleetState

__all__ = ["WRITE_VERBS", "Counts", "Processes", "conflicts", "cpu_seconds", "request_counts",
           "rss_mb", "writes"]

_TICKS = os.sysconf("SC_CLK_TCK")
WRITE_VERBS = frozenset({"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"})
Counts = Counter[tuple[str, str, str]]
"""Requests by (verb, resource[/subresource], HTTP code)."""


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry.name))
    return out


def _tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    children = _children()
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, ()))
    return out


def _own_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # utime, stime are fields 14 and 15 of stat (11, 12 after the command name)
    return (int(fields[11]) + int(fields[12])) / _TICKS


def _own_rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its live descendants."""
    return sum(_own_cpu(p) for p in _tree(pid))


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its live descendants, MiB."""
    return sum(_own_rss_kb(p) for p in _tree(pid)) / 1024


@dataclass
class Processes:
    """Named pids sampled together; ``cpu_delta`` gives CPU seconds per name over a window."""

    pids: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of_fleet(cls, state: FleetState, **extra: int) -> Processes:
        """etcd, ``apiserver-<cluster>`` for every cluster of ``state``, plus ``extra``."""
        pids = {"etcd": state.etcd.pid}
        pids.update({f"apiserver-{c.name}": c.process.pid for c in state.clusters})
        pids.update(extra)
        return cls(pids)

    def cpu(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def cpu_parts(self, name: str) -> tuple[float, dict[int, float]]:
        """``name``'s own CPU seconds, and each live descendant's (its jq workers) by pid:
        a window can then tell the main process from workers, and a worker started inside
        it (its interpreter start-up charged to the window) from one already running."""
        pid = self.pids[name]
        return _own_cpu(pid), {p: _own_cpu(p) for p in _tree(pid) if p != pid}

    def rss(self) -> dict[str, float]:
        return {name: round(rss_mb(pid), 1) for name, pid in self.pids.items()}

    @staticmethod
    def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
        return {name: round(after[name] - before[name], 2) for name in before}


def request_counts(cluster: ClusterInfo) -> Counts:
    """``apiserver_request_total`` of ``cluster`` summed by (verb, resource[/subresource],
    code), dry-run requests apart (`` (dry run)`` appended: admission checks, nothing
    stored)."""
    context = ssl.create_default_context(cafile=cluster.ca_file)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    request = urllib.request.Request(f"{cluster.server}/metrics",
                                     headers={"Authorization": f"Bearer {cluster.token}"})
    with opener.open(request, timeout=10) as resp:
        text = resp.read().decode()
    counts: Counts = Counter()
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            if not sample.name.endswith("_total"):
                continue
            labels = sample.labels
            resource = labels.get("resource", "")
            if labels.get("subresource"):
                resource += "/" + labels["subresource"]
            if labels.get("dry_run"):
                resource += " (dry run)"
            counts[(labels.get("verb", ""), resource, labels.get("code", ""))] += \
                int(sample.value)
    return counts


def _by_request(before: Counts, after: Counts, codes: frozenset[str] | None
                ) -> dict[str, int]:
    found: Counter[str] = Counter()
    for (verb, resource, code), n in (after - before).items():
        if verb in WRITE_VERBS and n > 0 and (codes is None or code in codes):
            found[f"{verb} {resource}"] += n
    return dict(sorted(found.items(), key=lambda item: (-item[1], item[0])))


def writes(before: Counts, after: Counts) -> dict[str, int]:
    """Write requests over a window, by ``VERB resource`` (largest first), whatever their
    answer."""
    return _by_request(before, after, None)


def conflicts(before: Counts, after: Counts) -> dict[str, int]:
    """Writes over a window answered 409 Conflict, by ``VERB resource``."""
    return _by_request(before, after, frozenset({"409"}))
