"""JAX's set-up for the learner, done once before its first computation: threads and compilation cache."""

from __future__ import annotations

import os
from pathlib import Path


def configure(threads: int) -> None:
    """One XLA:CPU thread and one BLAS thread when ``threads`` is 1 (their thread pools only add overhead at
    these sizes, and rollout functions need the other cores); compiled programs kept in a per-user cache
    (``$XDG_CACHE_HOME/minionsrl/jax``, or JAX's own ``JAX_COMPILATION_CACHE_DIR``), so a new run of a
    known shape starts without compiling. Flags reach XLA only if no JAX computation ran yet."""
    from threadpoolctl import threadpool_limits

    # NumPy's BLAS on the learner's side too (GAE, the Lanczos basis): its idle threads spin against the rollout
    # functions on a small machine, which made a 10k-element dot product take milliseconds
    threadpool_limits(threads, user_api="blas")
    flags = os.environ.get("XLA_FLAGS", "")
    if threads == 1 and "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()
    import jax

    if not jax.config.jax_compilation_cache_dir:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "minionsrl" / "jax"
        try:
            cache.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError:  # no writable home: compile every run
            return
        jax.config.update("jax_compilation_cache_dir", str(cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.2)
