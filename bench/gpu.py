"""The learner on a GPU (issue 25): measured on a machine that has one, reported on this one.

On the device machine, from the repository root (``bench/gpu_check.sh`` runs every step, writing under ``$OUT``):

    python3 bench/gpu.py facts --out DIR --commit C   # the machine, its card, the versions that ran
    python3 bench/gpu.py learner --out DIR            # the update on the CPU (one core) and on the GPU

``learner`` times :meth:`minionsrl.learner.engine.SGDEngine.update` as the trainer calls it (minibatch draw,
padding, transfer, the compiled program, statistics read back) at three sizes: (a) Hopper, 4,096 samples, 10 epochs
of 64-sample minibatches; (b) Hopper, 32,768 samples, 10 epochs of 32 minibatches; (c) the Nature CNN, 1,024
frames, 4 epochs of 256 (the Atari preset's round). Each size and device is a fresh process (its first call
compiles); the CPU one is pinned to one core with XLA on one thread, as BENCHMARKS §8 measures it.

Back here, with DIR fetched: ``.venv/bin/python bench/gpu.py report --from DIR`` writes the section ``gpu`` of
docs/BENCHMARKS.md from those files and the runs ``gpu_check.sh`` made (Hopper-v5 1M steps, Pong).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# (architecture, rows, PPO's epochs and minibatches) of each measured update
SIZES: dict[str, tuple[str, int, dict[str, Any]]] = {
    "a": ("hopper", 4096, {"update_epochs": 10, "minibatch_size": 64}),
    "b": ("hopper", 32768, {"update_epochs": 10, "minibatch_size": None, "num_minibatches": 32}),
    "c": ("cnn", 1024, {"update_epochs": 4, "minibatch_size": 256}),
}
REPS = {"cpu": {"a": 10, "b": 10, "c": 2}, "cuda": {"a": 10, "b": 10, "c": 10}}  # the CNN takes seconds on a CPU
DISTS = ("jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "optax", "numpy", "gymnasium", "mujoco",
         "ale-py")


def facts(out: Path, commit: str) -> None:
    """The machine, its card and the versions, as ``facts.json``."""
    import importlib.metadata

    import jax

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip()
    except OSError:  # no NVIDIA driver here
        smi = ""
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    record = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit, "gpu": smi,
              "jax_devices": [str(d) for d in jax.devices()], "cpu": cpu, "cores": os.cpu_count(),
              "python": platform.python_version(), "versions": {d: v for d in DISTS if (v := version(d))}}
    (out / "facts.json").write_text(json.dumps(record, indent=1))
    print(json.dumps(record))


def _arch(kind: str):
    from minionsrl.function.numpy_policy import PolicyArch

    if kind == "cnn":
        return PolicyArch(4 * 84 * 84, 6, True, (), "cnn", (4, 84, 84))
    return PolicyArch(11, 3, False, (64, 64))  # Hopper-v5: 11 observations, 3 torques, 64-64 tanh towers


def time_update(size: str, device: str, reps: int) -> dict[str, Any]:
    """One process's timings of the update at ``size`` on ``device``: the first call and the median of ``reps``."""
    import numpy as np

    from minionsrl.learner import runtime

    if device == "cpu":
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core, as the CPU learner runs beside functions
    runtime.configure(1)
    import jax

    from minionsrl.learner.batch import Batch
    from minionsrl.learner.engine import SGDEngine
    from minionsrl.learner.networks import init_params
    from minionsrl.learner.ppo import PPOParams, ppo_loss

    kind, rows, ppo = SIZES[size]
    arch = _arch(kind)
    r = np.random.default_rng(0)
    f32 = np.float32
    obs = (r.integers(0, 256, (rows, *arch.obs_shape), dtype=np.uint8) if arch.image
           else r.standard_normal((rows, arch.obs_dim)).astype(f32))
    actions = (r.integers(0, arch.action_dim, rows) if arch.discrete
               else r.standard_normal((rows, arch.action_dim))).astype(f32)
    batch = Batch(obs, actions, (r.standard_normal(rows) * 0.1 - 1.5).astype(f32),
                  *(r.standard_normal(rows).astype(f32) for _ in range(3)))
    target = jax.devices("cpu" if device == "cpu" else "gpu")[0]
    engine = SGDEngine(arch, init_params(arch, 0), PPOParams(learning_rate=3e-4, **ppo), ppo_loss, target)
    times = []
    for i in range(reps + 1):
        started = time.perf_counter()
        engine.update(batch, np.random.default_rng(i))  # its statistics come back to the host: the work is done
        times.append(time.perf_counter() - started)
    return {"size": size, "device": device, "rows": rows, "first_s": times[0], "median_s": float(np.median(times[1:])),
            "times": times[1:], "device_name": str(target)}


def learner(out: Path, sizes: str) -> None:
    """Each size on each device, each in a fresh process; rows appended to ``learner.jsonl`` as they finish."""
    env = {**os.environ, "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}
    for size in sizes:
        for device in ("cpu", "cuda"):
            proc = subprocess.run([sys.executable, __file__, "time", size, device, str(REPS[device][size])], env=env,
                                  capture_output=True, text=True, cwd=ROOT, check=False)
            if proc.returncode:
                print(f"{size} on {device} failed:\n{proc.stderr[-3000:]}", flush=True)
                continue
            row = proc.stdout.strip().splitlines()[-1]
            with open(out / "learner.jsonl", "a") as fh:
                fh.write(row + "\n")
            print(row, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("facts")
    f.add_argument("--out", type=Path, required=True)
    f.add_argument("--commit", default="unknown")
    lp = sub.add_parser("learner")
    lp.add_argument("--out", type=Path, required=True)
    lp.add_argument("--sizes", default="".join(SIZES), help="which of (a), (b), (c): e.g. ab")
    t = sub.add_parser("time")
    t.add_argument("size", choices=list(SIZES))
    t.add_argument("device", choices=["cpu", "cuda"])
    t.add_argument("reps", type=int)
    args = ap.parse_args()
    if args.cmd == "facts":
        facts(args.out, args.commit)
    elif args.cmd == "learner":
        learner(args.out, args.sizes)
    else:
        print(json.dumps(time_update(args.size, args.device, args.reps)))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
