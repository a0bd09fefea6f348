"""The golden runs (issue 44): short PPO, APPO and pipelined runs on CartPole and Hopper whose learning must not
change while the code is reorganised. What a run learned is kept as its metrics rows' learning columns (every
float as the CSV writes it, in full) and the digests of its final policy's arrays (weights and observation
statistics, sorted, so that a renamed key does not count as a change).

    .venv/bin/python tests/golden/learning.py          # record them on this machine's kind (a kind without a record)
    .venv/bin/python tests/golden/learning.py --only   # ... and drop the other kinds' (learning is meant to change)

A record is exact only on the machine kind it was made on: XLA compiles for the host's vector instructions and
MuJoCo's wheels dispatch on them too, so each record names that signature (:func:`signature`); the file keeps one
record per kind (recording replaces this machine's kind's only), and the test compares against the record of its
machine's kind and says why it skips on a kind with none."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

RECORD = Path(__file__).with_name("learning.json")
REPO = Path(__file__).resolve().parents[2]
COMMON = ["--seed", "7", "--max-rounds", "3", "--eval-every", "3", "--eval-episodes", "2", "--no-progress",
          "--no-tensorboard", "--max-concurrency", "2"]
# the value loss clipped as the runs were recorded (CartPole's preset row unclipped it after): the record holds the code
CARTPOLE = ["--env-id", "CartPole-v1", "--actors", "4", "--fragment-length", "64", "--clip-vloss"]
HOPPER = ["--env-id", "Hopper-v5", "--actors", "2", "--fragment-length", "256", "--eval-max-steps", "200"]
RUNS = {
    "cartpole-ppo": [*CARTPOLE],
    # one function in flight: each update learns on the one fragment that arrives, whatever the machine's timing (with
    # more, which fragments make up an update depends on arrival order: asynchronous runs are not reproducible)
    "cartpole-appo": [*CARTPOLE, "--algo", "appo", "--actors", "1"],
    "cartpole-ppo-pipeline": [*CARTPOLE, "--pipeline"],
    "hopper-ppo": [*HOPPER],
    "hopper-appo": [*HOPPER, "--algo", "appo", "--actors", "1"],
    "hopper-ppo-pipeline": [*HOPPER, "--pipeline"],
}
_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512dq", "avx512vl", "avx512_vnni", "avx512_bf16")
_PACKAGES = ("jax", "jaxlib", "numpy", "gymnasium", "mujoco")


def signature() -> dict[str, Any]:
    """What the exact numbers depend on beyond the code: the CPU's vector instructions and the numeric packages."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {"machine": platform.machine(), "cpu_flags": sorted(f for f in _FLAGS if f in flags),
            "packages": {p: metadata.version(p) for p in _PACKAGES}}


def _digests(tree: Any) -> list[str]:
    if isinstance(tree, dict):
        return [d for v in tree.values() for d in _digests(v)]
    if isinstance(tree, (list, tuple)):
        return [d for v in tree for d in _digests(v)]
    a = np.ascontiguousarray(np.asarray(tree))
    if a.dtype == object:  # None (a run without observation statistics): its repr, not its pointer's bytes
        return [repr(tree)]
    return [f"{a.dtype}{list(a.shape)}:{hashlib.sha256(a.tobytes()).hexdigest()[:16]}"]


def learned(run_dir: Path) -> dict[str, Any]:
    """What a finished run learned: its rows' learning columns, and its final policy's array digests."""
    from minionsrl.loop import checkpoint
    from minionsrl.loop.metrics import LEARNING_COLUMNS, read_metrics

    state = checkpoint.load(checkpoint.dir_of(run_dir))
    return {"rows": [{k: r[k] for k in LEARNING_COLUMNS} for r in read_metrics(run_dir)],
            "policy": sorted(_digests({k: state[k] for k in checkpoint.POLICY_KEYS if k in state}))}


def run(name: str, folder: Path) -> dict[str, Any]:
    """Train the golden run ``name`` into ``folder / name`` through the command line, in an interpreter of its own
    (as a user's ``minionsrl train``: what an earlier run in the same process set up, XLA's threads among it, must
    not decide the numbers); what it learned."""
    run_dir = folder / name
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "minionsrl", "train", *RUNS[name], *COMMON, "--run-dir",
                           str(run_dir)], env=env, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise RuntimeError(f"the golden run {name} failed: {done.stderr.strip()[-500:]}")
    return learned(run_dir)


def records() -> list[dict[str, Any]]:
    """The file's records, one per machine kind: each its ``signature`` and ``runs``."""
    return json.loads(RECORD.read_text())["records"] if RECORD.exists() else []


def matching(signature_: dict[str, Any]) -> dict[str, Any] | None:
    """The runs recorded on a machine of ``signature_``'s kind, if any were."""
    return next((r["runs"] for r in records() if r["signature"] == signature_), None)


def record(only: bool = False) -> None:
    """Record the runs on this machine's kind, replacing its record; ``only``: drop the other kinds' records too."""
    with tempfile.TemporaryDirectory(prefix="minionsrl-golden-") as tmp:
        runs = {name: run(name, Path(tmp)) for name in RUNS}
    here = signature()
    kept = [] if only else [r for r in records() if r["signature"] != here]
    RECORD.write_text(json.dumps({"records": [*kept, {"signature": here, "runs": runs}]}, indent=1) + "\n")
    print(f"recorded {len(runs)} runs in {RECORD} for {here}")


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    record(only="--only" in sys.argv[1:])
