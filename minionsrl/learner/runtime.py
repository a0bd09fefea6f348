"""JAX's set-up for the learner, done once before its first computation: threads, matmul precision and compilation
cache."""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minionsrl.function import clock

# Every float32 matmul of the learner at full float32 precision: on a GPU JAX's default may run them in TF32 (10-bit
# mantissa), and the log-probabilities the update recomputes would then differ from the rollout functions' float32
# ones by more than rounding (a ratio off 1 at the behaviour policy). XLA:CPU computes float32 matmuls at full
# precision either way: CPU results are unchanged, bit for bit.
MATMUL_PRECISION = "float32"


def configure(threads: int, gpu: bool = False) -> None:
    """One XLA:CPU thread and one BLAS thread when ``threads`` is 1 (their thread pools only add overhead at
    these sizes, and rollout functions need the other cores), so the update is one chain of work whose wait for
    a CPU is measurable (:func:`own_s`); for a learner on a GPU (``gpu``), JAX's clients made with every core (the
    GPU's compiler sizes its threads by them); compiled programs kept in a per-user cache
    (``$XDG_CACHE_HOME/minionsrl/jax``, or JAX's own ``JAX_COMPILATION_CACHE_DIR``), so a new run of a
    known shape starts without compiling; float32 matmuls at full precision (:data:`MATMUL_PRECISION`); on a GPU,
    memory taken as needed rather than most of the card at once. Flags reach XLA only if no JAX computation ran
    yet."""
    from threadpoolctl import threadpool_limits

    # NumPy's BLAS on the learner's side too (GAE, the Lanczos basis): its idle threads spin against the rollout
    # functions on a small machine, which made a 10k-element dot product take milliseconds
    threadpool_limits(threads, user_api="blas")
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1 and "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
    # a GPU learner's networks take megabytes: JAX's default, three quarters of the card taken at its first use,
    # would stop a second run on the same GPU (a comparison's seeds side by side) from starting at all
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax

    if threads == 1 and not gpu:
        _one_compute_thread(jax)
        if len(compute := _compute_threads()) > 1:
            # the client was made before this set-up (the flags and the affinity came too late): each of its compute
            # threads waits for a CPU on its own, and :func:`own_s` would count the update's wait several times
            warnings.warn(f"JAX ran before the learner was set up, so its CPU client has {len(compute)} compute "
                          "threads and the learner's measured seconds (projected_learner_s) may be off under "
                          "load; start the run (minionsrl.train) before any other JAX computation in this process, "
                          "or set XLA_FLAGS=--xla_cpu_multi_thread_eigen=false before it", RuntimeWarning,
                          stacklevel=2)
    jax.config.update("jax_default_matmul_precision", MATMUL_PRECISION)  # traced into every program from now on
    if not jax.config.jax_compilation_cache_dir:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minionsrl" / "jax"
        try:
            cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:  # no writable home: compile every run
            return
        jax.config.update("jax_compilation_cache_dir", str(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)


def _one_compute_thread(jax: Any) -> None:
    """Create JAX's CPU client while this process may use one core: XLA sizes its compute pool by the cores it may
    use, and with one thread the update runs as one chain of work handed between Python and that thread, instead
    of two threads that spin and overlap (measured at Hopper sizes: a 4,096-sample update 0.058 s against 0.066 s
    on a quiet machine, and a wait for a CPU that adds up). Every thread then gets the process's cores back."""
    if not hasattr(os, "sched_setaffinity"):
        return
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})
    try:
        jax.devices("cpu")
    finally:
        for tid in os.listdir("/proc/self/task"):
            with contextlib.suppress(OSError):  # a thread that has ended meanwhile
                os.sched_setaffinity(int(tid), cores)


@dataclass(frozen=True)
class Mark:
    """The learner's clocks at a moment (:func:`mark`): wall time, and per thread on its update (the calling thread
    and XLA's compute threads) its wait for a CPU and its time on one, in seconds."""

    wall: float
    waited: dict[str, float]
    ran: dict[str, float]


def mark() -> Mark:
    """The learner's clocks now; :func:`own_s` takes the difference. Called from the thread that runs the update."""
    files = {"self": "/proc/thread-self/schedstat",
             **{tid: f"/proc/self/task/{tid}/schedstat" for tid in _compute_threads()}}
    return Mark(time.perf_counter(), {t: clock.wait_s(f) for t, f in files.items()},
                {t: clock.run_s(f) for t, f in files.items()})


def own_s(since: Mark) -> float:
    """The learner's seconds since ``since`` on a host of its own: wall time less its threads' wait for a CPU of
    this machine (summed, as they take turns on one update; :func:`configure`), but at least the longest any one
    of them ran since: when both wait at once (JAX dispatches asynchronously, so the calling thread may be runnable
    while the compute thread is), the sum counts one stretch twice, and at a load of 50 on 2 cores it had read a
    Hopper update of ~1 s as 0. See :mod:`minionsrl.function.clock`."""
    now = mark()
    waited = sum(w - since.waited.get(t, 0.0) for t, w in now.waited.items())
    ran = max((r - since.ran.get(t, 0.0) for t, r in now.ran.items()), default=0.0)
    return clock.own_s(now.wall - since.wall, waited, ran)


def _compute_threads() -> list[str]:
    """The ids of XLA:CPU's compute threads in this process (named ``tf_XLAEigen``)."""
    tids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as fh:
                if fh.read().startswith("tf_XLAEigen"):
                    tids.append(tid)
        except OSError:  # a thread that has ended meanwhile
            pass
    return tids
