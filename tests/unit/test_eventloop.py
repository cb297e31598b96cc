"""The controller's event loop choice: both loops run the same coroutine to its result."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from dispatcher.shell import eventloop


async def _answer() -> tuple[int, str]:
    await asyncio.sleep(0)
    return 42, type(asyncio.get_running_loop()).__module__


@pytest.mark.parametrize("loop", eventloop.LOOPS)
def test_each_loop_runs_a_coroutine_to_its_result(loop: eventloop.Loop) -> None:
    value, module = eventloop.run(_answer(), loop=loop)
    assert value == 42
    assert module.startswith("uvloop" if loop == "uvloop" else "asyncio")


def test_uvloop_is_the_default_where_it_is_installed() -> None:
    assert importlib.util.find_spec("uvloop") is not None  # a Linux dependency
    assert eventloop.default_loop() == "uvloop"
