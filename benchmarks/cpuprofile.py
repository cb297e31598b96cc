"""Run a module under cProfile timed by this thread's CPU clock, not the wall clock.

``python benchmarks/cpuprofile.py OUT -m MODULE ARGS...`` is ``python -m cProfile -o OUT -m
MODULE ARGS...`` with ``time.thread_time`` as the timer: on a loaded machine a wall-clock
profile charges a syscall with the time the process waited to be scheduled again (a
loopback ``send`` looked like 1 ms), which is not CPU the controller spent. Only the main
thread is profiled (the event loop's; worker threads show only in ``cpu_s``).
"""

from __future__ import annotations

import cProfile
import runpy
import sys
import time


def main() -> None:
    out, flag, module, *args = sys.argv[1:]
    if flag != "-m":
        raise SystemExit("usage: cpuprofile.py OUT -m MODULE [ARGS...]")
    sys.argv = [module, *args]
    profiler = cProfile.Profile(time.thread_time)
    profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profiler.disable()
        profiler.dump_stats(out)


if __name__ == "__main__":
    main()
