"""What a step's latency costs in CPU here: why 64 latency-bound functions are CPU-bound on this machine.

One process steps Hopper-v5 (built by the rollout functions' ``make_env``) with a 64-64 tanh policy in NumPy,
``--steps`` steps with no step latency and with ``--latency-ms`` (``StepLatency``: a sleep), alternating
``--repeats`` times, and reports the CPU milliseconds (process time) and wall milliseconds per step. A sleep
should cost no CPU; what it costs on a VM (waking, cold caches) multiplies by the 4,096 steps of a round, which the
functions of a round need whatever their number (docs/archive/RESULTS-2026-11.md, 2026-11-26). Run it on a quiet
machine.

    .venv/bin/python bench/step_latency_cpu.py [--steps 400] [--repeats 3] [--latency-ms 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import ROOT, load_average, markdown_table

from minionsrl.function.envs import EnvSpec, make_env

DOC = ROOT / "docs" / "results" / "step-latency-cpu.md"


def per_step_ms(latency_ms: float, steps: int, seed: int) -> tuple[float, float]:
    """CPU and wall milliseconds per step of Hopper-v5 and a small NumPy policy, with ``latency_ms`` a step."""
    env = make_env(EnvSpec("Hopper-v5", step_latency_ms=latency_ms))
    rng = np.random.default_rng(seed)
    layers = [rng.standard_normal(shape).astype(np.float32) * 0.1 for shape in ((11, 64), (64, 64), (64, 3))]
    obs, _ = env.reset(seed=seed)
    cpu, wall = time.process_time(), time.perf_counter()
    for _ in range(steps):
        x = obs.astype(np.float32)
        for w in layers:
            x = np.tanh(x @ w)
        obs, _, terminated, truncated, _ = env.step(x)
        if terminated or truncated:
            obs, _ = env.reset()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    env.close()
    return 1e3 * cpu / steps, 1e3 * wall / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=5.0)
    args = parser.parse_args()
    load = load_average()
    rows = []
    for r in range(args.repeats):
        for latency in (0.0, args.latency_ms):
            rows.append([r + 1, latency, *per_step_ms(latency, args.steps, seed=r)])
    table = markdown_table(["repeat", "step latency ms", "CPU ms a step", "wall ms a step"], rows, [0, 0, 3, 3])
    text = (f"# CPU per step with and without a step latency\n\nWritten by `bench/step_latency_cpu.py` "
            f"(`--steps {args.steps} --repeats {args.repeats} --latency-ms {args.latency_ms:g}`); load before: "
            f"{load}.\n\n{table}\n")
    DOC.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
