"""Benchmark: what more actors buy under a constant batch (``--batch-size``): a shorter round, not a larger batch.

Two cases, each trained with 8 and with 64 actors and the same ``--batch-size`` (seed 1):

- Hopper-v5 (MuJoCo preset), 100k steps: the projected cloud round (each function on its own instance,
  docs/COST.md) against this machine's round, where 64 functions queue on its few cores;
- CartPole-v1 with ``--env-step-latency-ms 5`` (a step that waits on something remote, sleeping) and
  ``--max-concurrency 64``: the 64 functions really run side by side here, so the wall time shows it.

Per case the median over rounds 2.. (round 1 holds the cold starts) of the round's phases, from metrics.csv.

    .venv/bin/python bench/batch_size.py
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from common import OUT, append_jsonl, load_jsonl, log, markdown_table, publish_section, run_minionsrl

from minionsrl.loop.metrics import read_metrics

RESULTS = OUT / "batch_size.jsonl"
BATCH = 4096
ACTORS = (8, 64)
CASES = {  # name: config over the common one
    "Hopper-v5": {"env_id": "Hopper-v5", "total_timesteps": 100_000},
    "CartPole-v1, 5 ms a step": {"env_id": "CartPole-v1", "env_step_latency_ms": 5.0, "max_rounds": 8,
                                 "max_concurrency": 64},
}
PHASES = ("round_s", "sample_s", "learn_s", "projected_round_s")


def run(name: str, actors: int) -> dict:
    run_dir = OUT / "batch_size" / f"{name.split(',')[0]}-{actors}"
    summary = run_minionsrl({**CASES[name], "seed": 1, "actors": actors, "batch_size": BATCH, "eval_every": 0,
                             "eval_episodes": 5, "progress": False, "tensorboard": False, "run_dir": str(run_dir)})
    rows = read_metrics(run_dir)
    later = rows[1:] or rows
    return {"case": name, "actors": actors, "rounds": summary["rounds"], "env_steps": summary["env_steps"],
            "steps_per_round": sorted({int(float(r["env_steps"])) - int(float(p["env_steps"]))
                                       for p, r in itertools.pairwise(rows)}),
            **{k: statistics.median(float(r[k]) for r in later) for k in PHASES},
            "wall_s": sum(float(r["round_s"]) for r in rows), "eval_return": rows[-1]["eval_return_mean"]}


def reading(records: list[dict]) -> str:
    """What the table says, case by case: 64 actors against 8, on this machine and in the projected cloud."""
    lines = []
    for name in CASES:
        few, many = ({k: r[k] for k in PHASES} for a in ACTORS for r in records if r["case"] == name
                     and r["actors"] == a)
        lines.append(f"- {name}: with 64 actors instead of 8 a round takes {many['round_s'] / few['round_s']:.2f}x "
                     f"the time here (sampling {many['sample_s'] / few['sample_s']:.2f}x) and "
                     f"{many['projected_round_s'] / few['projected_round_s']:.2f}x projected, for the same batch.")
    return "\n".join([*lines, "- The final returns differ because the two runs sample different fragments (one "
                               "seed each, a short run): this table is about time, not learning."])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reuse", action="store_true", help="render the section from the results already measured")
    args = parser.parse_args()
    started = time.time()
    if not args.reuse:
        RESULTS.unlink(missing_ok=True)
        for name in CASES:
            for actors in ACTORS:
                record = run(name, actors)
                append_jsonl(RESULTS, record)
                log(f"{name}, {actors} actors: median round {record['round_s']:.2f} s, projected "
                    f"{record['projected_round_s']:.2f} s")
    records = load_jsonl(RESULTS)
    if args.reuse:
        started = RESULTS.stat().st_mtime - sum(r["wall_s"] for r in records)
    rows = [[r["case"], r["actors"], BATCH // r["actors"], "/".join(map(str, r["steps_per_round"])), r["rounds"],
             r["env_steps"], r["sample_s"], r["learn_s"], r["round_s"], r["projected_round_s"],
             float(r["eval_return"]) if r["eval_return"] else None] for r in records]
    table = markdown_table(["case", "actors", "steps per function", "samples per round", "rounds", "env steps",
                            "sample s", "learn s", "round s (this machine)", "projected round s",
                            "final eval return"], rows, digits=[0, 0, 0, 0, 0, 0, 2, 2, 2, 2, 0])
    section = f"""## 12. Actors that buy time: a constant batch (`--batch-size`) and a latency-bound env

With `--batch-size {BATCH}` every round learns on exactly {BATCH:,} samples whatever the actor count: each of `n`
functions steps `{BATCH} / n` steps (DESIGN §1), so 64 actors step 64 each where 8 step 512, and the learner's
work per round is the same. Columns are medians over rounds 2.. from the run's metrics.csv (round 1 holds the
cold starts; the first run of each env also compiles the update in its first rounds, which the JAX cache spares
the second, so sums over all rounds would flatter whichever ran second: not shown); "projected" is the cloud
round, each function on its own instance (docs/COST.md); one run per row, seed 1, 8 actors first. Hopper's
functions compute: on this 2-core machine 64 of them queue on the cores, so only the projected round can show
what they buy. CartPole's steps each wait 5 ms (`--env-step-latency-ms 5`, sleeping), and `--max-concurrency 64`
lets 64 functions wait side by side here, so this machine's own round shows it.

{table}

{reading(records)}
"""
    publish_section("batch_size", section, started, RESULTS)


if __name__ == "__main__":
    main()
