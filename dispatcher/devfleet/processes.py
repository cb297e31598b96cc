"""The dev fleet's processes: started in their own sessions (they outlive the command),
recognised again by pid and argv, probed, waited for and stopped by process group."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

from dispatcher.devfleet.state import ProcessInfo

__all__ = ["free_port", "is_alive", "log_tail", "probe", "respawn", "spawn", "stop_process",
           "wait_http"]


def free_port() -> int:
    """A currently free loopback TCP port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def is_alive(proc: ProcessInfo) -> bool:
    """Whether ``proc`` is still the process we started (pid not reused by another binary)."""
    child = _CHILDREN.get(proc.pid)
    if child is not None:  # our own child: poll() is exact (and /proc may still show the
        return child.poll() is None  # pre-exec, empty cmdline right after the spawn)
    try:
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        state = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return cmdline == proc.argv[0] and state != "Z"


# Processes this interpreter started, kept so they can be reaped (and so Popen does not warn
# about dropping a running child: they are meant to outlive the command that started them).
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def spawn(argv: list[str], log: Path, *, role: str, health: str = "",
           env: dict[str, str] | None = None) -> ProcessInfo:
    """Start a dev fleet process. Each is given its cluster by flag; the user's own
    ``KUBECONFIG`` is not passed on (client-go merges it in, and a path that does not exist
    yet, such as the fleet's own before ``up`` writes it, stops an operator)."""
    inherited = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    with log.open("ab") as sink:
        proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**inherited, **(env or {})})
    _CHILDREN[proc.pid] = proc
    return ProcessInfo(pid=proc.pid, argv=argv, log=str(log), role=role, health=health,
                       env=dict(env or {}))


def respawn(proc: ProcessInfo) -> ProcessInfo:
    """Start ``proc`` again the same way (argv, environment, log, ports)."""
    return spawn(proc.argv, Path(proc.log), role=proc.role, health=proc.health, env=proc.env)


def stop_process(proc: ProcessInfo, *, timeout: float = 15.0) -> None:
    """SIGTERM the process group, SIGKILL after ``timeout``; no-op when already gone."""
    if not is_alive(proc):
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(proc):
            break
        time.sleep(0.1)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    child = _CHILDREN.pop(proc.pid, None)
    if child is not None:  # our own child: reap it
        with contextlib.suppress(subprocess.TimeoutExpired):
            child.wait(timeout=5)


def probe(proc: ProcessInfo, *, timeout: float = 3.0) -> bool:
    """Whether ``proc`` runs and its health URL answers 200 (TLS unverified: the scheduler's
    and controller-manager's self-signed serving certificates)."""
    if not is_alive(proc):
        return False
    if not proc.health:
        return True
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(proc.health, timeout=timeout) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


def log_tail(proc: ProcessInfo, lines: int = 15) -> str:
    try:
        return "\n".join(Path(proc.log).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def wait_http(url: str, *, timeout: float, proc: ProcessInfo) -> None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not is_alive(proc):
            raise RuntimeError(f"{proc.argv[0]} exited; log {proc.log}:\n{log_tail(proc)}")
        try:
            with opener.open(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f}s; log {proc.log}")
