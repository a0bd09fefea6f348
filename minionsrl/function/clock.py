"""Own-instance time: how long a piece of work would take with a CPU of its own, whatever else runs here.

On a shared machine a runnable thread waits for a CPU, and its wall time grows with everyone else's load;
in the cloud each function has its instance (one vCPU at 1,769 MB on Lambda) and the learner its host. Linux
counts, per thread, the nanoseconds it spent runnable but waiting on a run queue (``/proc/<tid>/schedstat``,
second field; Documentation/scheduler/sched-stats.rst). Wall time less that wait is the time the work would
take alone: its CPU time plus whatever it waited on outside the CPU (sleeps, I/O, a remote simulator), which
``cpu_s`` alone would drop. Where the file is missing (not Linux, or schedstats off), the wait reads 0 and
own-instance time is wall time.

The learner is measured on the threads that take turns on its update (``minionsrl.learner.runtime``): their waits
summed, but never to less than the longest any one of them ran, since threads that both wait at once (JAX dispatches
asynchronously) would count the same stretch of time twice.
"""

from __future__ import annotations


def wait_s(schedstat: str) -> float:
    """The run-queue wait, in seconds, in a ``schedstat`` file (0 where it cannot be read)."""
    return _field_s(schedstat, 1)


def run_s(schedstat: str) -> float:
    """The seconds on a CPU, in a ``schedstat`` file (0 where it cannot be read)."""
    return _field_s(schedstat, 0)


def _field_s(schedstat: str, field: int) -> float:
    try:
        with open(schedstat, "rb") as fh:
            return int(fh.read().split()[field]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def thread_wait_s() -> float:
    """Seconds the calling thread has spent waiting for a CPU (a counter: take differences)."""
    return wait_s("/proc/thread-self/schedstat")


def own_s(wall_s: float, waited_s: float, ran_s: float = 0.0) -> float:
    """Own-instance seconds of a stretch of ``wall_s`` wall seconds that waited ``waited_s`` for a CPU here, and
    at least ``ran_s``, what it is known to have run on one (at least 0: the counters are read a moment apart)."""
    return max(wall_s - waited_s, ran_s, 0.0)
