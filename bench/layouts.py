"""Learning per round across layouts (issue 21): at a constant batch, do many short fragments learn worse?

Every arm trains Hopper-v5 (MuJoCo preset) for 300k steps with ``--batch-size 4096``: n functions each step
4096 / n steps, so every round learns on the same 4,096 samples and rounds are equal env steps across arms.
Arms 8x512, 32x128, 64x64, 128x32; seeds 1-3 first, then 4-5. Two trainings at a time; each finished run
appends one JSON line to bench/out/layouts.jsonl, and a run whose summary.json exists is not run again, so a
cut session resumes where it stopped.

    .venv/bin/python bench/layouts.py                 # run what is missing, then print the tables
    .venv/bin/python bench/layouts.py --reuse         # only re-render from bench/out/layouts.jsonl
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

import numpy as np
from common import OUT, ROOT, append_jsonl, load_average, load_jsonl, log, markdown_table

from minionsrl.experiments.compare import bootstrap_ci
from minionsrl.loop.metrics import read_metrics

RESULTS = OUT / "layouts.jsonl"
RUNS = OUT / "layouts"
CLI = str(Path(sys.executable).parent / "minionsrl")
ARMS = (8, 32, 64, 128)
BATCH = 4096
AT_ROUNDS = (10, 30, 60)  # eval return at equal rounds (= equal env steps: every arm has the same batch)
COMMON = ["--env-id", "Hopper-v5", "--preset", "mujoco", "--total-timesteps", "300000", "--batch-size",
          str(BATCH), "--max-concurrency", "16", "--eval-every", "10", "--eval-episodes", "5", "--no-progress",
          "--no-tensorboard"]


def command(actors: int, seed: int) -> list[str]:
    return [CLI, "train", *COMMON, "--actors", str(actors), "--seed", str(seed),
            "--run-dir", str(RUNS / f"a{actors}-s{seed}")]


def record(actors: int, seed: int) -> dict[str, Any]:
    """One finished run, from its summary.json and metrics.csv."""
    run_dir = RUNS / f"a{actors}-s{seed}"
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = read_metrics(run_dir)
    evals = {str(int(float(r["round"]))): float(r["eval_return_mean"]) for r in rows if r.get("eval_return_mean")}
    return {"actors": actors, "seed": seed, "rounds": summary["rounds"], "env_steps": summary["env_steps"],
            "wall_s": summary["wall_s"], "final_eval": summary["final_eval_return"],
            "best_eval": summary["best_eval_return"], "train_last100": summary["train_return_last100"],
            "projected_cloud_s": summary["projected_cloud_s"], "cost_usd": summary["cost_usd"]["serverless"],
            "projected_round_s": statistics.median(float(r["projected_round_s"]) for r in rows[1:] or rows),
            "evals": evals, "load": load_average()}


def train(actors: int, seed: int) -> dict[str, Any]:
    run_dir = RUNS / f"a{actors}-s{seed}"
    if not (run_dir / "summary.json").exists():
        shutil.rmtree(run_dir, ignore_errors=True)  # a cut run starts over
        proc = subprocess.run(command(actors, seed), cwd=ROOT, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"{actors}x{BATCH // actors} seed {seed} failed:\n{proc.stderr[-2000:]}")
    return record(actors, seed)


def mean_ci(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:,.0f}" if values else "—"
    lo, hi = bootstrap_ci(values)
    return f"{np.mean(values):,.0f} [{lo:,.0f}, {hi:,.0f}]"


def diff_ci(a: list[float], b: list[float], draws: int = 2000, seed: int = 0) -> str:
    """Mean of a minus mean of b, with a percentile bootstrap interval (each arm resampled on its own)."""
    if len(a) < 2 or len(b) < 2:
        return "—"
    rng = np.random.default_rng(seed)
    d = rng.choice(a, (draws, len(a))).mean(1) - rng.choice(b, (draws, len(b))).mean(1)
    lo, hi = np.quantile(d, [0.025, 0.975])
    return f"{np.mean(a) - np.mean(b):+,.0f} [{lo:+,.0f}, {hi:+,.0f}]"


def table(records: list[dict[str, Any]]) -> str:
    rows = []
    ref = [r["final_eval"] for r in records if r["actors"] == ARMS[0]]
    for n in ARMS:
        rs = sorted((r for r in records if r["actors"] == n), key=lambda r: r["seed"])
        if not rs:
            continue
        final = [r["final_eval"] for r in rs]
        at = [mean_ci([r["evals"][str(k)] for r in rs if str(k) in r["evals"]]) for k in AT_ROUNDS]
        rows.append([f"{n}x{BATCH // n}", ",".join(str(r["seed"]) for r in rs), mean_ci(final),
                     diff_ci(final, ref) if n != ARMS[0] else "—", mean_ci([r["train_last100"] for r in rs]), *at,
                     statistics.median(r["projected_round_s"] for r in rs),
                     statistics.fmean(r["projected_cloud_s"] for r in rs),
                     statistics.fmean(r["cost_usd"] for r in rs)])
    headers = ["layout", "seeds", "final eval return", f"vs {ARMS[0]}x{BATCH // ARMS[0]}", "train return last100",
               *(f"eval @ round {k}" for k in AT_ROUNDS), "median projected round s", "projected s / run",
               "serverless $ / run"]
    return markdown_table(headers, rows, digits=[0] * (5 + len(AT_ROUNDS)) + [2, 0, 4])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="only re-render from the results already measured")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--jobs", type=int, default=2, help="trainings at a time (the machine has 2 cores)")
    args = parser.parse_args()
    if not args.reuse:
        done = {(r["actors"], r["seed"]) for r in load_jsonl(RESULTS)}
        todo = [(n, s) for s in args.seeds for n in ARMS if (n, s) not in done]
        log(f"{len(todo)} runs to go; e.g. {' '.join(command(*todo[0])) if todo else '-'}")
        with ThreadPoolExecutor(args.jobs) as pool:
            futures = {pool.submit(train, n, s): (n, s) for n, s in todo}
            for future in as_completed(futures):
                n, s = futures[future]
                try:
                    rec = future.result()
                except Exception as exc:  # one failed run must not lose the others
                    log(f"{n}x{BATCH // n} seed {s}: {exc}")
                    continue
                append_jsonl(RESULTS, rec)
                log(f"{n}x{BATCH // n} seed {s}: final eval {rec['final_eval']:.0f}, wall {rec['wall_s']:.0f} s")
    print(table(load_jsonl(RESULTS)))


if __name__ == "__main__":
    main()
