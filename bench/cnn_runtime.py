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

``atari-function``: what a rollout function costs per million Atari frames (CPU seconds, Lambda dollars): one warm
instance serving a chain of carried Pong invocations through ``handle``, at E = 1 and 8, optionally beside the code
of an earlier commit (``--before REV``, unpacked with ``git archive``), interleaved.

    .venv/bin/python bench/cnn_runtime.py atari-function [--before REV] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
NumPy's convolutions are one matmul each over an im2col copy, in NHWC layout with the weights reordered once at
load; the strided ones (8/4, 4/2) first fold each stride × stride patch into the channels (space-to-depth), so the
copy moves whole channel vectors. Its values match the learner's JAX CNN to {max_err:.1e}. Inside a function the
dense layer's 6.4 MB of weights, read once a call, cost more than here, where they stay in cache: see §18 for
what a function pays, and batching (§15) for the fix.

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
    seeds = [7 + e for e in range(n_envs)]
    # warm-up; then each rollout carries on the episodes of the one before, as training does by default (a fresh
    # seeded start would reload an ALE game's ROM, 120 ms an env, which carried rounds do not pay)
    carries = [f.meta["carry"] for f in rollout_mod.rollout_many(envs, snapshot, policy, 8, seeds, 0.99,
                                                                 [None] * n_envs)]
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
        fragments = rollout_mod.rollout_many(envs, snapshot, policy, steps, [100 * r + e for e in range(n_envs)], 0.99,
                                             carries)
        carries = [f.meta["carry"] for f in fragments]
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
per environment, each carrying on the episodes of the one before, as training rounds do (a cold instance's env
construction excluded).

{common.markdown_table(["env", "E", "T", "function wall s", "env steps/s", "vs E=1", "policy % of wall"], rows,
                       [0, 0, 0, 2, 0, 2, 0])}

What it buys: fewer, longer invocations for the same samples (fewer requests and cold starts billed), and
on the CNN a cheaper policy per step; the environments themselves still step one after another.

{common.provenance(started)}
"""
    common.write_section("envs_per_function", text)
    print(text)


# -- atari-function -------------------------------------------------------------

# Child program: one warm instance serving a chain of carried Pong invocations through the function's real entry
# point (a new policy each one, as every round publishes one); prints each invocation's CPU seconds.
_CHAIN = r"""
import json, sys, time
from minionsrl.function import rollout, wire
from minionsrl.function.envs import EnvSpec, env_info
from minionsrl.function.numpy_policy import PolicyArch
from minionsrl.function.request import Request
from minionsrl.learner.networks import init_params, snapshot_of
env_id, envs, steps, invocations = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
key, spec = b"b" * 32, EnvSpec(env_id)
arch = PolicyArch.of(env_info(spec), (64, 64))
params = init_params(arch, 0)
carries, cpu = (None,) * envs, []
for i in range(invocations):
    blob = snapshot_of(arch, params, None, i, 10.0).encode(key)
    seeds = {"env_seeds": tuple(1000 * i + e for e in range(envs))} if envs > 1 else {}
    if seeds and "env_seeds" not in Request.__dataclass_fields__:  # the code before 2026-11-29 drew them itself
        seeds = {}
    req = Request(id=f"r{i}", kind="train", policy=f"p{i}", env=spec, seed=1000 * i, gamma=0.99, steps=steps,
                  carries=carries, **seeds)
    c0 = time.process_time()
    reply = rollout.handle(req.encode(), lambda ref, blob=blob: blob, key)
    cpu.append(time.process_time() - c0)
    _, meta = wire.decode(reply, wire.invocation_key(key, req.id))
    if meta.get("type") == "error":
        raise SystemExit(meta["error"])
    carries = tuple(m.get("carry") for m in meta["fragments"]) if envs > 1 else (meta.get("carry"),)
