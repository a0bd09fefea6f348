"""Does the local backend's concurrency follow functions that mostly wait (issue 42)?

A custom env whose ``step`` sleeps 10 ms inside (``custom_env:CounterEnv``, ``sleep_s=0.01``: not
``--env-step-latency-ms``), a constant batch of 4,096 samples a round (so 64 functions step 64 times each, 8 step
512 times), the policy 64-64. Each arm trains ``--rounds`` rounds with default flags, and once more with
``--max-concurrency`` set to this machine's CPU count (the default before: waiting functions queued behind the
cores). Reported: the median wall time of a round over the rounds after the first two (instances started,
programs compiled) and before the last (which evaluates), and how many instances ran.

    .venv/bin/python docs/archive/bench/local_concurrency.py [--rounds 8] [--out docs/results/local-concurrency.md]

Goal (issue 42): 64 functions take ≤ 0.25x the wall time of 8 per round, with no flag.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]  # docs/archive/bench/ -> the repository
ENV = ["--env-id", "custom_env:CounterEnv", "--env-kwargs", json.dumps({"length": 1000, "sleep_s": 0.01})]
COMMON = ["--batch-size", "4096", "--hidden-sizes", "64", "64", "--eval-every", "0", "--no-progress",
          "--no-tensorboard"]


def run(actors: int, rounds: int, folder: Path, concurrency: int | None) -> dict[str, float]:
    """One arm; its median warm round and the instances it started."""
    run_dir = folder / f"n{actors}-c{concurrency or 'auto'}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), str(REPO)])}
    cmd = [sys.executable, "-m", "minionsrl", "train", *ENV, *COMMON, "--actors", str(actors), "--max-rounds",
           str(rounds), "--run-dir", str(run_dir), *(["--max-concurrency", str(concurrency)] if concurrency else [])]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    with open(run_dir / "invocations.csv") as fh:
        instances = {r["instance_id"] for r in csv.DictReader(fh)}
    warm = rows[2:-1]  # not the first two (instances start), nor the last (it evaluates: 10 episodes of 10 s)
    return {"round_s": statistics.median(float(r["round_s"]) for r in warm), "instances": len(instances),
            "total_s": time.perf_counter() - t0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--out", default=str(REPO / "docs" / "results" / "local-concurrency.md"))
    args = parser.parse_args()
    cpus = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="minionsrl-concurrency-") as tmp:
        arms = {(n, c): run(n, args.rounds, Path(tmp), c) for c in (None, cpus) for n in (8, 64)}
    lines = [f"# Local concurrency that follows waiting functions ({cpus} CPUs)", "",
             "A step that sleeps 10 ms inside the env, 4,096 samples a round; the median wall time of a round after "
             f"the first two and before the last, {args.rounds} rounds an arm, one run each, side by side in one "
             "script run.", "",
             "| concurrency | 8 functions: round (s) | instances | 64 functions: round (s) | instances | 64 / 8 |",
             "|---|---:|---:|---:|---:|---:|"]
    for c in (None, cpus):
        a, b = arms[(8, c)], arms[(64, c)]
        label = "default (follows the functions)" if c is None else f"`--max-concurrency {c}` (one per CPU)"
        lines.append(f"| {label} | {a['round_s']:.2f} | {a['instances']} | {b['round_s']:.2f} | {b['instances']} | "
                     f"{b['round_s'] / a['round_s']:.2f}x |")
    ratio = arms[(64, None)]["round_s"] / arms[(8, None)]["round_s"]
    lines += ["", f"Goal: 64 functions ≤ 0.25x the wall time of 8 per round, no flag: **{ratio:.2f}x, "
              f"{'met' if ratio <= 0.25 else 'missed'}**.", "",
              "Reproduce: `.venv/bin/python docs/archive/bench/local_concurrency.py`"]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
