"""Processes a killed test run left behind, found and stopped at the next run's start.

Control planes are started in their own session (``dispatcher dev up`` leaves them running
on purpose), so when a pytest run is killed with SIGKILL its fixtures cannot stop them:
etcd, apiservers, schedulers, operators and controller processes keep running with
init as their parent and load the machine for every later run. ``orphans`` finds them by
three facts together: the parent is init, the program is one of ours (a binary from the
build cache, or ``python -m dispatcher``), and an argument names a directory of the
killed run (``marker``, e.g. pytest's temporary root), so a fleet started by ``dispatcher
dev up`` (its state under the user's state directory) is never touched.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["orphans", "reap"]


def orphans(*, marker: str, programs: Path, proc: Path = Path("/proc")) -> list[int]:
    """Pids of orphaned processes of ours whose arguments mention ``marker``."""
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == 1 and _ours(argv, programs) and any(marker in a for a in argv):
            found.append(int(entry.name))
    return sorted(found)


def _ours(argv: list[str], programs: Path) -> bool:
    program = argv[0] if argv else ""
    if program.startswith(f"{programs}{os.sep}"):
        return True
    return "-m" in argv and "dispatcher" in argv[argv.index("-m") + 1:argv.index("-m") + 2]


def reap(pids: list[int]) -> None:
    """SIGKILL each process (its whole group when it leads one)."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
