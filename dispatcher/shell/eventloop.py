"""The controller's event loop: uvloop where it is installed, else asyncio's own.

The controller is I/O bound on the event loop thread: every request, watch line and TLS
record goes through the loop's transports. uvloop (libuv, Cython) runs those transports and
TLS in C; on the dispatch benchmark (orjson on both sides, four alternated runs each) it
took the controller's CPU per dispatch from 3.15 to 2.79 ms on average. Kopf makes the
same choice (its CLI runs on uvloop when installed, ``kopf/_kits/loops.py``). The
controller's code is loop-agnostic (tests run it on asyncio's loop), so ``--event-loop
asyncio`` is a full fallback, not a degraded mode.
"""

from __future__ import annotations

import asyncio
import importlib.util
from collections.abc import Coroutine
from typing import Any, Literal, TypeVar

__all__ = ["LOOPS", "Loop", "default_loop", "run"]

_T = TypeVar("_T")
Loop = Literal["uvloop", "asyncio"]
LOOPS: tuple[Loop, ...] = ("uvloop", "asyncio")


def default_loop() -> Loop:
    """uvloop when it can be imported (a dependency on Linux and macOS), else asyncio."""
    return "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"


def run(main: Coroutine[Any, Any, _T], *, loop: Loop) -> _T:
    """``asyncio.run(main)`` on the chosen loop."""
    if loop == "uvloop":
        import uvloop  # noqa: PLC0415 - optional (no wheel on Windows)

        return uvloop.run(main)
    return asyncio.run(main)
