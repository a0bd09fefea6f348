"""Benchmark: GAE on the host (NumPy, as ``learner.advantages.compute_gae`` runs it: the step-independent part
vectorised, only the recurrence in a Python loop over T) against the step-by-step loop it replaced on 2026-11-27 and
against the same recurrence as a jitted ``jax.lax.scan`` (PureJaxRL's placement: inside the compiled program), side by
side in one process, on a Hopper-sized round of 4,096 rows in two layouts (8 actors × 512 steps, 128 × 32).

Each figure is the median of 5 interleaved blocks, each the median of 20 calls; the scan's time includes moving
its inputs in and its outputs back. Also: whether the step loop's and the scan's results are bit-identical to
``compute_gae``'s (the update must stay bit-identical to move GAE; NumPy 2 computes ``gamma · bootstrap`` in float32
for every step but the last, which the vectorised form keeps).

    .venv/bin/python bench/gae_placement.py          # the scan in float32, JAX's default (the update's precision)
    .venv/bin/python bench/gae_placement.py --x64    # the scan in float64, the host loop's precision
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve()
ROOT = HERE.parents[3] if "archive" in HERE.parts else HERE.parent.parent  # runs from the archive or bench/
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from oracles import gae_step_loop as step_loop  # noqa: E402  (the loop compute_gae ran until 2026-11-27)


def make_scan(x64: bool) -> Callable:
    import jax
    import jax.numpy as jnp

    wide = jnp.float64 if x64 else jnp.float32

    @jax.jit
    def gae_scan(rewards, values, terminated, truncated, trunc_values, last_values, gamma, lam):
        values_w = values.astype(wide)

        def step(carry, x):
            next_value, last_gae = carry
            r, v, term, trunc, tv = x
            bootstrap = jnp.where(term, 0.0, jnp.where(trunc, tv.astype(wide), next_value))
            delta = r + gamma * bootstrap - v
            last_gae = delta + gamma * lam * ~(term | trunc) * last_gae
            return (v, last_gae), last_gae

        xs = tuple(a.T for a in (rewards.astype(wide), values_w, terminated, truncated, trunc_values))
        init = (last_values.astype(wide), jnp.zeros(last_values.shape, wide))
        _, adv = jax.lax.scan(step, init, xs, reverse=True)
        return adv.T.astype(jnp.float32), (adv.T + values_w).astype(jnp.float32)

    return gae_scan


def median_ms(fn: Callable, reps: int = 20) -> float:
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return float(np.median(times)) * 1e3


GAMMA, LAM = 0.99, 0.95


def measure(n: int, steps: int, compute_gae: Callable, scan: Callable, precision: str) -> str:
    """One layout's line: the three placements' median times, and the scan's difference from the host loop."""
    from functools import partial

    r = np.random.default_rng(0)
    terminated = r.random((n, steps)) < 0.005
    truncated = (r.random((n, steps)) < 0.002) & ~terminated
    inputs = (r.standard_normal((n, steps)), r.standard_normal((n, steps)).astype(np.float32), terminated,
              truncated, r.standard_normal((n, steps)).astype(np.float32), r.standard_normal(n).astype(np.float32),
              GAMMA, LAM)

    def compiled() -> tuple[np.ndarray, np.ndarray]:
        adv, ret = scan(*inputs)
        return np.asarray(adv), np.asarray(ret)

    started = time.perf_counter()
    compiled()
    compile_s = time.perf_counter() - started
    fns = {"host": partial(compute_gae, *inputs), "loop": partial(step_loop, *inputs), "scan": compiled}
    blocks: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(5):  # interleaved, so that the shared machine's load falls on all three alike
        for name, fn in fns.items():
            blocks[name].append(median_ms(fn))
    (ha, hr), (sa, sr), (la, lr) = fns["host"](), compiled(), fns["loop"]()
    ms = {name: float(np.median(b)) for name, b in blocks.items()}
    return (f"{n}x{steps}: host (compute_gae) {ms['host']:.3f} ms, the step loop it replaced {ms['loop']:.3f} ms "
            f"(bit-identical {np.array_equal(ha, la) and np.array_equal(hr, lr)}), {precision} scan "
            f"{ms['scan']:.3f} ms (first call {compile_s:.2f} s); scan vs host: max |advantage diff| "
            f"{np.abs(ha - sa).max():.2g}, max |return diff| {np.abs(hr - sr).max():.2g}, "
            f"{int((ha != sa).sum())}/{ha.size} advantages differ, bit-identical "
            f"{np.array_equal(ha, sa) and np.array_equal(hr, sr)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--x64", action="store_true", help="the scan in float64")
    args = ap.parse_args()
    from minionsrl.learner import runtime

    runtime.configure(1)  # XLA on one thread, as the learner runs
    import jax

    if args.x64:
        jax.config.update("jax_enable_x64", True)
    from minionsrl.learner.advantages import compute_gae

    scan = make_scan(args.x64)
    for n, steps in ((8, 512), (128, 32)):
        print(measure(n, steps, compute_gae, scan, "float64" if args.x64 else "float32"))

if __name__ == "__main__":
    main()
