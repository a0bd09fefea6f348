"""The policy a run hands back: SB3's five lines, and each classic-control preset at its own budget (issue 56).

For each job and seed: ``train(TrainConfig(env_id=..., total_timesteps=N, seed=s))`` (``--preset auto``, 8 local
actors, nothing else set), then ``evaluate(load_policy(run))`` — the policy a run hands back by default, the last
round's — and ``evaluate(load_policy(run, which="best"))``, 20 deterministic episodes each (the seeds ``minionsrl
eval`` uses). The goals: CartPole-v1 at 50k steps, the last policy at 475 or more on 10 of 10 seeds; Pendulum,
Acrobot and LunarLander at their presets' budgets, the last policy within 10% of the best evaluated one
(:func:`minionsrl.experiments.policy.well_below`, the rule ``WorseThanBest`` warns on) on 5 of 5 seeds. Each
finished run is appended to bench/out/handed_back.jsonl at once and a rerun skips what is there, so a cut
session resumes; the table is printed and written to docs/results/handed-back.md.

    .venv/bin/python bench/handed_back.py [--jobs cartpole pendulum acrobot lunarlander]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import OUT, ROOT, append_jsonl, find_result, fmt, load_jsonl, markdown_table, provenance

import minionsrl
from minionsrl import TrainConfig, train
from minionsrl.experiments.policy import well_below

# job -> (env id, steps, seeds, the last policy's goal: a return, or None for "within 10% of the best")
JOBS: dict[str, tuple[str, int, list[int], float | None]] = {
    "cartpole": ("CartPole-v1", 50_000, list(range(1, 11)), 475.0),
    "pendulum": ("Pendulum-v1", 100_000, list(range(1, 6)), None),
    "acrobot": ("Acrobot-v1", 200_000, list(range(1, 6)), None),
    "lunarlander": ("LunarLander-v3", 1_000_000, list(range(1, 6)), None),
}
OUT_FILE = OUT / "handed_back.jsonl"
DOC = ROOT / "docs" / "results" / "handed-back.md"
EVAL_EPISODES = 20


def run_one(job: str, seed: int) -> dict[str, Any]:
    """Train one run of ``job`` in a temporary run dir, then evaluate the policy it hands back and its best."""
    env_id, steps, _, _ = JOBS[job]
    run_dir = Path(tempfile.mkdtemp(prefix="handed-back-")) / "run"
    try:
        started = time.perf_counter()
        summary = train(TrainConfig(env_id=env_id, total_timesteps=steps, seed=seed, run_dir=str(run_dir),
                                    progress=False, tensorboard=False), plots=False)
        train_s = time.perf_counter() - started
        last, _ = minionsrl.evaluate(minionsrl.load_policy(run_dir), n_episodes=EVAL_EPISODES)
        best, _ = minionsrl.evaluate(minionsrl.load_policy(run_dir, which="best"), n_episodes=EVAL_EPISODES)
    finally:
        shutil.rmtree(run_dir.parent, ignore_errors=True)
    return {"job": job, "env_id": env_id, "steps": steps, "seed": seed, "last_return": last, "best_return": best,
            "best_round": summary["best_round"], "rounds": summary["rounds"], "train_s": train_s,
            "ended_at": time.time()}


def good(row: dict[str, Any]) -> bool:
    """Whether the handed-back policy meets its job's goal."""
    goal = JOBS[row["job"]][3]
    return row["last_return"] >= goal if goal is not None else not well_below(row["last_return"], row["best_return"])


def table(rows: list[dict[str, Any]], jobs: list[str]) -> str:
    """One row a job: its goal, how many seeds met it, and every seed's last (best) return."""
    body = []
    for job in jobs:
        env_id, steps, seeds, goal = JOBS[job]
        got = [r for s in seeds if (r := find_result(rows, job=job, seed=s))]
        if not got:
            continue
        means = [statistics.mean(r[k] for r in got) for k in ("last_return", "best_return")]
        body.append([env_id, f"{steps:,}", f"≥ {goal:g}" if goal is not None else "within 10% of best",
                     f"{sum(map(good, got))} of {len(got)}", fmt(means[0]), fmt(means[1]),
                     ", ".join(f"{fmt(r['last_return'])} ({fmt(r['best_return'])})" for r in got)])
    return markdown_table(["env", "steps", "the handed-back policy's goal", "seeds met", "mean last", "mean best",
                           "each seed: last (best)"], body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    args = parser.parse_args()
    for job in args.jobs:
        for seed in JOBS[job][2]:
            if find_result(load_jsonl(OUT_FILE), job=job, seed=seed) is None:
                row = run_one(job, seed)
                append_jsonl(OUT_FILE, row)
                print(f"{job} seed {seed}: last {row['last_return']:.1f}, best {row['best_return']:.1f} "
                      f"({row['train_s']:.0f} s)", flush=True)
    rows = [r for r in load_jsonl(OUT_FILE) if r["job"] in args.jobs]
    text = table(rows, args.jobs)
    ended = max(r["ended_at"] for r in rows)  # the runs are sequential: they took their training seconds and more
    started = min(r["ended_at"] - r["train_s"] for r in rows)
    print(text)
    DOC.write_text("# The policy a run hands back\n\n"
                   f"Reproduce: `.venv/bin/python bench/handed_back.py --jobs {' '.join(args.jobs)}` (a rerun skips "
                   "the runs bench/out/handed_back.jsonl holds).\n\n" + __doc__.split("\n\n")[1].replace("\n", " ")
                   + "\n\n" + text + "\n\n" + provenance(started, ended) + "\n")


if __name__ == "__main__":
    main()
