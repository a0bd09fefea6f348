"""Which runtime a CNN rollout function should use: NumPy (im2col + matmul) vs torch (one thread).

A rollout function runs the Nature CNN on one 4×84×84 uint8 stack per env step, and a cold instance pays
its runtime's import and the first call before the first step. Both are measured here, each runtime in
fresh processes for the cold start, and side by side in one process for the per-step latency.

Usage: .venv/bin/python bench/cnn_runtime.py [--repeats 5] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import time

import common

ACTIONS = 6  # Pong's action set

# Child program: time the runtime's import, building the policy from published weights, and the first call.
_COLD = r"""
import json, sys, time
t0 = time.perf_counter()
runtime = sys.argv[1]
if runtime == "numpy":
    import numpy as np
    import minionsrl.function.rollout  # what a function imports: it limits BLAS to one thread
    from minionsrl.function.fragment import PolicySnapshot
    t1 = time.perf_counter()
    snap = PolicySnapshot.decode(open(sys.argv[2], "rb").read(), b"k" * 32)
    policy = snap.numpy_policy()
    t2 = time.perf_counter()
    obs = np.zeros(snap.arch.obs_shape, np.uint8)
    policy.forward(obs)
else:
    import torch
    torch.set_num_threads(1)
    import numpy as np
    from minionsrl.function.fragment import PolicySnapshot
    from minionsrl.learner.networks import CNNActorCritic
    t1 = time.perf_counter()
    snap = PolicySnapshot.decode(open(sys.argv[2], "rb").read(), b"k" * 32)
    policy = CNNActorCritic(snap.arch)
    policy.load_numpy_params(snap.params)
    t2 = time.perf_counter()
    with torch.no_grad():
        policy.evaluate(torch.zeros((1, *snap.arch.obs_shape), dtype=torch.uint8), torch.zeros(1))
t3 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "build_s": t2 - t1, "first_call_s": t3 - t2, "total_s": t3 - t0}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    started = time.time()

    import numpy as np
    import torch
    from threadpoolctl import threadpool_limits

    from minionsrl.function.numpy_policy import PolicyArch
    from minionsrl.learner.networks import make_policy, snapshot_of

    torch.set_num_threads(1)
    threadpool_limits(1, "blas")  # as a rollout function does (minionsrl/rollout.py)
    torch.manual_seed(0)
    arch = PolicyArch(4 * 84 * 84, ACTIONS, True, (), "cnn", (4, 84, 84))
    net = make_policy(arch)
    snap = snapshot_of(net, None, 0, 10.0)
    blob = common.OUT / "cnn_policy.bin"
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(snap.encode(b"k" * 32))
    numpy_policy = snap.numpy_policy()
    frames = np.random.default_rng(0).integers(0, 256, size=(args.steps, 4, 84, 84), dtype=np.uint8)

    def step_numpy(o):
        return numpy_policy.forward(o)

    def step_torch(o):
        with torch.no_grad():
            return net.evaluate(torch.from_numpy(o)[None], torch.zeros(1))

    # the two agree (so the faster one is a valid choice)
    _, value = numpy_policy.forward(frames[:8])
    with torch.no_grad():
        _, _, tvalue = net.evaluate(torch.from_numpy(frames[:8]), torch.zeros(8))
    max_err = float(np.abs(value - tvalue.numpy()).max())

    def step_numpy_2threads(o):
        with threadpool_limits(2, "blas"):
            return numpy_policy.forward(o)

    latency: dict[str, list[float]] = {"numpy": [], "torch": [], "numpy2": []}
    for _ in range(args.repeats):  # interleaved blocks, so load changes hit the runtimes alike
        for name, fn in (("numpy", step_numpy), ("torch", step_torch), ("numpy2", step_numpy_2threads)):
            fn(frames[0])
            t0 = time.perf_counter()
            for o in frames:
                fn(o)
            latency[name].append((time.perf_counter() - t0) / len(frames) * 1e3)
    cold: dict[str, list[dict]] = {"numpy": [], "torch": []}
    for _ in range(args.repeats):
        for name in cold:
            proc = subprocess.run([common.PYTHON, "-c", _COLD, name, str(blob)], capture_output=True, text=True,
                                  check=True, cwd=common.ROOT)
            cold[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    record = {"latency_ms": latency, "cold": cold, "max_value_error": max_err}
    common.append_jsonl(common.OUT / "cnn_runtime.jsonl", record)

    rows = []
    for name in ("numpy", "torch"):
        med = {k: statistics.median(c[k] for c in cold[name]) for k in ("import_s", "build_s", "first_call_s",
                                                                         "total_s")}
        rows.append([name, statistics.median(latency[name]), min(latency[name]), med["import_s"] * 1e3,
                     med["build_s"] * 1e3, med["first_call_s"] * 1e3, med["total_s"] * 1e3])
    rows.append(["numpy, 2 BLAS threads", statistics.median(latency["numpy2"]), min(latency["numpy2"]), None, None,
                 None, None])
    numpy_ms, torch_ms = rows[0][1], rows[1][1]
    # a cold start is paid once per instance, a step thousands of times: weigh both
    frag_numpy, frag_torch = rows[0][6] + 128 * numpy_ms, rows[1][6] + 128 * torch_ms
    if numpy_ms <= torch_ms and rows[0][6] <= rows[1][6]:
        verdict = "**Choice: NumPy**: it is faster both per step and to cold-start."
    else:
        best = "NumPy" if frag_numpy <= frag_torch else "torch"
        verdict = (f"Neither wins both; a cold instance's first 128-step fragment costs {frag_numpy:,.0f} ms with "
                   f"NumPy and {frag_torch:,.0f} ms with torch. **Choice by these numbers: {best}.**")
    text = f"""## 4. Runtime of the CNN rollout function: NumPy vs torch

The Nature CNN (3 convolutions, 512-unit dense layer, {ACTIONS} actions) on one 4×84×84 uint8 frame stack, as a
rollout function runs it once per env step. "per step" is the median over {args.repeats} interleaved blocks of
{args.steps} single-observation calls in one process (torch with one thread, under `no_grad`); "cold" is a fresh
process each time (median of {args.repeats}): importing the runtime and our modules (for NumPy: the rollout
function's module, as an instance does), building the policy from the published weights, and the first call. Both
run one thread: torch via `set_num_threads(1)`, NumPy's OpenBLAS via `threadpoolctl`, as the rollout function sets
it. The last row is NumPy with two OpenBLAS threads: on shared, busy cores its threads contend (while a Pong run
used both cores, an ad-hoc check measured 30–50 ms a step with two threads against 1.3 ms with one; that is why
rollout functions pin BLAS to one thread).
NumPy's convolutions are im2col (a strided window view, one copy) and one
matmul each, in NHWC layout with the weights reordered once at load; its values match torch's to
{max_err:.1e}.

{common.markdown_table(["runtime", "per step ms (median)", "per step ms (best)", "cold: import ms",
                        "cold: build ms", "cold: first call ms", "cold: total ms"], rows, 2)}

NumPy's step takes {numpy_ms / torch_ms:.2f}× torch's time and its cold start {rows[0][6] / rows[1][6]:.2f}×.
{verdict} The rollout function therefore stays torch-free for every policy (MLP and CNN).
onnxruntime was not measured: it is not among this project's dependencies and would need an export path
of its own. These runs shared the 2 cores with other developers' work: compare the rows side by side, not with
other sections.

{common.provenance(started)}
"""
    common.write_section("cnn_runtime", text)
    print(text)


if __name__ == "__main__":
    main()