import minionsrl
print(json.dumps({"cpu_s": cpu, "package": minionsrl.__file__}))
"""
FRAME_SKIP = 4  # the Atari preset's frames per agent step


def _code_at(rev: str, into: str) -> str:
    """The minionsrl package as commit ``rev`` has it, unpacked under ``into``; the folder to put on PYTHONPATH."""
    archive = subprocess.run(["git", "archive", rev, "minionsrl"], cwd=common.ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", into], input=archive, check=True)
    return into


def _chain_cpu_s(code: str, envs: int, steps: int, invocations: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", _CHAIN, "ALE/Pong-v5", str(envs), str(steps), str(invocations)],
                         env={**os.environ, "PYTHONPATH": code}, cwd=code, capture_output=True, text=True,
                         check=True)  # in ``code``: `python -c` puts the working folder first on the path
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(result["package"]).resolve().parent.parent != Path(code).resolve():
        raise RuntimeError(f"the child imported {result['package']}, not the code under {code}")
    return result["cpu_s"]


def atari_function_main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Function seconds and Lambda dollars per 1M Atari frames")
    parser.add_argument("--before", default=None, help="a commit to measure beside the working tree")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=128, help="steps per environment per invocation (the preset's)")
    parser.add_argument("--agent-steps", type=int, default=3072, help="agent steps per chain (all envs)")
    parser.add_argument("--envs", type=int, nargs="+", default=[1, 8])
    args = parser.parse_args(argv)
    from minionsrl.cost import load_prices
    from minionsrl.function.faults import DEFAULT_MEMORY_MB

    started = time.time()
    lam = load_prices().pricing("aws_lambda_x86")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"working tree": str(common.ROOT)}
        if args.before:
            trees = {f"before ({args.before})": _code_at(args.before, tmp), **trees}
        cpu: dict[tuple[str, int], list[float]] = {}
        for r in range(args.repeats):  # interleaved: each repeat runs every tree and E back to back
            for envs in args.envs:
                for label, code in trees.items():
                    invocations = 1 + max(1, args.agent_steps // (envs * args.steps))
                    per = _chain_cpu_s(code, envs, args.steps, invocations)[1:]  # the first builds the envs
                    cpu.setdefault((label, envs), []).append(sum(per) / (len(per) * envs * args.steps))
                    common.log(f"repeat {r + 1} {label} E={envs}: {1e3 * cpu[label, envs][-1]:.2f} ms CPU/step")
    rows, base, first = [], {}, None
    for (label, envs), per_step in cpu.items():
        step_s = statistics.median(per_step)
        frames_s = 1e6 / FRAME_SKIP * step_s  # function seconds per 1M frames
        invocations = 1e6 / FRAME_SKIP / (envs * args.steps)
        usd = invocations * lam.invocation_usd(0.0, frames_s / invocations, DEFAULT_MEMORY_MB)
        base.setdefault(envs, frames_s)
        first = first or frames_s
        rows.append([label, envs, 1e3 * step_s, frames_s, usd, frames_s / base[envs], frames_s / first])
    text = f"""## Atari: function seconds and Lambda dollars per million frames

One warm instance serves a chain of Pong invocations (ALE/Pong-v5, the Atari preset: {args.steps} steps per
environment, 4 frames per step, sticky actions) through the function's own entry point, each carrying the
games in progress to the next and each with a newly published policy, as rounds do. "CPU ms/step" is the
invocation's CPU time per agent step (the first invocation, which builds the envs, left out), median of
{args.repeats} interleaved chains of about {args.agent_steps:,} agent steps; CPU time, so the machine's load moves
it little. Function seconds per 1M frames take that CPU time as the billed duration (one vCPU, nothing else
running on it), and the dollars are Lambda x86's at {DEFAULT_MEMORY_MB:.0f} MB (`prices.yaml`), requests included.

{common.markdown_table(["code", "E", "CPU ms/step", "function s / 1M frames", "Lambda $ / 1M frames",
                        "vs first row at this E", "vs first row"], rows, [0, 0, 2, 0, 4, 2, 2])}

{common.provenance(started)}
"""
    common.write_section("atari_function", text)
    print(text)


MODES = {"cnn": main, "envs-per-function": envs_per_function_main, "atari-function": atari_function_main}


if __name__ == "__main__":
    run_modes(MODES)
