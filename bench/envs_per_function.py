"""Batched inference inside a rollout function: one function stepping E environments (``--envs-per-function``).

Measures, in one process with BLAS pinned to one thread (as in a function), the wall time of one
function's rollout of T steps in each of E environments, for the Nature CNN on Pong and the MLP on
Hopper: env steps per second, and the policy's share. Every E runs the same code path
(``rollout_many``); E = 1 is today's default.

    .venv/bin/python bench/envs_per_function.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import common

CASES = (("ALE/Pong-v5", 128, (1, 4, 8)), ("Hopper-v5", 512, (1, 4, 8)))


def measure(env_id: str, steps: int, n_envs: int, repeats: int) -> dict[str, float]:
    from minionsrl.function import rollout as rollout_mod
    from minionsrl.function.envs import EnvSpec, env_info, make_env
    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner.networks import init_params, snapshot_of

    info = env_info(EnvSpec(env_id))
    arch = PolicyArch.of(info, (64, 64))
    snapshot = snapshot_of(arch, init_params(arch, 0), None, 0, 10.0)
    policy = snapshot.numpy_policy()
    envs = [make_env(EnvSpec(env_id)) for _ in range(n_envs)]
    seeds = rollout_mod.env_seeds(7, n_envs)
    rollout_mod.rollout_many(envs, snapshot, policy, 8, seeds, 0.99, [None] * n_envs)  # warm-up
    times, policy_s = [], []
    forward = policy.forward
    for r in range(repeats):
        spent = [0.0]

        def timed(x, spent=spent):
            t0 = time.perf_counter()
            out = forward(x)
            spent[0] += time.perf_counter() - t0
            return out

        policy.forward = timed
        t0 = time.perf_counter()
        rollout_mod.rollout_many(envs, snapshot, policy, steps, rollout_mod.env_seeds(r, n_envs), 0.99,
                                 [None] * n_envs)
        times.append(time.perf_counter() - t0)
        policy_s.append(spent[0])
        policy.forward = forward
    for env in envs:
        env.close()
    wall = statistics.median(times)
    return {"wall_s": wall, "sps": n_envs * steps / wall, "policy_share": statistics.median(policy_s) / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    started = time.time()
    rows = []
    for env_id, steps, counts in CASES:
        base = None
        for n_envs in counts:
            m = measure(env_id, steps, n_envs, args.repeats)
            base = base or m["sps"]
            rows.append([env_id, n_envs, steps, m["wall_s"], m["sps"], m["sps"] / base, 100 * m["policy_share"]])
            common.log(f"{env_id} E={n_envs}: {m['sps']:.0f} steps/s")
    text = f"""## Batched inference in a rollout function (`--envs-per-function E`)

One function of E environments runs the policy once per step on all E observations (one matmul per
layer, or one im2col per convolution, for the batch) and returns one fragment per environment. Measured
in one process, BLAS pinned to one thread as in a function, median of {args.repeats} rollouts of T steps
per environment (a cold instance's env construction excluded).

{common.markdown_table(["env", "E", "T", "function wall s", "env steps/s", "vs E=1", "policy % of wall"], rows,
                       [0, 0, 0, 2, 0, 2, 0])}

What it buys: fewer, longer invocations for the same samples (fewer requests and cold starts billed), and
on the CNN a cheaper policy per step; the environments themselves still step one after another.

{common.provenance(started)}
"""
    common.write_section("envs_per_function", text)
    print(text)


if __name__ == "__main__":
    main()
