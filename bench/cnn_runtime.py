"""Inside a rollout function: the CNN runtime per step and to cold-start (BENCHMARKS §4) and one function stepping
E environments with batched inference (§15).

    .venv/bin/python bench/cnn_runtime.py [cnn] [--repeats 5] [--steps 300]
    .venv/bin/python bench/cnn_runtime.py envs-per-function [--repeats 3]

``cnn``: The CNN rollout function's runtime: NumPy (im2col + matmul), per step and to cold-start.

A rollout function runs the Nature CNN on one 4×84×84 uint8 stack per env step, and a cold instance pays
its runtime's import and the first call before the first step. Both are measured here: the cold start in
fresh processes, the per-step latency in one process (one BLAS thread, as in a function, and two). Rollout
functions are NumPy by design (DESIGN): the torch arm this script once had chose NumPy, and torch is no longer
a dependency. The NumPy values are checked against the learner's JAX CNN.

Usage: .venv/bin/python bench/cnn_runtime.py [--repeats 5] [--steps 300]

``envs-per-function``: Batched inference inside a rollout function: one function stepping E environments
(``--envs-per-function``).

Measures, in one process with BLAS pinned to one thread (as in a function), the wall time of one
function's rollout of T steps in each of E environments, for the Nature CNN on Pong and the MLP on
Hopper: env steps per second, and the policy's share. Every E runs the same code path
(``rollout_many``); E = 1 is today's default.

    .venv/bin/python bench/cnn_runtime.py envs-per-function [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

import common
from common import run_modes

# -- cnn (was cnn_runtime.py) ---------------------------------------------------

ACTIONS = 6  # Pong's action set

# Child program: time the runtime's import, building the policy from published weights, and the first call.
_COLD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import minionsrl.function.rollout  # what a function imports: it limits BLAS to one thread
from minionsrl.function.fragment import PolicySnapshot
t1 = time.perf_counter()
snap = PolicySnapshot.decode(open(sys.argv[1], "rb").read(), b"k" * 32)
policy = snap.numpy_policy()
t2 = time.perf_counter()
obs = np.zeros(snap.arch.obs_shape, np.uint8)
policy.forward(obs)
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "first_call_s": t3 - t2, "total_s": t3 - t0}))
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args(argv)
    started = time.time()

    import jax.numpy as jnp
    import numpy as np
    from threadpoolctl import threadpool_limits

    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner import networks

    threadpool_limits(1, "blas")  # as a rollout function does (minionsrl/function/rollout.py)
    arch = PolicyArch(4 * 84 * 84, ACTIONS, True, (), "cnn", (4, 84, 84))
    params = networks.init_params(arch, 0)
    snap = networks.snapshot_of(arch, params, None, 0, 10.0)
    blob = common.OUT / "cnn_policy.bin"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(snap.encode(b"k" * 32))
    numpy_policy = snap.numpy_policy()
    frames = np.random.default_rng(0).integers(0, 256, size=(args.steps, 4, 84, 84), dtype=np.uint8)

    def step_numpy(o):
        return numpy_policy.forward(o)

    def step_numpy_2threads(o):
        with threadpool_limits(2, "blas"):
            return numpy_policy.forward(o)

    # the rollout function computes what the learner computes (its values against the learner's JAX CNN)
    _, value = numpy_policy.forward(frames[:8])
    jvalue = networks.value(arch, {k: jnp.asarray(v) for k, v in params.items()}, jnp.asarray(frames[:8]))
    max_err = float(np.abs(value - np.asarray(jvalue)).max())

    latency: dict[str, list[float]] = {"numpy": [], "numpy2": []}
    for _ in range(args.repeats):  # interleaved blocks, so load changes hit both alike
        for name, fn in (("numpy", step_numpy), ("numpy2", step_numpy_2threads)):
            fn(frames[0])
            t0 = time.perf_counter()
            for o in frames:
                fn(o)
            latency[name].append((time.perf_counter() - t0) / len(frames) * 1e3)
    cold: list[dict] = []
    for _ in range(args.repeats):
        proc = subprocess.run([common.PYTHON, "-c", _COLD, str(blob)], capture_output=True, text=True, check=True,
                              cwd=common.ROOT)
        cold.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    record = {"latency_ms": latency, "cold": {"numpy": cold}, "max_value_error": max_err}
    common.append_jsonl(common.OUT / "cnn_runtime.jsonl", record)

    med = {k: statistics.median(c[k] for c in cold) for k in ("import_s", "build_s", "first_call_s", "total_s")}
    rows = [["numpy", statistics.median(latency["numpy"]), min(latency["numpy"]), med["import_s"] * 1e3,
             med["build_s"] * 1e3, med["first_call_s"] * 1e3, med["total_s"] * 1e3],
            ["numpy, 2 BLAS threads", statistics.median(latency["numpy2"]), min(latency["numpy2"]), None, None,
             None, None]]
    numpy_ms = rows[0][1]
    # a cold start is paid once per instance, a step thousands of times: weigh both
    frag_numpy = rows[0][6] + 128 * numpy_ms
    text = f"""## 4. Runtime of the CNN rollout function (NumPy)

The Nature CNN (3 convolutions, 512-unit dense layer, {ACTIONS} actions) on one 4×84×84 uint8 frame stack, as a
rollout function runs it once per env step. "per step" is the median over {args.repeats} interleaved blocks of
{args.steps} single-observation calls in one process; "cold" is a fresh process each time (median of
{args.repeats}): importing NumPy and the rollout function's module (as an instance does), building the policy from
the published weights, and the first call. The first row runs one OpenBLAS thread (via `threadpoolctl`, as the
rollout function sets it). The last row is NumPy with two OpenBLAS threads: on shared, busy cores its threads
contend (while a Pong run used both cores, an ad-hoc check measured 30–50 ms a step with two threads against
1.3 ms with one; that is why rollout functions pin BLAS to one thread).
NumPy's convolutions are im2col (a strided window view, one copy) and one
matmul each, in NHWC layout with the weights reordered once at load; its values match the learner's JAX CNN to
{max_err:.1e}.

{common.markdown_table(["runtime", "per step ms (median)", "per step ms (best)", "cold: import ms",
                        "cold: build ms", "cold: first call ms", "cold: total ms"], rows, 2)}

A cold instance's first 128-step fragment costs about {frag_numpy:,.0f} ms of policy time (cold start plus 128
steps). Rollout functions are NumPy for every policy (MLP and CNN), a DESIGN decision: an earlier run of this
script (2026-11-22, commit 9f97d4a) measured torch with one thread beside NumPy: 0.39 against 0.38 ms a step,
1,014 against 139 ms to cold-start. torch is no longer a dependency, and rollout functions do not import the
learner's JAX either.
onnxruntime was not measured: it is not among this project's dependencies and would need an export path
of its own. These runs shared the 2 cores with other developers' work: compare the rows side by side, not with
other sections.

{common.provenance(started)}
"""
    common.write_section("cnn_runtime", text)
    print(text)


# -- envs-per-function (was envs_per_function.py) -------------------------------

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


def envs_per_function_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
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


MODES = {"cnn": main, "envs-per-function": envs_per_function_main}


if __name__ == "__main__":
    run_modes(MODES)
