"""Controller replicas as real processes (``python -m dispatcher run``), supervised.

A ``Supervisor`` keeps ``desired`` replicas running, like a Deployment would: a replica
that exits (kill -9, lost leadership, crash) is replaced after a short back-off. Every
process instance logs to its own file; ``Instance`` reads it back as JSON lines, so rounds
can check who acted when (leader election) and scan for secrets. Exit codes the harness
did not cause and the controller does not document (0 stop, 1 leadership lost) are
recorded as crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["Instance", "Supervisor"]

REPO = Path(__file__).resolve().parents[2]
RESTART_BACKOFF_S = 0.5
DOCUMENTED_EXITS = (0, 1)


@dataclass
class Instance:
    """One controller process from start to exit."""

    number: int
    log: Path
    proc: subprocess.Popen[bytes]
    started: float = field(default_factory=time.time)
    ended: float | None = None
    killed: bool = False
    """Ended by the harness (SIGKILL or SIGTERM), so its exit code is expected."""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines written so far (a torn last line after kill -9 is skipped)."""
        out: list[dict[str, Any]] = []
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return out
        for line in text.splitlines():
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


class Supervisor:
    """Keeps ``desired`` controller replicas running with one config file."""

    def __init__(self, *, config: Path, logs: Path) -> None:
        self.config = config
        self.logs = logs
        self.desired = 1
        self.instances: list[Instance] = []
        self.crashes: list[str] = []
        self._task: asyncio.Task[None] | None = None

    def _spawn(self) -> Instance:
        number = len(self.instances) + 1
        log = self.logs / f"controller-{number:03d}.log"
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        with log.open("ab") as sink:
            proc = subprocess.Popen(
                [sys.executable, "-m", "dispatcher", "run", "--config", str(self.config)],
                stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO,
                env=env, start_new_session=True)
        inst = Instance(number=number, log=log, proc=proc)
        self.instances.append(inst)
        return inst

    def running(self) -> list[Instance]:
        return [i for i in self.instances if i.alive()]

    async def start(self) -> None:
        for _ in range(self.desired):
            self._spawn()
        self._task = asyncio.create_task(self._supervise())

    async def _supervise(self) -> None:
        while True:
            for inst in self.instances:
                if inst.ended is None and not inst.alive():
                    inst.ended = time.time()
                    code = inst.proc.returncode
                    if not inst.killed and code not in DOCUMENTED_EXITS:
                        tail = "\n".join(inst.text().splitlines()[-12:])
                        self.crashes.append(f"controller #{inst.number} exited {code}:\n{tail}")
            missing = self.desired - len(self.running())
            if missing > 0:
                await asyncio.sleep(RESTART_BACKOFF_S)
                for _ in range(self.desired - len(self.running())):
                    self._spawn()
            await asyncio.sleep(0.1)

    def kill(self, inst: Instance, sig: int = signal.SIGKILL) -> None:
        """Signal one replica (the harness's doing: its exit code is not a crash)."""
        inst.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(inst.pid, sig)

    def by_pid(self, pid: int) -> Instance | None:
        return next((i for i in self.instances if i.pid == pid and i.alive()), None)

    async def stop(self) -> None:
        """SIGTERM every replica (SIGKILL after 10 s) and stop supervising."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for inst in self.running():
            self.kill(inst, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self.running() and time.monotonic() < deadline:  # noqa: ASYNC110 - polling
            await asyncio.sleep(0.1)
        for inst in self.running():
            self.kill(inst)
        for inst in self.instances:
            with contextlib.suppress(subprocess.TimeoutExpired):
                inst.proc.wait(timeout=5)
            if inst.ended is None:
                inst.ended = time.time()
