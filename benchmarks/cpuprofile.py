"""Run a module under cProfile timed by this thread's CPU clock, not the wall clock.

``python benchmarks/cpuprofile.py OUT -m MODULE ARGS...`` is ``python -m cProfile -o OUT -m
MODULE ARGS...`` (``%p`` in OUT: the pid, a file per process) with ``time.thread_time``
as the timer: on a loaded machine a wall-clock
profile charges a syscall with the time the process waited to be scheduled again (a
loopback ``send`` looked like 1 ms), which is not CPU the controller spent. Only the main
thread is profiled (the event loop's; worker threads show only in ``cpu_s``).

With ``CPUPROFILE_WINDOW=1`` in the environment the profile starts off: the first SIGUSR1
turns it on, the next one turns it off and writes OUT. ``benchmarks/dispatch.py`` signals
the dispatch window that way, so start-up and the mirror phase stay out of the figures.
"""

from __future__ import annotations

import cProfile
import os
import runpy
import signal
import sys
import time


def main() -> None:
    out, flag, module, *args = sys.argv[1:]
    out = out.replace("%p", str(os.getpid()))  # one file per process (restart.py starts several)
    if flag != "-m":
        raise SystemExit("usage: cpuprofile.py OUT -m MODULE [ARGS...]")
    sys.argv = [module, *args]
    profiler = cProfile.Profile(time.thread_time)
    if os.environ.get("CPUPROFILE_WINDOW") == "1":
        toggles = iter(("on", "off"))

        def toggle(_signum: int, _frame: object) -> None:
            turn = next(toggles, None)  # later signals (later cases) change nothing
            if turn == "on":
                profiler.enable()
            elif turn == "off":
                profiler.disable()
                profiler.dump_stats(out)

        signal.signal(signal.SIGUSR1, toggle)
    else:
        profiler.enable()
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        profiler.disable()
        if os.environ.get("CPUPROFILE_WINDOW") != "1":
            profiler.dump_stats(out)


if __name__ == "__main__":
    main()
